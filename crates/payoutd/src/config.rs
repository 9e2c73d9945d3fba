//! Configuration: a TOML file plus environment variables, parsed here into domain values (serde stops at this file).

use std::net::SocketAddr;
use std::path::Path;

use crate::config_assets::{FileAsset, asset_registry};
pub use crate::config_evm::ChainConfig;
use crate::config_evm::{FileChain, evm_chain};
use anyhow::{Context, bail};
use payoutd_domain::{
    Amount, ApiKey, AssetCode, AssetRegistry, ExplorerUrl, SecretUrl, SolanaAddress,
};
use payoutd_engine::{Caps, PipelineConfig, WebhookConfig};
use payoutd_rail_solana::{DurableNonceConfig, PaidAt, SolanaKey, solana_sdk_pubkey};
use serde::Deserialize;

/// The embedded default: an SQLite file in the working directory.
pub const DATABASE_URL_DEFAULT: &str = "sqlite://payoutd.db";
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
/// Operator keys shorter than this are refused: they guard deposits and approvals.
pub const OPERATOR_KEY_MIN_LEN: usize = 24;

/// The file as written; no Debug: it holds URLs with credentials.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    database_url: Option<String>,
    require_payout_idempotency_key: Option<bool>,
    assets: Option<Vec<FileAsset>>,
    chains: Option<Vec<FileChain>>,
    solana: Option<Vec<FileSolana>>,
    providers: Option<Vec<crate::providers::FileProvider>>,
    /// Per asset, the provider rails that make a payout's later attempts (default none).
    routes: Option<Vec<crate::config_routes::FileRoute>>,
    pipeline: Option<FilePipeline>,
    caps: Option<Vec<FileCaps>>,
    redis_url: Option<String>,
    /// Lines one payout batch may hold (default 10,000).
    batch_lines_max: Option<usize>,
    /// Where `payoutd worker` serves `/metrics` (`serve` has it on the API address); absent: nowhere.
    metrics_listen: Option<String>,
    webhooks: Option<FileWebhooks>,
    /// Addresses of proxies in front of payoutd whose X-Forwarded-For and X-Forwarded-Proto are
    /// believed (default none: no forwarded header is).
    trusted_proxies: Option<Vec<String>>,
    /// New payouts one merchant may create per minute in one API process (default 60,000).
    payouts_per_merchant_per_minute: Option<u32>,
    /// New payouts one merchant may create per clock hour, across every process (default 1,000,000).
    payouts_per_merchant_per_hour: Option<u32>,
    /// Requests one API key (or, before a key is shown, one client address) may make per second.
    requests_per_second_per_key: Option<u32>,
    /// Connections the API serves at once; more wait in the listen backlog (default 1,024).
    http_connections_max: Option<usize>,
    /// How long a client may take to send a request's headers, and stay idle between requests
    /// on a kept-alive connection (default 20,000).
    http_header_read_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWebhooks {
    /// The waits between the 5 tries of a round, before jitter: exactly 4 values.
    retry_delays_ms: Option<Vec<u64>>,
    round_interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    rounds_max: Option<u32>,
    secret_overlap_ms: Option<u64>,
    /// Local development only: endpoints on http and private addresses (127.0.0.1, 10/8, ...).
    allow_private_urls: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSolana {
    /// The cluster's name in asset codes (`solana:<cluster>/<SYMBOL>`): `localnet`, `devnet`, `mainnet`.
    cluster: String,
    rpc_url: String,
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePipeline {
    near_duplicate_window_ms: Option<i64>,
    rebroadcast_after_ms: Option<i64>,
    replace_after_ms: Option<i64>,
    fee_bump_bps: Option<u32>,
    sign_batch_max: Option<u32>,
    idle_sleep_ms: Option<u64>,
    balance_check_interval_ms: Option<i64>,
    attempt_unresolved_after_ms: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCaps {
    asset: String,
    per_destination_per_hour: String,
    per_wallet_per_hour: String,
}

/// Everything the binary needs, validated.
pub struct Config {
    pub listen: SocketAddr,
    pub database_url: String,
    pub require_payout_key: bool,
    pub assets: AssetRegistry,
    pub operator_key: Option<ApiKey>,
    /// The bearer token `/metrics` asks for (`PAYOUTD_METRICS_TOKEN`); never printed.
    pub metrics_token: Option<ApiKey>,
    /// The key that alone may credit deposits over the API (`PAYOUTD_DEPOSIT_KEY`); never printed.
    pub deposit_key: Option<ApiKey>,
    /// Seals webhook signing secrets at rest (`PAYOUTD_WEBHOOK_SECRETS_KEY`); never printed.
    pub webhook_secrets_key: Option<std::sync::Arc<payoutd_store::SecretsKey>>,
    pub chains: Vec<ChainConfig>,
    pub solana: Vec<SolanaClusterConfig>,
    pub providers: Vec<crate::providers::ProviderConfig>,
    pub routes: payoutd_domain::Routes,
    pub pipeline: PipelineConfig,
    pub redis_url: Option<String>,
    pub webhooks: WebhookConfig,
    pub metrics_listen: Option<SocketAddr>,
    pub batch_lines_max: usize,
    pub assets_source: AssetsSource,
    pub http_limits: payoutd_api::ServeLimits,
    pub payouts_per_merchant_per_minute: u32,
    pub payouts_per_merchant_per_hour: u32,
    pub trusted_proxies: Vec<std::net::IpAddr>,
    pub request_rate: payoutd_api::request_rate::RequestRate,
}

/// Where the assets came from: `[[assets]]` replaces the built-in development assets entirely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssetsSource {
    BuiltIn,
    File,
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

/// Bounds on configurable pipeline values: a typo must not disable recovery or flood a node.
/// 0 turns the review of near-duplicates off; at most 30 days back.
pub const NEAR_DUPLICATE_WINDOW_MS_RANGE: std::ops::RangeInclusive<i64> = 0..=2_592_000_000;
pub const IDLE_SLEEP_MS_RANGE: std::ops::RangeInclusive<u64> = 10..=60_000;
pub const REBROADCAST_AFTER_MS_RANGE: std::ops::RangeInclusive<i64> = 100..=3_600_000;
pub const REPLACE_AFTER_MS_RANGE: std::ops::RangeInclusive<i64> = 100..=86_400_000;
pub const FEE_BUMP_BPS_RANGE: std::ops::RangeInclusive<u32> = 1_000..=10_000;
pub const SIGN_BATCH_MAX_RANGE: std::ops::RangeInclusive<u32> = 1..=1_024;
pub const BALANCE_CHECK_INTERVAL_MS_RANGE: std::ops::RangeInclusive<i64> = 0..=86_400_000;
/// One minute to thirty days: an attempt unresolved longer than a month is long past any rail's proof.
pub const ATTEMPT_UNRESOLVED_AFTER_MS_RANGE: std::ops::RangeInclusive<i64> =
    60_000..=30 * 86_400_000;
pub const FINALITY_CONFIRMATIONS_RANGE: std::ops::RangeInclusive<u64> = 1..=1_000;
pub const SEND_BATCH_MAX_RANGE: std::ops::RangeInclusive<usize> =
    1..=payoutd_rail_evm::SEND_BATCH_MAX_LIMIT;
/// Default ceiling on the fee per gas any of our transactions may bid: 1,000 gwei.
pub const MAX_FEE_PER_GAS_CAP_WEI_DEFAULT: u128 = 1_000_000_000_000;
/// Up to 1 lamport per compute unit: at 60,000 units, 0.06 SOL of priority fee per transfer.
pub const COMPUTE_UNIT_PRICE_CAP_RANGE: std::ops::RangeInclusive<u64> = 0..=1_000_000;
pub const BATCH_LINES_MAX_RANGE: std::ops::RangeInclusive<usize> = 1..=100_000;
/// Group and other permission bits a hot wallet key file must not have.
pub const KEY_FILE_OTHERS_MODE_BITS: u32 = 0o077;
pub const PAYOUTS_PER_MERCHANT_PER_MINUTE_RANGE: std::ops::RangeInclusive<u32> = 1..=10_000_000;
pub const PAYOUTS_PER_MERCHANT_PER_HOUR_RANGE: std::ops::RangeInclusive<u32> = 1..=100_000_000;
pub const HTTP_CONNECTIONS_MAX_RANGE: std::ops::RangeInclusive<usize> = 1..=65_536;
pub const HTTP_HEADER_READ_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=600_000;
pub const WEBHOOK_RETRY_DELAY_MS_RANGE: std::ops::RangeInclusive<u64> = 1..=86_400_000;
pub const WEBHOOK_ROUND_INTERVAL_MS_RANGE: std::ops::RangeInclusive<u64> = 1..=604_800_000;
pub const WEBHOOK_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=60_000;
pub const WEBHOOK_ROUNDS_MAX_RANGE: std::ops::RangeInclusive<u32> = 1..=1_000;
pub const WEBHOOK_SECRET_OVERLAP_MS_RANGE: std::ops::RangeInclusive<u64> = 0..=2_592_000_000;

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("database_url", &redact_url(&self.database_url))
            .field("require_payout_key", &self.require_payout_key)
            .field("assets", &self.assets.iter().map(|a| a.code.as_str()).collect::<Vec<_>>())
            .field("operator_key", &self.operator_key.as_ref().map(|_| "***"))
            .field("metrics_token", &self.metrics_token.as_ref().map(|_| "***"))
            .field("deposit_key", &self.deposit_key.as_ref().map(|_| "***"))
            .field("webhook_secrets_key", &self.webhook_secrets_key.as_ref().map(|_| "***"))
            .field(
                "chains",
                &self
                    .chains
                    .iter()
                    .map(|c| (c.chain_id, &c.rpc_url, c.wallet_addresses().len()))
                    .collect::<Vec<_>>(),
            )
            .field(
                "solana",
                &self
                    .solana
                    .iter()
                    .map(|s| (&s.cluster.cluster, &s.cluster.rpc_url, s.signer.address()))
                    .collect::<Vec<_>>(),
            )
            .field("redis_url", &self.redis_url.as_deref().map(redact_url))
            .field("webhooks", &self.webhooks)
            .finish()
    }
}

/// Hides a password in `postgres://user:password@host/db`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Flags given on the command line win over the environment, which wins over the file.
pub struct Overrides {
    pub config_file: Option<String>,
    pub listen: Option<String>,
    pub database_url: Option<String>,
}

/// Whether the rails' sections (and so their keys) are read.
#[derive(Clone, Copy)]
enum Rails {
    Load,
    Skip,
}

/// Everything, rails and their hot wallet keys included: for `serve`, `worker` and the commands that sign.
pub fn load(overrides: Overrides) -> anyhow::Result<Config> {
    load_with(overrides, Rails::Load)
}

/// Everything but the rails: for the commands that need only the database (incidents, approve,
/// reject, merchants, deposits), which then run without any chain and without hot wallet keys.
pub fn load_without_rails(overrides: Overrides) -> anyhow::Result<Config> {
    load_with(overrides, Rails::Skip)
}

/// The configuration file at `path`, or every default without one.
fn read_file(path: Option<&str>) -> anyhow::Result<FileConfig> {
    let Some(path) = path else { return Ok(FileConfig::default()) };
    let text = std::fs::read_to_string(Path::new(path))
        .with_context(|| format!("cannot read config file {path}"))?;
    toml::from_str::<FileConfig>(&text).with_context(|| format!("invalid config file {path}"))
}

/// The configured rails: EVM chains, Solana clusters, providers.
type RailConfigs =
    (Vec<ChainConfig>, Vec<SolanaClusterConfig>, Vec<crate::providers::ProviderConfig>);

/// Rails hold keys: commands that need only the database read none (`Rails::Skip`), so they work
/// on a machine (or with an environment) that holds no hot wallet key.
fn rail_configs(
    chains: Option<Vec<FileChain>>,
    solana: Option<Vec<FileSolana>>,
    providers: Option<Vec<crate::providers::FileProvider>>,
    rails: Rails,
) -> anyhow::Result<RailConfigs> {
    if matches!(rails, Rails::Skip) {
        return Ok((Vec::new(), Vec::new(), Vec::new()));
    }
    Ok((
        chains
            .unwrap_or_default()
            .into_iter()
            .map(evm_chain)
            .collect::<anyhow::Result<Vec<_>>>()?,
        solana
            .unwrap_or_default()
            .into_iter()
            .map(solana_cluster)
            .collect::<anyhow::Result<Vec<_>>>()?,
        providers
            .unwrap_or_default()
            .into_iter()
            .map(crate::providers::provider)
            .collect::<anyhow::Result<Vec<_>>>()?,
    ))
}

/// The intake limits: payouts per merchant per minute and per hour, requests per API key per second.
struct IntakeLimits {
    per_minute: u32,
    per_hour: u32,
    request_rate: payoutd_api::request_rate::RequestRate,
}

fn intake_limits(
    per_minute: Option<u32>,
    per_hour: Option<u32>,
    per_second: Option<u32>,
) -> anyhow::Result<IntakeLimits> {
    use payoutd_api::request_rate::{
        REQUESTS_PER_SECOND_PER_KEY_DEFAULT, REQUESTS_PER_SECOND_PER_KEY_RANGE, RequestRate,
    };
    use payoutd_engine::intake_rate::{
        PAYOUTS_PER_MERCHANT_PER_HOUR_DEFAULT, PAYOUTS_PER_MERCHANT_PER_MINUTE_DEFAULT,
    };
    let per_minute = per_minute.unwrap_or(PAYOUTS_PER_MERCHANT_PER_MINUTE_DEFAULT);
    ensure_in(
        "payouts_per_merchant_per_minute",
        per_minute,
        &PAYOUTS_PER_MERCHANT_PER_MINUTE_RANGE,
    )?;
    let per_hour = per_hour.unwrap_or(PAYOUTS_PER_MERCHANT_PER_HOUR_DEFAULT);
    ensure_in("payouts_per_merchant_per_hour", per_hour, &PAYOUTS_PER_MERCHANT_PER_HOUR_RANGE)?;
    let per_second = per_second.unwrap_or(REQUESTS_PER_SECOND_PER_KEY_DEFAULT);
    ensure_in("requests_per_second_per_key", per_second, &REQUESTS_PER_SECOND_PER_KEY_RANGE)?;
    Ok(IntakeLimits { per_minute, per_hour, request_rate: RequestRate { per_second } })
}

fn load_with(overrides: Overrides, rails: Rails) -> anyhow::Result<Config> {
    let file = read_file(overrides.config_file.as_deref())?;
    let listen_text = overrides.listen.or(file.listen).unwrap_or_else(|| LISTEN_DEFAULT.to_owned());
    let listen = listen_text.parse().with_context(|| {
        format!("listen address {listen_text:?} is not IP:PORT (a host name is not accepted)")
    })?;
    let database_url = overrides
        .database_url
        .or(file.database_url)
        .unwrap_or_else(|| DATABASE_URL_DEFAULT.to_owned());
    let (assets, assets_source) = asset_registry(file.assets)?;
    let OperatorKeys { operator_key, metrics_token, deposit_key } = operator_keys()?;
    let webhook_secrets_key = std::env::var("PAYOUTD_WEBHOOK_SECRETS_KEY")
        .ok()
        .map(|text| webhook_secrets_key(&text))
        .transpose()?;
    let (chains, solana, providers) =
        rail_configs(file.chains, file.solana, file.providers, rails)?;
    let routes = crate::config_routes::routes(file.routes.unwrap_or_default(), &assets)?;
    if matches!(rails, Rails::Load) {
        crate::config_routes::check_route_providers(&routes, &providers)?;
    }
    let pipeline =
        pipeline_config(file.pipeline.unwrap_or_default(), file.caps.unwrap_or_default(), &assets)?;
    let redis_url = std::env::var("PAYOUTD_REDIS_URL").ok().or(file.redis_url);
    let webhooks = webhook_config(file.webhooks.unwrap_or_default())?;
    let metrics_listen = std::env::var("PAYOUTD_METRICS_LISTEN").ok().or(file.metrics_listen);
    let metrics_listen = metrics_listen
        .map(|text| {
            text.parse().with_context(|| {
                format!("metrics_listen {text:?} is not IP:PORT (a host name is not accepted)")
            })
        })
        .transpose()?;
    let batch_lines_max =
        file.batch_lines_max.unwrap_or(payoutd_engine::batches::BATCH_LINES_MAX_DEFAULT);
    ensure_in("batch_lines_max", batch_lines_max, &BATCH_LINES_MAX_RANGE)?;
    let http_limits = serve_limits(file.http_connections_max, file.http_header_read_timeout_ms)?;
    let limits = intake_limits(
        file.payouts_per_merchant_per_minute,
        file.payouts_per_merchant_per_hour,
        file.requests_per_second_per_key,
    )?;
    let trusted_proxies = trusted_proxies(file.trusted_proxies.unwrap_or_default())?;
    Ok(Config {
        listen,
        database_url,
        require_payout_key: file.require_payout_idempotency_key.unwrap_or(true),
        assets,
        operator_key,
        metrics_token,
        deposit_key,
        webhook_secrets_key,
        chains,
        solana,
        pipeline,
        redis_url,
        webhooks,
        metrics_listen,
        batch_lines_max,
        providers,
        routes,
        assets_source,
        http_limits,
        payouts_per_merchant_per_minute: limits.per_minute,
        payouts_per_merchant_per_hour: limits.per_hour,
        trusted_proxies,
        request_rate: limits.request_rate,
    })
}

/// The addresses of the proxies whose `X-Forwarded-For` is believed.
fn trusted_proxies(listed: Vec<String>) -> anyhow::Result<Vec<std::net::IpAddr>> {
    listed
        .iter()
        .map(|a| a.parse().with_context(|| format!("trusted_proxies: {a:?} is not an IP address")))
        .collect()
}

/// The HTTP server's connection cap and header-read timeout, each within its range.
fn serve_limits(
    connections_max: Option<usize>,
    header_read_timeout_ms: Option<u64>,
) -> anyhow::Result<payoutd_api::ServeLimits> {
    let limits = payoutd_api::ServeLimits {
        connections_max: connections_max.unwrap_or(payoutd_api::CONNECTIONS_MAX_DEFAULT),
        header_read_timeout_ms: header_read_timeout_ms
            .unwrap_or(payoutd_api::HEADER_READ_TIMEOUT_MS_DEFAULT),
    };
    ensure_in("http_connections_max", limits.connections_max, &HTTP_CONNECTIONS_MAX_RANGE)?;
    ensure_in(
        "http_header_read_timeout_ms",
        limits.header_read_timeout_ms,
        &HTTP_HEADER_READ_TIMEOUT_MS_RANGE,
    )?;
    Ok(limits)
}

/// The keys the environment gives the operator, the metrics scraper and the deposit feed: each
/// long enough, and no two alike (each is its own power).
struct OperatorKeys {
    operator_key: Option<ApiKey>,
    metrics_token: Option<ApiKey>,
    deposit_key: Option<ApiKey>,
}

fn operator_keys() -> anyhow::Result<OperatorKeys> {
    let operator_key = match std::env::var("PAYOUTD_OPERATOR_KEY") {
        Ok(k) if k.len() < OPERATOR_KEY_MIN_LEN => {
            bail!("PAYOUTD_OPERATOR_KEY must be at least {OPERATOR_KEY_MIN_LEN} characters")
        }
        Ok(k) => Some(ApiKey::presented(&k)),
        Err(_) => None,
    };
    let metrics_token = match std::env::var("PAYOUTD_METRICS_TOKEN") {
        Ok(k) if k.len() < OPERATOR_KEY_MIN_LEN => {
            bail!("PAYOUTD_METRICS_TOKEN must be at least {OPERATOR_KEY_MIN_LEN} characters")
        }
        Ok(k) if Some(ApiKey::presented(&k).hash()) == operator_key.as_ref().map(ApiKey::hash) => {
            bail!(
                "PAYOUTD_METRICS_TOKEN must differ from PAYOUTD_OPERATOR_KEY: whatever scrapes metrics must not hold the operator's key"
            )
        }
        Ok(k) => Some(ApiKey::presented(&k)),
        Err(_) => None,
    };
    let deposit_key = match std::env::var("PAYOUTD_DEPOSIT_KEY") {
        Ok(k) if k.len() < OPERATOR_KEY_MIN_LEN => {
            bail!("PAYOUTD_DEPOSIT_KEY must be at least {OPERATOR_KEY_MIN_LEN} characters")
        }
        Ok(k)
            if [&operator_key, &metrics_token]
                .into_iter()
                .flatten()
                .any(|other| other.hash() == ApiKey::presented(&k).hash()) =>
        {
            bail!(
                "PAYOUTD_DEPOSIT_KEY must differ from PAYOUTD_OPERATOR_KEY and PAYOUTD_METRICS_TOKEN: crediting balances is its own power"
            )
        }
        Ok(k) => Some(ApiKey::presented(&k)),
        Err(_) => None,
    };
    Ok(OperatorKeys { operator_key, metrics_token, deposit_key })
}

/// `value`, when the file gives one, replaces `target` once it is within `range`.
fn override_in<T: PartialOrd + Copy + std::fmt::Debug>(
    name: &str,
    value: Option<T>,
    range: &std::ops::RangeInclusive<T>,
    target: &mut T,
) -> anyhow::Result<()> {
    if let Some(v) = value {
        ensure_in(name, v, range)?;
        *target = v;
    }
    Ok(())
}

/// The workers' settings: the defaults, each overridden within its range, and the caps per asset.
fn pipeline_config(
    p: FilePipeline,
    caps: Vec<FileCaps>,
    assets: &AssetRegistry,
) -> anyhow::Result<PipelineConfig> {
    let mut pipeline = PipelineConfig::default();
    override_in(
        "pipeline.near_duplicate_window_ms",
        p.near_duplicate_window_ms,
        &NEAR_DUPLICATE_WINDOW_MS_RANGE,
        &mut pipeline.near_duplicate_window_ms,
    )?;
    override_in(
        "pipeline.rebroadcast_after_ms",
        p.rebroadcast_after_ms,
        &REBROADCAST_AFTER_MS_RANGE,
        &mut pipeline.rebroadcast_after_ms,
    )?;
    override_in(
        "pipeline.replace_after_ms",
        p.replace_after_ms,
        &REPLACE_AFTER_MS_RANGE,
        &mut pipeline.replace_after_ms,
    )?;
    override_in(
        "pipeline.fee_bump_bps",
        p.fee_bump_bps,
        &FEE_BUMP_BPS_RANGE,
        &mut pipeline.fee_bump_bps,
    )?;
    override_in(
        "pipeline.sign_batch_max",
        p.sign_batch_max,
        &SIGN_BATCH_MAX_RANGE,
        &mut pipeline.sign_batch_max,
    )?;
    override_in(
        "pipeline.idle_sleep_ms",
        p.idle_sleep_ms,
        &IDLE_SLEEP_MS_RANGE,
        &mut pipeline.idle_sleep_ms,
    )?;
    override_in(
        "pipeline.balance_check_interval_ms",
        p.balance_check_interval_ms,
        &BALANCE_CHECK_INTERVAL_MS_RANGE,
        &mut pipeline.balance_check_interval_ms,
    )?;
    override_in(
        "pipeline.attempt_unresolved_after_ms",
        p.attempt_unresolved_after_ms,
        &ATTEMPT_UNRESOLVED_AFTER_MS_RANGE,
        &mut pipeline.attempt_unresolved_after_ms,
    )?;
    for c in caps {
        let asset = assets
            .get(&c.asset)
            .with_context(|| format!("caps: asset {:?}", c.asset))?
            .code
            .clone();
        let caps = Caps {
            per_destination_per_hour: Amount::parse(&c.per_destination_per_hour)
                .context("caps.per_destination_per_hour")?,
            per_wallet_per_hour: Amount::parse(&c.per_wallet_per_hour)
                .context("caps.per_wallet_per_hour")?,
        };
        if pipeline.caps.insert(asset.clone(), caps).is_some() {
            bail!("caps: two [[caps]] entries for {asset}; give one");
        }
    }
    Ok(pipeline)
}

/// `PAYOUTD_WEBHOOK_SECRETS_KEY_PREVIOUS`, for `payoutd webhooks reseal` when the key is rotated:
/// the key the secrets were sealed with until now.
pub fn previous_webhook_secrets_key()
-> anyhow::Result<Option<std::sync::Arc<payoutd_store::SecretsKey>>> {
    let text = std::env::var("PAYOUTD_WEBHOOK_SECRETS_KEY_PREVIOUS").ok();
    text.map(|t| webhook_secrets_key(&t).context("PAYOUTD_WEBHOOK_SECRETS_KEY_PREVIOUS"))
        .transpose()
}

/// `PAYOUTD_WEBHOOK_SECRETS_KEY`: 64 hex digits (32 random bytes), wiped from memory once read.
fn webhook_secrets_key(text: &str) -> anyhow::Result<std::sync::Arc<payoutd_store::SecretsKey>> {
    let bytes = zeroize::Zeroizing::new(hex::decode(text.trim()).unwrap_or_default());
    let bytes: &[u8; payoutd_store::SECRETS_KEY_BYTES] =
        bytes.as_slice().try_into().map_err(|_| {
            anyhow::anyhow!(
                "PAYOUTD_WEBHOOK_SECRETS_KEY must be {} hex digits (e.g. `openssl rand -hex 32`)",
                2 * payoutd_store::SECRETS_KEY_BYTES
            )
        })?;
    Ok(std::sync::Arc::new(payoutd_store::SecretsKey::from_bytes(bytes)))
}

/// A hot wallet key file's text, wiped from memory once dropped. Refused when anyone but its owner
/// may read or write it (as ssh refuses a private key): a key others can read is a key others hold.
pub(crate) fn read_key_file(path: &str) -> anyhow::Result<zeroize::Zeroizing<String>> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).context("cannot read it")?.permissions().mode() & 0o777;
        if mode & KEY_FILE_OTHERS_MODE_BITS != 0 {
            bail!(
                "its permissions {mode:o} let others than its owner read or write it: chmod 600 {path}"
            );
        }
    }
    Ok(zeroize::Zeroizing::new(std::fs::read_to_string(path).context("cannot read it")?))
}

