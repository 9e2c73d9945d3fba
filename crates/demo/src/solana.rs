//! The demo's Solana side: a local node (or the one given), a funded hot wallet with an SPL token minted for it, payouts of SOL and of the token, and the node's own count of what each destination received.

use std::collections::HashMap;

use anyhow::Context;
use payoutd_domain::SecretUrl;
use payoutd_rail_solana::{SolanaKey, SolanaRpc};
use payoutd_testkit::{
    Fault, FaultProxy, FaultRule, SolanaNode, airdrop, mint_test_token, token_balance,
};
use reqwest::StatusCode;
use serde_json::json;
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;

use crate::api::{Api, As};
use crate::report::RailCount;

pub const CLUSTER: &str = "localnet";
pub const SOL: &str = "solana:localnet/SOL";
pub const USD: &str = "solana:localnet/USD";
pub const USD_DECIMALS: u8 = 6;
/// The environment variable payoutd reads the Solana hot wallet's key from.
pub const SOLANA_KEY_ENV: &str = "PAYOUTD_DEMO_SOLANA_KEY";
/// Slots of the demo's own node: a quarter of mainnet's, so payouts finalize in about 3 s.
pub const DEMO_SLOT_TIME_MS: u64 = 100;
/// Airdropped to the hot wallet: the SOL payouts, fees and rent for new token accounts.
const HOT_WALLET_LAMPORTS: u64 = 100_000_000_000;
/// Minted to the hot wallet: far more than a run pays.
const USD_SUPPLY: u64 = 1_000_000_000_000;
/// Credited to the merchant's ledger per asset.
pub const DEPOSIT_BASE_UNITS: u64 = 50_000_000_000;
/// 0.01 SOL plus the payout's index in lamports; 1 USD plus its index in base units. Above the
/// rent-exempt minimum, so a new SOL account can receive it.
const SOL_AMOUNT_BASE: u64 = 10_000_000;
const USD_AMOUNT_BASE: u64 = 1_000_000;
const SETTLE_POLL_MS: u64 = 300;
/// Solana sends whose answer the proxy loses after the node took the bytes.
pub const LOST_ANSWERS: u32 = 3;
/// Solana payouts beside the EVM ones: a tenth of them, at least this many.
pub const PAYOUTS_MIN: usize = 10;

/// The `[[solana]]` table: the cluster, its node, the hot wallet's key by environment variable.
fn cluster_toml(rpc_url: &str) -> String {
    format!(
        r#"
[[solana]]
cluster = "{CLUSTER}"
rpc_url = "{rpc_url}"
hot_wallet_key_env = "{SOLANA_KEY_ENV}"
"#
    )
}

/// One Solana business event: its own fresh destination, so the node's balances count its transfers.
#[derive(Debug, Clone)]
pub struct SolPlanned {
    pub key: String,
    pub asset: &'static str,
    pub amount: u64,
    pub destination: Pubkey,
}

/// The node, the hot wallet and the token of one run.
pub struct SolanaSide {
    _node: Option<SolanaNode>,
    pub rpc_url: String,
    rpc: SolanaRpc,
    key: SolanaKey,
    pub mint: Pubkey,
}

impl SolanaSide {
    /// Starts a node (or uses `rpc_url`), then funds a fresh hot wallet by airdrop and mints the token to it.
    pub async fn start(rpc_url: Option<String>) -> anyhow::Result<SolanaSide> {
        let (node, url) = match rpc_url {
            Some(url) => (None, url),
            None => {
                let node =
                    tokio::task::spawn_blocking(|| SolanaNode::start(DEMO_SLOT_TIME_MS)).await?;
                let url = node.url().to_owned();
                (Some(node), url)
            }
        };
        let rpc = SolanaRpc::new(&SecretUrl::new(url.clone()));
        rpc.latest_blockhash()
            .await
            .with_context(|| format!("cannot reach the Solana node at {url}"))?;
        let key = SolanaKey::generate();
        airdrop(&rpc, &key.pubkey(), HOT_WALLET_LAMPORTS).await;
        let mint = mint_test_token(&rpc, &key, USD_SUPPLY, USD_DECIMALS).await;
        Ok(SolanaSide { _node: node, rpc_url: url, rpc, key, mint })
    }

    pub fn hot_wallet(&self) -> Pubkey {
        self.key.pubkey()
    }

    /// The key payoutd signs with, for its environment.
    pub fn key_env(&self) -> (String, String) {
        (SOLANA_KEY_ENV.to_owned(), self.key.to_base58_secret())
    }

    /// The `[[assets]]` and `[[solana]]` tables for payoutd, talking to the node at `rpc_url`.
    pub fn config_toml(&self, rpc_url: &str) -> String {
        self.assets_toml() + &cluster_toml(rpc_url)
    }

    /// The `[[assets]]` tables alone: for a process that takes payouts but does not pay them.
    pub fn assets_toml(&self) -> String {
        format!(
            r#"
[[assets]]
code = "{SOL}"
decimals = 9
kind = "native"

[[assets]]
code = "{USD}"
decimals = {USD_DECIMALS}
kind = "spl"
mint = "{mint}"
"#,
            mint = self.mint
        )
    }

    /// A proxy in front of the node that loses the answers of the first [`LOST_ANSWERS`] sends
    /// after the node took them: payoutd must find those transactions by their signatures.
    pub async fn faulty_proxy(&self) -> FaultProxy {
        SolanaSide::faulty_proxy_to(&self.rpc_url).await
    }

