//! The demo's first phases: the nodes and providers it pays on, then payoutd itself on SQLite with a
//! funded merchant.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, ensure};
use payoutd_demo::api::{Api, As};
use payoutd_demo::intake;
use payoutd_demo::kms::KmsWallet;
use payoutd_demo::providers::ProviderSide;
use payoutd_demo::report::{Checks, say};
use payoutd_demo::rng::random_bytes;
use payoutd_demo::server::{
    self, ChainSetup, ETH, HOT_WALLET_KEY_ENV, Payoutd, TOKEN_SUPPLY, USDC,
};
use payoutd_demo::solana::SolanaSide;
use payoutd_demo::webhooks::PaidWebhooks;
use payoutd_domain::{Amount, EvmAddress};
use payoutd_rail_evm::{EvmRpc, SigningKey};
use payoutd_testkit::{ANVIL_KEY_0, Anvil, FaultProxy, TEST_TOKEN_DECIMALS, deploy_test_token};
use reqwest::StatusCode;
use serde_json::json;

use crate::cli::{Args, Signer};
use crate::node::evm_node;
use crate::{
    BLOCK_TIME_SECS, ETH_DEPOSIT_WEI, HOT_WALLET_GAS_MARGIN_WEI, MERCHANT_NAME, READY_TIMEOUT_SECS,
    USDC_DEPOSIT,
};

/// The chains and providers the run pays on.
pub(crate) struct Nodes {
    /// The anvil the demo started (none when it was given a node), held so it lives as long as the
    /// run and stops when the run is dropped.
    _anvil: Option<Anvil>,
    pub node_url: String,
    pub rpc: EvmRpc,
    pub chain_id: u64,
    /// The hot wallet: the deployer, or a KMS key the deployer funded.
    pub wallet: EvmAddress,
    pub token: EvmAddress,
    /// Transactions of the wallet before this block are not the run's to count.
    pub first_block: u64,
    pub kms: Option<KmsWallet>,
    pub solana: SolanaSide,
    /// Between payoutd and the Solana node: loses the answers of the first sends.
    pub solana_proxy: FaultProxy,
    pub providers: ProviderSide,
}

impl Nodes {
    pub(crate) async fn start(args: &Args) -> anyhow::Result<Nodes> {
        // 1. The node: ours (interval mining) or the one given.
        let (anvil, node_url, rpc, chain_id) = evm_node(args.rpc_url.as_deref()).await?;
        let key = SigningKey::from_hex(ANVIL_KEY_0)?;
        // Over-counts (only half the payouts are ETH): the check is only against a bare wallet.
        let needed_wei = args.payouts as u128
            * (intake::ETH_AMOUNT_BASE_WEI + args.payouts as u128)
            + HOT_WALLET_GAS_MARGIN_WEI;
        let balance = rpc.balance(key.address()).await?;
        ensure!(
            balance >= Amount::from_u128(needed_wei),
            "hot wallet {} holds {balance} wei on the node; the demo needs {needed_wei}",
            key.address()
        );
        match &anvil {
            Some(_) => say(format!(
                "anvil on {node_url} (--block-time {BLOCK_TIME_SECS}), chain {chain_id}"
            )),
            None => say(format!("using the node at {node_url}, chain {chain_id}")),
        }
        // 1b. The Solana node (ours or the one given), a hot wallet funded by airdrop, a token.
        let solana = SolanaSide::start(args.solana_rpc_url.clone()).await?;
        say(format!("solana_hot_wallet={}", solana.hot_wallet()));
        say(format!(
            "Solana node on {} ({}); SPL token {} minted to the hot wallet",
            solana.rpc_url,
            if args.solana_rpc_url.is_some() { "given" } else { "started by the demo" },
            solana.mint
        ));
        let solana_proxy = solana.faulty_proxy().await;
        // 1c. The payment providers: Stripe, Coinbase, Bridge and Circle, simulated over HTTP.
        let providers = ProviderSide::start().await;
        // 2. The token, deployed by anvil's first account, which then pays.
        let first_block = rpc.block_number().await? + 1;
        let token = deploy_test_token(&rpc, &key, Amount::from_u128(TOKEN_SUPPLY))
            .await
            .context("deploy the test token")?;
        say(format!("test ERC-20 deployed at {token} by hot wallet {}", key.address()));
        let kms = kms_wallet(args.signer, &rpc, &key, token, needed_wei).await?;
        let wallet = kms.as_ref().map_or_else(|| key.address(), |k| k.address);
        Ok(Nodes {
            _anvil: anvil,
            node_url,
            rpc,
            chain_id,
            wallet,
            token,
            first_block,
            kms,
            solana,
            solana_proxy,
            providers,
        })
    }
}

/// 2b. With `--signer kms`, the hot wallet is a KMS key, funded from the deployer, which then
/// only watches.
async fn kms_wallet(
    signer: Signer,
    rpc: &EvmRpc,
    key: &SigningKey,
    token: EvmAddress,
    needed_wei: u128,
) -> anyhow::Result<Option<KmsWallet>> {
    if signer == Signer::Local {
        return Ok(None);
    }
    let kms = KmsWallet::start().await?;
    let tokens = Amount::from_u128(TOKEN_SUPPLY / 2);
    kms.fund(rpc, key, token, Amount::from_u128(needed_wei), tokens)
        .await
        .context("fund the KMS wallet")?;
    say(format!(
        "hot wallet {} is a key in a local AWS KMS: payoutd signs through KMS and never holds it",
        kms.address
    ));
    Ok(Some(kms))
}