fn solana_cluster(s: FileSolana) -> anyhow::Result<SolanaClusterConfig> {
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
        rpc_url: SecretUrl::new(s.rpc_url),
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

fn webhook_config(file: FileWebhooks) -> anyhow::Result<WebhookConfig> {
    let mut config = WebhookConfig::default();
    if let Some(delays) = file.retry_delays_ms {
        let count = delays.len();
        config.retry_delays_ms = delays.try_into().map_err(|_| {
            anyhow::anyhow!("webhooks.retry_delays_ms must hold exactly {} waits (between {} tries), got {count}",
                config.retry_delays_ms.len(), payoutd_engine::webhooks::TRIES_PER_ROUND)
        })?;
        for v in config.retry_delays_ms {
            ensure_in("webhooks.retry_delays_ms[]", v, &WEBHOOK_RETRY_DELAY_MS_RANGE)?;
        }
    }
    if let Some(v) = file.round_interval_ms {
        ensure_in("webhooks.round_interval_ms", v, &WEBHOOK_ROUND_INTERVAL_MS_RANGE)?;
        config.round_interval_ms = v;
    }
    if let Some(v) = file.timeout_ms {
        ensure_in("webhooks.timeout_ms", v, &WEBHOOK_TIMEOUT_MS_RANGE)?;
        config.timeout_ms = v;
    }
    if let Some(v) = file.rounds_max {
        ensure_in("webhooks.rounds_max", v, &WEBHOOK_ROUNDS_MAX_RANGE)?;
        config.rounds_max = v;
    }
    if let Some(v) = file.secret_overlap_ms {
        ensure_in("webhooks.secret_overlap_ms", v, &WEBHOOK_SECRET_OVERLAP_MS_RANGE)?;
        config.secret_overlap_ms = v;
    }
    config.allow_private_urls = file.allow_private_urls.unwrap_or(false);
    Ok(config)
}

pub(crate) fn ensure_in<T: PartialOrd + std::fmt::Debug>(
    name: &str,
    value: T,
    range: &std::ops::RangeInclusive<T>,
) -> anyhow::Result<()> {
    if !range.contains(&value) {
        bail!("{name} = {value:?} is outside {range:?}");
    }
    Ok(())
}

#[cfg(test)]
#[path = "config_tests.rs"]
pub(crate) mod tests;
