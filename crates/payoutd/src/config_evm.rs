//! The `[[chains]]` part of the configuration: one EVM chain's node, finality and fee cap, and who signs for each of its hot wallets (a key read here, or a signer service that holds it).

use anyhow::{Context, bail};
use payoutd_domain::{EvmAddress, ExplorerUrl, Secret, SecretUrl};
use payoutd_rail_evm::{Finality, SigningKey};
use serde::Deserialize;

use crate::config::{
    FINALITY_CONFIRMATIONS_RANGE, MAX_FEE_PER_GAS_CAP_WEI_DEFAULT, SEND_BATCH_MAX_RANGE,
    rpc_endpoints,
};
use crate::config_secrets::read_key_file;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileChain {
    chain_id: u64,
    /// One endpoint; or `rpc_urls`, several (reads fail over, sends go to every one).
    rpc_url: Option<String>,
    rpc_urls: Option<Vec<String>>,
    /// Blocks on top of a receipt's block before it is final; absent: the node's `finalized` block tag.
    finality_confirmations: Option<u64>,
    /// Transactions per JSON-RPC batch request; 1 for nodes that take no batches.
    send_batch_max: Option<usize>,
    /// Decimal string, wei per gas.
    max_fee_per_gas_cap_wei: Option<String>,
    /// Names of environment variables, each holding one hot wallet's 0x-hex private key.
    hot_wallet_key_envs: Option<Vec<String>>,
    /// Paths of files, each holding one hot wallet's 0x-hex private key.
    hot_wallet_key_files: Option<Vec<String>>,
    /// Hot wallets whose keys a signer service holds (Clef, Web3Signer, or anything answering
    /// `eth_signTransaction`): this process never sees those keys.
    remote_signers: Option<Vec<FileRemoteSigner>>,
    /// Hot wallets whose keys are AWS KMS keys (ECC_SECG_P256K1, SIGN_VERIFY).
    kms_signers: Option<Vec<FileKmsSigner>>,
    /// The dashboard links each transaction hash here: `https://etherscan.io/tx/{tx}`.
    explorer_tx_url: Option<String>,
}

/// One hot wallet signed for by a signer service.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRemoteSigner {
    /// The service's JSON-RPC URL (kept like a node's URL: never printed whole).
    url: String,
    /// The hot wallet's address; every signature the service returns must recover to it.
    address: String,
    /// The environment variable holding this process's token for the service, sent as
    /// `Authorization: Bearer`. Required, with an `https://` URL, unless the service listens on
    /// loopback.
    bearer_token_env: Option<String>,
}

/// One hot wallet whose key is an AWS KMS key; credentials come from the standard AWS chain.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileKmsSigner {
    /// The key's id, ARN or alias (prefer the id or ARN: an alias can be pointed elsewhere).
    key_id: String,
    region: String,
    /// The hot wallet's address: the key's, checked against KMS at start.
    address: String,
    /// A VPC endpoint, or a local KMS; absent: the region's public endpoint.
    endpoint_url: Option<String>,
}

/// A hot wallet whose key is an AWS KMS key.
pub struct KmsSignerConfig {
    pub key_id: String,
    pub region: String,
    pub address: EvmAddress,
    pub endpoint_url: Option<SecretUrl>,
}

/// A hot wallet whose key a signer service holds.
pub struct RemoteSignerConfig {
    pub url: SecretUrl,
    pub address: EvmAddress,
    /// The caller's token for the service; `None` only for a service on loopback.
    pub bearer_token: Option<Secret>,
}

/// One EVM chain as configured; keys are loaded but never printed.
pub struct ChainConfig {
    pub chain_id: u64,
    /// The chain's RPC endpoints, in the order reads try them.
    pub rpc_urls: Vec<SecretUrl>,
    pub finality: Finality,
    pub send_batch_max: usize,
    pub max_fee_per_gas_cap_wei: u128,
    pub keys: Vec<SigningKey>,
    pub remote_signers: Vec<RemoteSignerConfig>,
    pub kms_signers: Vec<KmsSignerConfig>,
    pub explorer_tx_url: Option<ExplorerUrl>,
}

impl ChainConfig {
    /// Every hot wallet of the chain: those whose keys were read, then those a service signs for.
    pub fn wallet_addresses(&self) -> Vec<EvmAddress> {
        let keys = self.keys.iter().map(SigningKey::address);
        keys.chain(self.remote_signers.iter().map(|r| r.address))
            .chain(self.kms_signers.iter().map(|k| k.address))
            .collect()
    }
}