/// payoutd on SQLite behind the fault proxy, and the merchant it pays for.
pub(crate) struct Service {
    pub payoutd: Payoutd,
    pub api: Arc<Api>,
    /// Between payoutd and the EVM node: loses, delays and refuses answers while the run goes.
    pub proxy: Arc<FaultProxy>,
    pub webhooks: PaidWebhooks,
    pub merchant_id: String,
    pub merchant_key: String,
    pub operator_key: String,
}

impl Service {
    /// 3. The proxy, the config, payoutd on SQLite, a merchant with money.
    pub(crate) async fn start(
        args: &Args,
        nodes: &Nodes,
        bin: PathBuf,
        work: &Path,
        run_tag: u32,
        checks: &mut Checks,
    ) -> anyhow::Result<Service> {
        let proxy = Arc::new(FaultProxy::start(&nodes.node_url).await);
        let config = write_config(nodes, work, &proxy)?;
        let operator_key = format!("demo-operator-{}", hex::encode(random_bytes::<16>()?));
        let env = payoutd_env(args.signer, nodes, &operator_key);
        let mut payoutd = Payoutd::new(bin, work, config, env);
        let merchant = payoutd.cli(&["merchant", "create", MERCHANT_NAME]).await?;
        let merchant_id = merchant["id"].as_str().context("merchant id")?.to_owned();
        let merchant_key = merchant["api_key"].as_str().context("merchant api_key")?.to_owned();
        let addr = payoutd.start().await?;
        let base = format!("http://{addr}");
        let api = Arc::new(Api::new(base, merchant_key.clone(), operator_key.clone())?);
        api.wait_ready(READY_TIMEOUT_SECS).await?;
        let webhooks = PaidWebhooks::register(&api).await?;
        say(format!(
            "payoutd serve (pid {}) on {} with SQLite {}; node calls go through the fault proxy {}; the merchant's webhook receiver {} listens for payout.paid",
            payoutd.pid().unwrap_or(0),
            api.base(),
            work.join("payoutd.db").display(),
            proxy.url(),
            webhooks.url()
        ));
        fund(&api, &merchant_id, run_tag, checks).await?;
        Ok(Service { payoutd, api, proxy, webhooks, merchant_id, merchant_key, operator_key })
    }
}

fn write_config(nodes: &Nodes, work: &Path, proxy: &FaultProxy) -> anyhow::Result<PathBuf> {
    let wallets_toml = nodes
        .kms
        .as_ref()
        .map_or_else(|| server::key_envs_toml(&[HOT_WALLET_KEY_ENV]), KmsWallet::chain_toml);
    let setup = ChainSetup {
        chain_id: nodes.chain_id,
        rpc_url: proxy.url(),
        token: nodes.token,
        eth_code: ETH,
        usdc_code: USDC,
        usdc_decimals: TEST_TOKEN_DECIMALS,
    };
    let config = work.join("payoutd.toml");
    std::fs::write(
        &config,
        server::config_toml(&setup, &wallets_toml)
            + &nodes.solana.config_toml(nodes.solana_proxy.url())
            + &nodes.providers.config_toml(),
    )?;
    Ok(config)
}

/// payoutd's environment: the operator key, the signers' keys or KMS settings, the log level.
fn payoutd_env(signer: Signer, nodes: &Nodes, operator_key: &str) -> Vec<(String, String)> {
    let log = std::env::var("PAYOUTD_LOG").unwrap_or_else(|_| "info".to_owned());
    let mut env = vec![
        ("PAYOUTD_OPERATOR_KEY".to_owned(), operator_key.to_owned()),
        nodes.solana.key_env(),
        ("PAYOUTD_LOG".to_owned(), log),
    ];
    match signer {
        Signer::Local => env.push((HOT_WALLET_KEY_ENV.to_owned(), ANVIL_KEY_0.to_owned())),
        Signer::Kms => env.extend(KmsWallet::env()),
    }
    env.extend(nodes.providers.env());
    env
}

/// The merchant's deposits, each sent twice: the second is the first replayed.
async fn fund(
    api: &Api,
    merchant_id: &str,
    run_tag: u32,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    for (asset, amount, name) in [(ETH, ETH_DEPOSIT_WEI, "eth"), (USDC, USDC_DEPOSIT, "usdc")] {
        let body = json!({"merchant_id": merchant_id, "asset": asset, "amount": amount.to_string(),
            "idempotency_key": format!("demo-funding-{name}-{run_tag:08x}")});
        let first = api.post("/v1/deposits", &body, As::Operator).await?;
        let again = api.post("/v1/deposits", &body, As::Operator).await?;
        checks.add(
            first.status == StatusCode::CREATED && again.status == StatusCode::OK && again.replayed,
            format!(
                "deposit of {amount} {asset} sent twice: {} then {} replayed={}",
                first.status.as_u16(),
                again.status.as_u16(),
                again.replayed
            ),
        );
    }
    Ok(())
}
