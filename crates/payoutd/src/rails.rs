//! The configured rails wired into one pipeline, what intake may accept because of them, and what start-up says about them.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Asset, AssetCode, AssetRegistry, EvmAddress, HotWallet, RailFamily};
use payoutd_engine::{Clock, EvmChain, Payable, Pipeline, PipelineStore, StandaloneLine};

use crate::config::{self, AssetsSource, ChainConfig, Config};

/// The workers for the configured rails, with wallets registered and nonce counters synced; `None`
/// when no rail is configured.
pub async fn build_pipeline(
    stores: &payoutd_store::Stores,
    cfg: &Config,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<Option<Pipeline>> {
    let store = stores.pipeline.clone();
    if cfg.chains.is_empty() && cfg.solana.is_empty() && cfg.providers.is_empty() {
        return Ok(None);
    }
    let mut pipeline = Pipeline::new(store.clone(), clock.clone(), cfg.pipeline.clone());
    for c in &cfg.chains {
        pipeline =
            pipeline.with_evm_chain(stores.evm_lines.clone(), evm_chain(c, &cfg.assets).await?);
    }
    for s in &cfg.solana {
        pipeline = pipeline.with_standalone_rail(solana_line(&store, s, &cfg.assets).await?);
    }
    for p in &cfg.providers {
        let wallet_id =
            store.ensure_signing_wallet(&format!("provider:{}", p.name), p.account()).await?;
        pipeline = pipeline.with_standalone_rail(crate::providers::provider_line(
            p,
            &cfg.assets,
            wallet_id,
            clock.clone(),
        )?);
    }
    let payable = pipeline.payable_assets();
    for route in cfg.routes.iter() {
        if let Some(missing) = route.rails().iter().find(|asset| !payable.contains(*asset)) {
            anyhow::bail!("route of {}: no configured rail pays {missing}", route.asset());
        }
    }
    pipeline = pipeline.with_routes(cfg.routes.clone());
    for route in cfg.routes.iter() {
        tracing::info!(asset = %route.asset(), rails = ?route.rails().iter().map(AssetCode::as_str).collect::<Vec<_>>(), "route across rails");
    }
    if let Some(guard) = send_guard(cfg).await? {
        pipeline = pipeline.with_guard(guard);
        tracing::info!("Redis send guard enabled");
    }
    pipeline.sync_wallets().await?;
    Ok(Some(pipeline))
}

/// The configured Redis send guard, connected; `None` when none is configured.
pub async fn send_guard(
    cfg: &Config,
) -> anyhow::Result<Option<Arc<dyn payoutd_engine::rail::SendGuard>>> {
    let Some(url) = &cfg.redis_url else { return Ok(None) };
    let guard = crate::redis_guard::RedisGuard::connect(url)
        .await
        .with_context(|| format!("Redis at {}", config::redact_url(url)))?;
    Ok(Some(Arc::new(guard)))
}

/// The API's engine asks the send guard, when one is configured, before a cancel releases a hold.
pub async fn engine_with_guard(
    engine: payoutd_engine::Engine,
    cfg: &Config,
) -> anyhow::Result<payoutd_engine::Engine> {
    Ok(match send_guard(cfg).await? {
        Some(guard) => engine.with_guard(guard),
        None => engine,
    })
}

/// An operator's pipeline with no rail: decides held payouts (approve, reject), which needs only the database.
pub fn operator_pipeline(
    store: Arc<dyn PipelineStore>,
    cfg: &Config,
    clock: Arc<dyn Clock>,
) -> Pipeline {
    Pipeline::new(store, clock, cfg.pipeline.clone())
}

/// One EVM chain: its node checked, its hot wallets and their balances logged, the assets it can pay.
async fn evm_chain(c: &ChainConfig, assets: &AssetRegistry) -> anyhow::Result<EvmChain> {
    let mut rpcs = Vec::with_capacity(c.rpc_urls.len());
    for url in &c.rpc_urls {
        let rpc = payoutd_rail_evm::EvmRpc::new(url.expose())
            .with_context(|| format!("chain {}: RPC URL {url}", c.chain_id))?;
        match rpc.chain_id().await {
            Ok(id) if id != c.chain_id => {
                anyhow::bail!("chain {}: the node at {url} is chain {id}", c.chain_id)
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(chain = c.chain_id, rpc = %url, error = %e, "cannot check the node's chain id now; will retry as we go")
            }
        }
        rpcs.push(rpc);
    }
    let on_chain: Vec<&Asset> =
        assets.iter().filter(|a| a.evm_chain_id() == Some(c.chain_id)).collect();
    for a in on_chain.iter().filter(|a| a.token == TokenKind::Other) {
        tracing::warn!(chain = c.chain_id, asset = %a.code, "no token_address for this asset: payouts in it are refused until an [[assets]] entry gives it");
    }
    let assets: Vec<Asset> =
        on_chain.into_iter().filter(|a| a.token != TokenKind::Other).cloned().collect();
    let Some(native) = assets.iter().find(|a| a.token == TokenKind::Native) else {
        anyhow::bail!(
            "chain {}: no native asset configured (an [[assets]] entry `evm:{}/<SYMBOL>` with kind = \"native\"); network fees are booked in it",
            c.chain_id,
            c.chain_id
        );
    };
    tracing::info!(chain = c.chain_id, rpc = ?c.rpc_urls, finality = %finality_rule(c.finality), max_fee_per_gas_cap_wei = c.max_fee_per_gas_cap_wei,
        send_batch_max = c.send_batch_max, assets = ?assets.iter().map(|a| a.code.as_str()).collect::<Vec<_>>(), "EVM chain");
    let wallets = hot_wallets(c, &rpcs[0], native).await;
    let node = payoutd_rail_evm::EvmNode::over_endpoints(
        rpcs,
        c.chain_id,
        c.finality,
        c.max_fee_per_gas_cap_wei,
        c.keys.clone(),
    )?
    .with_send_batch_max(c.send_batch_max);
    let node = with_signers(node, c).await?;
    Ok(EvmChain { rail: Arc::new(node), wallets, assets })
}

/// The chain's hot wallets, each one's balance logged (it pays every payout's gas).
async fn hot_wallets(
    c: &ChainConfig,
    rpc: &payoutd_rail_evm::EvmRpc,
    native: &Asset,
) -> Vec<HotWallet> {
    let addresses = c.wallet_addresses();
    let mut wallets = Vec::with_capacity(addresses.len());
    for address in addresses {
        match rpc.balance(address).await {
            Ok(balance) => {
                tracing::info!(chain = c.chain_id, hot_wallet = %address, balance_base_units = %balance, asset = %native.code,
                "hot wallet (it pays every payout's gas in the native asset: keep it funded)")
            }
            Err(e) => {
                tracing::warn!(chain = c.chain_id, hot_wallet = %address, error = %e, "hot wallet: cannot read its balance now")
            }
        }
        wallets.push(HotWallet {
            id: HotWallet::id_for(c.chain_id, &address),
            chain_id: c.chain_id,
            address,
            next_nonce: 0,
        });
    }
    wallets
}

/// The node with the chain's remote and KMS signers, each one announced.
async fn with_signers(
    mut node: payoutd_rail_evm::EvmNode,
    c: &ChainConfig,
) -> anyhow::Result<payoutd_rail_evm::EvmNode> {
    for remote in &c.remote_signers {
        let service = match &remote.bearer_token {
            Some(token) => {
                payoutd_rail_evm::EvmRpc::with_bearer_token(remote.url.expose(), token.expose())
            }
            None => payoutd_rail_evm::EvmRpc::new(remote.url.expose()),
        }
        .with_context(|| format!("chain {}: remote signer for {}", c.chain_id, remote.address))?;
        announce_remote_signer(c.chain_id, remote, &service).await;
        node =
            node.with_remote_signer(payoutd_rail_evm::RemoteSigner::new(service, remote.address));
    }
    for kms in &c.kms_signers {
        let client = payoutd_rail_evm::KmsSigner::client(
            &kms.region,
            kms.endpoint_url.as_ref().map(payoutd_domain::SecretUrl::expose),
        )
        .await;
        announce_kms_signer(c.chain_id, kms, &client).await?;
        node = node.with_kms_signer(payoutd_rail_evm::KmsSigner::new(
            client,
            kms.key_id.clone(),
            kms.address,
        ));
    }
    Ok(node)
}

/// Says at start-up whether the signer service answers and lists the wallet; a service that does
/// not is not fatal (payouts wait while it is down), but it is said here, once, plainly.
async fn announce_remote_signer(
    chain_id: u64,
    remote: &crate::config_evm::RemoteSignerConfig,
    service: &payoutd_rail_evm::EvmRpc,
) {
    let address = remote.address;
    match service.call::<Vec<String>>("eth_accounts", serde_json::json!([])).await {
        Ok(accounts) if accounts.iter().any(|a| EvmAddress::parse(a).ok() == Some(address)) => {
            tracing::info!(chain = chain_id, hot_wallet = %address, signer = %remote.url, "hot wallet signed by a signer service (its key is not in this process)");
        }
        Ok(_) => {
            tracing::warn!(chain = chain_id, hot_wallet = %address, signer = %remote.url, "the signer service does not list this wallet: its payouts wait until it signs for it")
        }
        Err(e) => {
            tracing::warn!(chain = chain_id, hot_wallet = %address, signer = %remote.url, error = %e, "the signer service does not answer now: this wallet's payouts wait for it")
        }
    }
}

/// Checks at start-up that the KMS key is the configured wallet's: another address is a
/// configuration mistake that would sign for a wallet nobody funds, and stops the start. A KMS that
/// does not answer now is said plainly; the wallet's payouts wait for it.
async fn announce_kms_signer(
    chain_id: u64,
    kms: &crate::config_evm::KmsSignerConfig,
    client: &payoutd_rail_evm::aws_sdk_kms::Client,
) -> anyhow::Result<()> {
    let address = kms.address;
    match payoutd_rail_evm::KmsSigner::key_address(client, &kms.key_id).await {
        Ok(key_address) if key_address == address => {
            tracing::info!(chain = chain_id, hot_wallet = %address, kms_key = %kms.key_id, region = %kms.region, "hot wallet signed by an AWS KMS key (its key is not in this process)");
            Ok(())
        }
        Ok(key_address) => anyhow::bail!(
            "chain {chain_id}: KMS key {} is the key of {key_address}, not of the configured {address}",
            kms.key_id
        ),
        Err(e) => {
            tracing::warn!(chain = chain_id, hot_wallet = %address, kms_key = %kms.key_id, error = %e, "KMS does not answer now: this wallet's payouts wait for it");
            Ok(())
        }
    }
}

fn finality_rule(finality: payoutd_rail_evm::Finality) -> String {
    match finality {
        payoutd_rail_evm::Finality::FinalizedTag => "the node's `finalized` block".to_owned(),
        payoutd_rail_evm::Finality::Depth(blocks) => {
            format!("{blocks} blocks on top of a receipt's block")
        }
    }
}

/// One Solana cluster's rail and the assets it pays, its hot wallet registered.
async fn solana_line(
    store: &Arc<dyn PipelineStore>,
    s: &config::SolanaClusterConfig,
    assets: &AssetRegistry,
) -> anyhow::Result<StandaloneLine> {
    let name = &s.cluster.cluster;
    let assets: Vec<_> = assets
        .iter()
        .filter(|a| a.rail == RailFamily::Solana && &a.network == name)
        .cloned()
        .collect();
    if assets.is_empty() {
        anyhow::bail!(
            "solana {name}: no asset configured on it (an [[assets]] entry `solana:{name}/<SYMBOL>`)"
        );
    }
    let address = s.signer.address();
    let wallet_id = store.ensure_signing_wallet(&format!("solana:{name}"), &address).await?;
    let signer = match &s.signer {
        config::SolanaSignerConfig::Key(key) => {
            payoutd_rail_solana::SolanaSigner::Local(key.clone())
        }
        config::SolanaSignerConfig::Service { url, public_key, token } => {
            let service = payoutd_rail_solana::RemoteSolanaSigner::new(
                url.clone(),
                token.clone(),
                payoutd_rail_solana::solana_sdk_pubkey(public_key),
            );
            tracing::info!(cluster = %name, hot_wallet = %address, signer = %url, "Solana hot wallet signed by a signer service (its key is not in this process)");
            payoutd_rail_solana::SolanaSigner::Remote(
                service.with_context(|| format!("solana {name}: hot_wallet_signer"))?,
            )
        }
    };
    let rail =
        payoutd_rail_solana::SolanaRail::with_signer(s.cluster.clone(), signer, wallet_id, &assets)
            .with_context(|| format!("solana {name}"))?;
    rail.check_durable_nonce().await.with_context(|| format!("solana {name}"))?;
    tracing::info!(cluster = %name, hot_wallet = %address, rpc = ?s.cluster.rpc_urls, paid_at = ?s.cluster.paid_at,
        assets = ?assets.iter().map(|a| a.code.as_str()).collect::<Vec<_>>(), "Solana cluster");
    let native: Vec<Asset> =
        assets.iter().filter(|a| a.token == TokenKind::Native).cloned().collect();
    match payoutd_engine::standalone::StandaloneRail::wallet_balances(&rail, &native).await {
        Ok(balances) => {
            for (asset, balance) in native.iter().zip(balances) {
                tracing::info!(cluster = %name, hot_wallet = %address, balance_base_units = %balance, asset = %asset.code,
                    "hot wallet (it pays fees and new token accounts' rent in SOL: keep it funded)");
            }
        }
        Err(e) => {
            tracing::warn!(cluster = %name, hot_wallet = %address, error = %e, "hot wallet: cannot read its balance now")
        }
    }
    Ok(StandaloneLine { rail: Arc::new(rail), assets })
}

/// The hot wallets the workers registered in the database, as destinations: an API-only process
/// reads no rail, yet must refuse payouts to the deployment's own wallets. Read at start: a wallet
/// registered later is refused once the process restarts.
pub async fn recorded_own_wallets(
    views: &dyn payoutd_engine::OperatorViewStore,
) -> anyhow::Result<Vec<payoutd_domain::Destination>> {
    let mut wallets = Vec::new();
    for wallet in views.hot_wallets().await? {
        let destination = if wallet.chain.starts_with("evm:") {
            EvmAddress::parse(&wallet.address).ok().map(payoutd_domain::Destination::Evm)
        } else if wallet.chain.starts_with("solana:") {
            payoutd_domain::SolanaAddress::parse(&wallet.address)
                .ok()
                .map(payoutd_domain::Destination::Solana)
        } else {
            None
        };
        wallets.extend(destination);
    }
    Ok(wallets)
}

/// What intake accepts: the assets the pipeline pays, each other configured asset refused with why.
pub fn payable(cfg: &Config, pipeline: Option<&Pipeline>) -> Payable {
    let assets = pipeline.map(Pipeline::payable_assets).unwrap_or_default();
    let why_not: BTreeMap<AssetCode, String> = cfg
        .assets
        .iter()
        .filter(|a| !assets.contains(&a.code))
        .map(|a| (a.code.clone(), why_not_payable(cfg, a)))
        .collect();
    Payable::Only { assets, why_not }
}

fn why_not_payable(cfg: &Config, asset: &Asset) -> String {
    let code = &asset.code;
    let network = &asset.network;
    if cfg.chains.is_empty() && cfg.solana.is_empty() && cfg.providers.is_empty() {
        return format!(
            "no rail is configured ([[chains]], [[solana]] or [[providers]]), so nothing can pay {code}"
        );
    }
    match asset.rail {
        RailFamily::Evm if asset.token == TokenKind::Other => {
            format!(
                "{code} has no token address: give it in an [[assets]] entry (kind = \"erc20\", token_address) to pay it"
            )
        }
        RailFamily::Evm => {
            format!("no [[chains]] entry for chain {network} is configured to pay {code}")
        }
        RailFamily::Solana => {
            format!("no [[solana]] entry for cluster {network} is configured to pay {code}")
        }
        RailFamily::Provider => {
            format!("no [[providers]] entry named {network} is configured to pay {code}")
        }
    }
}

/// What start-up says about the whole configuration: where the assets came from, what cannot be
/// paid, the caps in force.
pub fn log_configuration(cfg: &Config, payable: &Payable) {
    match cfg.assets_source {
        AssetsSource::BuiltIn => {
            tracing::info!(assets = ?codes(&cfg.assets), "no [[assets]] configured: the built-in development assets")
        }
        AssetsSource::File => {
            tracing::info!(assets = ?codes(&cfg.assets), "assets from [[assets]] (they replace the built-in development assets)")
        }
    }
    if cfg.chains.is_empty() && cfg.solana.is_empty() && cfg.providers.is_empty() {
        tracing::warn!(
            "no rail is configured ([[chains]], [[solana]] or [[providers]]): every payout is refused as asset-not-payable"
        );
    } else if let Payable::Only { why_not, .. } = payable {
        for (asset, why) in why_not {
            tracing::warn!(asset = %asset, "payouts in this asset are refused: {why}");
        }
    }
    if cfg.pipeline.caps.is_empty() {
        tracing::info!(
            "no [[caps]]: payouts are limited only by merchants' balances and the review of near-duplicates"
        );
    }
    for (asset, caps) in &cfg.pipeline.caps {
        tracing::info!(asset = %asset, per_destination_per_hour = %caps.per_destination_per_hour, per_wallet_per_hour = %caps.per_wallet_per_hour,
            "cap in force (base units per hour)");
    }
}

fn codes(assets: &AssetRegistry) -> Vec<&str> {
    assets.iter().map(|a| a.code.as_str()).collect()
}

/// Every configured hot wallet's address, from its key alone (no node is asked).
pub fn hot_wallet_rows(cfg: &Config) -> Vec<serde_json::Value> {
    let evm = cfg.chains.iter().flat_map(|c| {
        c.wallet_addresses().into_iter().map(|a| serde_json::json!({"rail": "evm", "chain": c.chain_id.to_string(), "address": a.to_string()}))
    });
    let solana = cfg
        .solana
        .iter()
        .map(|s| serde_json::json!({"rail": "solana", "cluster": s.cluster.cluster, "address": s.signer.address()}));
    evm.chain(solana).collect()
}