/// One `[[chains]]` entry, its hot wallet keys read from the environment or files.
pub(crate) fn evm_chain(c: FileChain) -> anyhow::Result<ChainConfig> {
    let rpc_urls = rpc_endpoints(&format!("chain {}", c.chain_id), c.rpc_url, c.rpc_urls)?;
    let finality = match c.finality_confirmations {
        // The default: what the chain itself calls final. A node without the tag answers with an
        // error, which the workers log and count, deciding nothing until it is configured.
        None => Finality::FinalizedTag,
        Some(blocks) if FINALITY_CONFIRMATIONS_RANGE.contains(&blocks) => Finality::Depth(blocks),
        Some(_) => bail!(
            "chain {}: finality_confirmations must be in {FINALITY_CONFIRMATIONS_RANGE:?}",
            c.chain_id
        ),
    };
    let send_batch_max = c.send_batch_max.unwrap_or(payoutd_rail_evm::SEND_BATCH_MAX_DEFAULT);
    if !SEND_BATCH_MAX_RANGE.contains(&send_batch_max) {
        bail!("chain {}: send_batch_max must be in {SEND_BATCH_MAX_RANGE:?}", c.chain_id);
    }
    let max_fee_per_gas_cap_wei = match c.max_fee_per_gas_cap_wei {
        Some(text) => text
            .parse()
            .with_context(|| format!("chain {}: max_fee_per_gas_cap_wei", c.chain_id))?,
        None => MAX_FEE_PER_GAS_CAP_WEI_DEFAULT,
    };
    let keys = local_keys(
        c.chain_id,
        c.hot_wallet_key_envs.unwrap_or_default(),
        c.hot_wallet_key_files.unwrap_or_default(),
    )?;
    let remote_signers = c
        .remote_signers
        .unwrap_or_default()
        .into_iter()
        .map(|r| remote_signer(c.chain_id, r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let kms_signers = c
        .kms_signers
        .unwrap_or_default()
        .into_iter()
        .map(|k| kms_signer(c.chain_id, k))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let addresses = keys
        .iter()
        .map(SigningKey::address)
        .chain(remote_signers.iter().map(|r| r.address))
        .chain(kms_signers.iter().map(|k| k.address));
    ensure_distinct_wallets(c.chain_id, addresses.collect())?;
    let explorer_tx_url = c
        .explorer_tx_url
        .map(|t| {
            ExplorerUrl::parse(&t).with_context(|| format!("chain {}: explorer_tx_url", c.chain_id))
        })
        .transpose()?;
    Ok(ChainConfig {
        chain_id: c.chain_id,
        rpc_urls,
        finality,
        send_batch_max,
        max_fee_per_gas_cap_wei,
        keys,
        remote_signers,
        kms_signers,
        explorer_tx_url,
    })
}

/// Hot wallet keys named by environment variables and key files, in that order.
fn local_keys(
    chain_id: u64,
    envs: Vec<String>,
    files: Vec<String>,
) -> anyhow::Result<Vec<SigningKey>> {
    let mut keys = Vec::new();
    for name in envs {
        let text = zeroize::Zeroizing::new(std::env::var(&name).with_context(|| {
            format!("chain {chain_id}: environment variable {name} (a hot wallet key) is not set")
        })?);
        keys.push(
            SigningKey::from_hex(text.trim())
                .with_context(|| format!("chain {chain_id}: key in {name}"))?,
        );
    }
    for path in files {
        let text =
            read_key_file(&path).with_context(|| format!("chain {chain_id}: key file {path}"))?;
        keys.push(
            SigningKey::from_hex(text.trim())
                .with_context(|| format!("chain {chain_id}: key in {path}"))?,
        );
    }
    Ok(keys)
}

/// A chain needs at least one hot wallet, and no wallet twice (two signers on one nonce line).
fn ensure_distinct_wallets(chain_id: u64, mut addresses: Vec<EvmAddress>) -> anyhow::Result<()> {
    if addresses.is_empty() {
        bail!(
            "chain {chain_id}: no hot wallet (hot_wallet_key_envs, hot_wallet_key_files, remote_signers or kms_signers)"
        );
    }
    addresses.sort_by_key(|a| a.to_string());
    if let Some(twice) = addresses.windows(2).find(|w| w[0] == w[1]) {
        bail!("chain {chain_id}: hot wallet {} is configured twice", twice[0]);
    }
    Ok(())
}

/// A signer service is reached over TLS with a token of this process's, unless it listens on
/// loopback: anyone who can reach an open signer can make the hot wallet sign.
fn remote_signer(chain_id: u64, r: FileRemoteSigner) -> anyhow::Result<RemoteSignerConfig> {
    let address = EvmAddress::parse(&r.address)
        .with_context(|| format!("chain {chain_id}: remote signer address"))?;
    let at = format!("chain {chain_id}: remote signer for {address}");
    let Ok(url) = reqwest::Url::parse(&r.url) else { bail!("{at}: url is not a URL") };
    if !matches!(url.scheme(), "http" | "https") {
        bail!("{at}: url must be http:// or https://");
    }
    let bearer_token = match &r.bearer_token_env {
        Some(name) => Some(Secret::new(
            std::env::var(name)
                .with_context(|| format!("{at}: bearer_token_env {name} is not set"))?,
        )),
        None => None,
    };
    if !payoutd_domain::secret::on_loopback(&url)
        && (url.scheme() != "https" || bearer_token.is_none())
    {
        bail!(
            "{at}: a signer service off loopback needs an https:// url and bearer_token_env (anyone who reaches an open signer can make the wallet sign)"
        );
    }
    Ok(RemoteSignerConfig { url: SecretUrl::new(r.url), address, bearer_token })
}

fn kms_signer(chain_id: u64, k: FileKmsSigner) -> anyhow::Result<KmsSignerConfig> {
    let address = EvmAddress::parse(&k.address)
        .with_context(|| format!("chain {chain_id}: KMS signer address"))?;
    if k.key_id.trim().is_empty() || k.region.trim().is_empty() {
        bail!("chain {chain_id}: KMS signer for {address}: key_id and region must not be empty");
    }
    if let Some(url) = &k.endpoint_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        bail!(
            "chain {chain_id}: KMS signer for {address}: endpoint_url must be http:// or https://"
        );
    }
    Ok(KmsSignerConfig {
        key_id: k.key_id,
        region: k.region,
        address,
        endpoint_url: k.endpoint_url.map(SecretUrl::new),
    })
}