    /// `faulty_proxy` in front of `upstream` (the node, or another proxy in front of it).
    pub async fn faulty_proxy_to(upstream: &str) -> FaultProxy {
        let proxy = FaultProxy::start(upstream).await;
        proxy.set_rule(
            FaultRule::method("sendTransaction", Fault::DropResponse).times(LOST_ANSWERS),
        );
        proxy
    }

    /// Funds the merchant, then submits a tenth of `evm_payouts` Solana payouts (within
    /// [`PAYOUTS_MIN`]..=`max`), each twice; returns the plans and key -> payout id.
    pub async fn submit_share(
        api: &Api,
        merchant_id: &str,
        run_tag: u32,
        evm_payouts: usize,
        max: usize,
    ) -> anyhow::Result<(Vec<SolPlanned>, HashMap<String, String>)> {
        SolanaSide::deposit(api, merchant_id, run_tag).await?;
        let plans = SolanaSide::plan((evm_payouts / 10).clamp(PAYOUTS_MIN, max), run_tag);
        let ids = SolanaSide::submit(api, &plans).await?;
        crate::report::say(format!(
            "submitted {} Solana payouts (SOL and the SPL token, each to a new account), each request twice",
            plans.len()
        ));
        Ok((plans, ids))
    }

    /// The rail's line for the summary: `paid` as payoutd reports it, transfers from the node.
    pub async fn rail_count(&self, plans: &[SolPlanned], paid: usize) -> anyhow::Result<RailCount> {
        let (transfers_on_chain, duplicates) = self.transfers_on_chain(plans).await?;
        Ok(RailCount { payouts: plans.len(), paid, transfers_on_chain, duplicates })
    }

    /// `n` payouts, alternating SOL and the token.
    pub fn plan(n: usize, run_tag: u32) -> Vec<SolPlanned> {
        (0..n)
            .map(|i| {
                let sol = i % 2 == 0;
                SolPlanned {
                    key: format!("demo-sol-{run_tag:08x}-{i:05}"),
                    asset: if sol { SOL } else { USD },
                    amount: if sol { SOL_AMOUNT_BASE } else { USD_AMOUNT_BASE } + i as u64,
                    destination: Pubkey::new_unique(),
                }
            })
            .collect()
    }

    /// Credits the merchant's ledger in both assets.
    pub async fn deposit(api: &Api, merchant_id: &str, run_tag: u32) -> anyhow::Result<()> {
        for asset in [SOL, USD] {
            let body = json!({"merchant_id": merchant_id, "asset": asset, "amount": DEPOSIT_BASE_UNITS.to_string(),
                "idempotency_key": format!("demo-funding-{asset}-{run_tag:08x}")});
            let reply = api.post("/v1/deposits", &body, As::Operator).await?;
            anyhow::ensure!(
                reply.status == StatusCode::CREATED,
                "deposit of {asset}: {} {}",
                reply.status,
                reply.body
            );
        }
        Ok(())
    }

    /// Submits each payout twice (a client retrying after a timeout); returns key -> payout id.
    pub async fn submit(
        api: &Api,
        plans: &[SolPlanned],
    ) -> anyhow::Result<HashMap<String, String>> {
        let mut ids = HashMap::new();
        for p in plans {
            let body = json!({"asset": p.asset, "amount": p.amount.to_string(), "destination": p.destination.to_string(),
                "idempotency_key": p.key, "metadata": {"rail": "solana"}});
            let first = api.post("/v1/payouts", &body, As::Merchant).await?;
            let again = api.post("/v1/payouts", &body, As::Merchant).await?;
            let (a, b) = (first.str_field("id").to_owned(), again.str_field("id").to_owned());
            anyhow::ensure!(
                !a.is_empty() && a == b,
                "payout {} sent twice gave {a:?} and {b:?}",
                p.key
            );
            ids.insert(p.key.clone(), a);
        }
        Ok(ids)
    }

    /// Waits until every payout of `ids` is in one of `settled`, or `timeout_secs` passed; returns
    /// how many are paid.
    pub async fn wait_settled(
        api: &Api,
        ids: &HashMap<String, String>,
        settled: &[&str],
        timeout_secs: u64,
    ) -> anyhow::Result<usize> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(timeout_secs);
        loop {
            let statuses = api.statuses().await?;
            let status =
                |id: &String| statuses.get(id).map_or("missing", String::as_str).to_owned();
            let paid = ids.values().filter(|id| status(id) == "paid").count();
            if ids.values().all(|id| settled.contains(&status(id).as_str()))
                || std::time::Instant::now() > deadline
            {
                return Ok(paid);
            }
            tokio::time::sleep(std::time::Duration::from_millis(SETTLE_POLL_MS)).await;
        }
    }

    /// What each destination holds, at `finalized`, in transfers of its payout's amount: 1 when paid
    /// once, 2 when paid twice; anything else is counted as a duplicate too.
    pub async fn transfers_on_chain(&self, plans: &[SolPlanned]) -> anyhow::Result<(usize, usize)> {
        let (mut transfers, mut duplicates) = (0, 0);
        for p in plans {
            let held = match p.asset {
                SOL => self
                    .rpc
                    .balance(&p.destination, CommitmentConfig::finalized())
                    .await
                    .map_err(|e| anyhow::anyhow!("balance of {}: {e}", p.destination))?,
                _ => token_balance(&self.rpc, &p.destination, &self.mint).await,
            };
            let whole = (held / p.amount) as usize;
            transfers += whole;
            if whole > 1 || held % p.amount != 0 {
                duplicates += whole.saturating_sub(1).max(1);
            }
        }
        Ok((transfers, duplicates))
    }
}
