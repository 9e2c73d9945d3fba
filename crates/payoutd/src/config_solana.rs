//! The `[[solana]]` part of the configuration: one cluster's node, when a payout counts as paid, its fee cap, its durable nonce, and who signs for its hot wallet (a key read here, or a signer service that holds it).

use anyhow::{Context, bail};
use payoutd_domain::{AssetCode, ExplorerUrl, SecretUrl, SolanaAddress};
use payoutd_rail_solana::{DurableNonceConfig, PaidAt, SolanaKey, solana_sdk_pubkey};
use serde::Deserialize;

use crate::config::{COMPUTE_UNIT_PRICE_CAP_RANGE, ensure_in, rpc_endpoints};
use crate::config_secrets::read_key_file;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSolana {
    /// The cluster's name in asset codes (`solana:<cluster>/<SYMBOL>`): `localnet`, `devnet`, `mainnet`.
    cluster: String,
    /// One endpoint; or `rpc_urls`, several (reads fail over, sends go to every one).
    rpc_url: Option<String>,
    rpc_urls: Option<Vec<String>>,
    /// `finalized` (default) or `confirmed`: the commitment at which a payout counts as paid.
    paid_at: Option<String>,
    /// Ceiling on the priority fee, micro-lamports per compute unit (default 10,000).
    compute_unit_price_cap_micro_lamports: Option<u64>,
    /// Name of an environment variable holding the hot wallet's keypair (base58 of 64 bytes, or a
    /// `solana-keygen` JSON array); or `hot_wallet_key_file`.
    hot_wallet_key_env: Option<String>,
    hot_wallet_key_file: Option<String>,
    /// Or a signer service that holds the key (payoutd's signer protocol, e.g. `payoutd signer`).
    hot_wallet_signer: Option<FileSolanaSigner>,
    /// A durable nonce account (base58) whose authority is the hot wallet: payouts in
    /// `durable_nonce_assets` are signed against it, valid until an operator's cancel moves it.
    durable_nonce_account: Option<String>,
    durable_nonce_assets: Option<Vec<String>>,
    /// The dashboard links each signature here: `https://explorer.solana.com/tx/{tx}`.
    explorer_tx_url: Option<String>,
}

/// A Solana hot wallet whose key a signer service holds.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSolanaSigner {
    /// The service's base URL (`/v1/sign` is appended): https, or http to a loopback address.
    url: String,
    /// The hot wallet's address (base58): every signature must verify against it.
    public_key: String,
    /// Name of the environment variable holding the bearer token the service asks for.
    token_env: String,
}

/// One Solana cluster as configured, with its hot wallet's key (never printed).
pub struct SolanaClusterConfig {
    pub cluster: payoutd_rail_solana::SolanaClusterConfig,
    pub signer: SolanaSignerConfig,
    pub explorer_tx_url: Option<ExplorerUrl>,
}

/// Who signs for a Solana hot wallet.
pub enum SolanaSignerConfig {
    /// Its keypair, read into this process.
    Key(SolanaKey),
    /// A signer service that holds it.
    Service { url: SecretUrl, public_key: SolanaAddress, token: payoutd_domain::Secret },
}

impl SolanaSignerConfig {
    pub fn address(&self) -> String {
        match self {
            SolanaSignerConfig::Key(key) => key.pubkey().to_string(),
            SolanaSignerConfig::Service { public_key, .. } => public_key.to_string(),
        }
    }
}

pub(crate) fn solana_cluster(s: FileSolana) -> anyhow::Result<SolanaClusterConfig> {
    let name = &s.cluster;
    let paid_at = match s.paid_at.as_deref() {
        None | Some("finalized") => PaidAt::Finalized,
        Some("confirmed") => PaidAt::Confirmed,
        Some(other) => {
            bail!("solana {name}: paid_at must be `finalized` or `confirmed`, got {other:?}")
        }
    };
    let signer = solana_signer(
        name,
        s.hot_wallet_key_env.as_deref(),
        s.hot_wallet_key_file.as_deref(),
        s.hot_wallet_signer,
    )?;
    let cap = s
        .compute_unit_price_cap_micro_lamports
        .unwrap_or(payoutd_rail_solana::COMPUTE_UNIT_PRICE_CAP_MICRO_LAMPORTS_DEFAULT);
    ensure_in(
        &format!("solana {name}: compute_unit_price_cap_micro_lamports"),
        cap,
        &COMPUTE_UNIT_PRICE_CAP_RANGE,
    )?;
    let durable_nonce = match (s.durable_nonce_account, s.durable_nonce_assets) {
        (None, None) => None,
        (Some(account), Some(assets)) if !assets.is_empty() => {
            let account = SolanaAddress::parse(&account)
                .with_context(|| format!("solana {name}: durable_nonce_account"))?;
            let assets = assets
                .iter()
                .map(|code| {
                    AssetCode::parse(code)
                        .map(|(code, _, _)| code)
                        .with_context(|| format!("solana {name}: durable_nonce_assets: {code:?}"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Some(DurableNonceConfig { account: solana_sdk_pubkey(&account), assets })
        }
        _ => bail!(
            "solana {name}: durable_nonce_account and a non-empty durable_nonce_assets go together"
        ),
    };
    let cluster = payoutd_rail_solana::SolanaClusterConfig {
        cluster: s.cluster.clone(),
        rpc_urls: rpc_endpoints(&format!("solana {name}"), s.rpc_url, s.rpc_urls)?,
        paid_at,
        compute_unit_price_cap_micro_lamports: cap,
        durable_nonce,
    };
    let explorer_tx_url = s
        .explorer_tx_url
        .map(|t| ExplorerUrl::parse(&t).with_context(|| format!("solana {name}: explorer_tx_url")))
        .transpose()?;
    Ok(SolanaClusterConfig { cluster, signer, explorer_tx_url })
}

/// Exactly one of a key in the environment, a key file, or a signer service.
fn solana_signer(
    name: &str,
    key_env: Option<&str>,
    key_file: Option<&str>,
    service: Option<FileSolanaSigner>,
) -> anyhow::Result<SolanaSignerConfig> {
    let text = match (key_env, key_file, service) {
        (Some(env), None, None) => {
            zeroize::Zeroizing::new(std::env::var(env).with_context(|| {
                format!("solana {name}: environment variable {env} (the hot wallet key) is not set")
            })?)
        }
        (None, Some(path), None) => {
            read_key_file(path).with_context(|| format!("solana {name}: key file {path}"))?
        }
        (None, None, Some(service)) => {
            let public_key = SolanaAddress::parse(&service.public_key)
                .with_context(|| format!("solana {name}: hot_wallet_signer.public_key"))?;
            payoutd_rail_provider::check_base_url(&service.url).with_context(|| format!("solana {name}: hot_wallet_signer.url must be https (or http to a loopback address)"))?;
            let token = std::env::var(&service.token_env).with_context(|| {
                format!(
                    "solana {name}: environment variable {} (the signer's token) is not set",
                    service.token_env
                )
            })?;
            return Ok(SolanaSignerConfig::Service {
                url: SecretUrl::new(service.url),
                public_key,
                token: payoutd_domain::Secret::new(token),
            });
        }
        _ => bail!(
            "solana {name}: exactly one of hot_wallet_key_env, hot_wallet_key_file and hot_wallet_signer"
        ),
    };
    Ok(SolanaSignerConfig::Key(
        SolanaKey::parse(&text).with_context(|| format!("solana {name}: hot wallet key"))?,
    ))
}
