//! Configuration: a TOML file plus environment variables, parsed here into domain values (serde stops at this file).

use std::net::SocketAddr;
use std::path::Path;

use crate::config_assets::{FileAsset, asset_registry};
pub use crate::config_evm::ChainConfig;
use crate::config_evm::{FileChain, evm_chain};
pub use crate::config_secrets::previous_webhook_secrets_key;
use crate::config_secrets::{OperatorKeys, operator_keys, webhook_secrets_key};
use crate::config_solana::{FileSolana, solana_cluster};
pub use crate::config_solana::{SolanaClusterConfig, SolanaSignerConfig};
use crate::config_workers::{
    FileCaps, FilePipeline, FileWebhooks, pipeline_config, webhook_config,
};
use anyhow::{Context, bail};
use payoutd_domain::{ApiKey, AssetRegistry, SecretUrl};
use payoutd_engine::{PipelineConfig, WebhookConfig};
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
    /// Lines one JSON payout batch may hold (default 10,000).
    batch_lines_max: Option<usize>,
    /// Lines one CSV payout batch may hold (default 100,000).
    csv_batch_lines_max: Option<usize>,
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
    pub csv_batch_lines_max: usize,
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
/// Lines a CSV batch may be allowed: it is streamed, so only its spool file and its answer grow.
pub const CSV_BATCH_LINES_MAX_RANGE: std::ops::RangeInclusive<usize> =
    1..=payoutd_engine::batches::BATCH_LINES_MAX_ALLOWED;
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
                    .map(|c| (c.chain_id, &c.rpc_urls, c.wallet_addresses().len()))
                    .collect::<Vec<_>>(),
            )
            .field(
                "solana",
                &self
                    .solana
                    .iter()
                    .map(|s| (&s.cluster.cluster, &s.cluster.rpc_urls, s.signer.address()))
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
        crate::config_routes::check_route_networks(&routes, &assets, &providers)?;
    }
    let pipeline =
        pipeline_config(file.pipeline.unwrap_or_default(), file.caps.unwrap_or_default(), &assets)?;
    let redis_url = std::env::var("PAYOUTD_REDIS_URL").ok().or(file.redis_url);
    let webhooks = webhook_config(file.webhooks.unwrap_or_default())?;
    let metrics_listen = metrics_listen(file.metrics_listen)?;
    let (batch_lines_max, csv_batch_lines_max) =
        batch_lines_limits(file.batch_lines_max, file.csv_batch_lines_max)?;
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
        csv_batch_lines_max,
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

/// Where `payoutd worker` serves `/metrics`: the environment's address, else the file's.
fn metrics_listen(from_file: Option<String>) -> anyhow::Result<Option<SocketAddr>> {
    let text = std::env::var("PAYOUTD_METRICS_LISTEN").ok().or(from_file);
    text.map(|text| {
        text.parse().with_context(|| {
            format!("metrics_listen {text:?} is not IP:PORT (a host name is not accepted)")
        })
    })
    .transpose()
}

/// Lines a JSON batch and a CSV batch may hold.
fn batch_lines_limits(json: Option<usize>, csv: Option<usize>) -> anyhow::Result<(usize, usize)> {
    let json = json.unwrap_or(payoutd_engine::batches::BATCH_LINES_MAX_DEFAULT);
    ensure_in("batch_lines_max", json, &BATCH_LINES_MAX_RANGE)?;
    let csv = csv.unwrap_or(payoutd_engine::batches::CSV_BATCH_LINES_MAX_DEFAULT);
    ensure_in("csv_batch_lines_max", csv, &CSV_BATCH_LINES_MAX_RANGE)?;
    Ok((json, csv))
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

/// A chain's or cluster's RPC endpoints: `rpc_url` (one) or `rpc_urls` (several), not both,
/// between one and `ENDPOINTS_PER_NETWORK_MAX`, none named twice.
pub(crate) fn rpc_endpoints(
    network: &str,
    one: Option<String>,
    several: Option<Vec<String>>,
) -> anyhow::Result<Vec<SecretUrl>> {
    use payoutd_engine::endpoints::ENDPOINTS_PER_NETWORK_MAX;
    let urls = match (one, several) {
        (Some(url), None) => vec![url],
        (None, Some(urls)) => urls,
        (Some(_), Some(_)) => anyhow::bail!("{network}: give rpc_url or rpc_urls, not both"),
        (None, None) => anyhow::bail!("{network}: rpc_url (or rpc_urls) is required"),
    };
    if urls.is_empty() || urls.len() > ENDPOINTS_PER_NETWORK_MAX {
        anyhow::bail!(
            "{network}: rpc_urls names {} endpoints; between 1 and {ENDPOINTS_PER_NETWORK_MAX} are allowed",
            urls.len()
        );
    }
    let distinct: std::collections::HashSet<&String> = urls.iter().collect();
    if distinct.len() != urls.len() {
        anyhow::bail!("{network}: rpc_urls names one endpoint twice");
    }
    Ok(urls.into_iter().map(SecretUrl::new).collect())
}
