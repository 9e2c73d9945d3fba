//! Provider rails in the configuration (`[[providers]]`): parsed into adapters, then wired as standalone lines.

use std::sync::Arc;

use anyhow::{Context, bail};
use payoutd_domain::{AssetRegistry, RailFamily, Secret};
use payoutd_engine::{StandaloneLine, SystemClock};
use payoutd_rail_provider::{KEY_WINDOW_MS_DEFAULT, ProviderApi, ProviderRail, ProviderRailConfig, StripeApi, StripeConfig};
use serde::Deserialize;

/// A key window longer than the providers' documented 24 h would let a retry create again.
pub const KEY_WINDOW_MS_RANGE: std::ops::RangeInclusive<i64> = 60_000..=KEY_WINDOW_MS_DEFAULT;
pub const REQUEST_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=120_000;
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// One `[[providers]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileProvider {
    /// `stripe`.
    kind: String,
    /// The provider's name in asset codes (`provider:<name>/<SYMBOL>`).
    name: String,
    /// The API's base URL (`https://api.stripe.com`).
    base_url: String,
    /// Name of the environment variable holding the API key.
    api_key_env: String,
    /// The account payouts leave from, as the provider names it (logs, reconciliation cursor).
    account: String,
    /// Stripe: the lower-case ISO currency the asset is paid in (`usd`).
    currency: Option<String>,
    /// How long a retry may re-send the same request with the same key (default and ceiling 24 h).
    key_window_ms: Option<i64>,
    request_timeout_ms: Option<u64>,
}

/// A provider as configured, with its API key (never printed).
pub struct ProviderConfig {
    pub name: String,
    api: ProviderKind,
    key_window_ms: i64,
}

enum ProviderKind {
    Stripe(StripeConfig),
}

pub(crate) fn provider(p: FileProvider) -> anyhow::Result<ProviderConfig> {
    let name = &p.name;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        bail!("provider {name:?}: name must be lower-case letters, digits and '-' (it names assets provider:<name>/<SYMBOL>)");
    }
    let api_key = std::env::var(&p.api_key_env).with_context(|| format!("provider {name}: environment variable {} (the API key) is not set", p.api_key_env))?;
    let key_window_ms = p.key_window_ms.unwrap_or(KEY_WINDOW_MS_DEFAULT);
    crate::config::ensure_in(&format!("provider {name}: key_window_ms"), key_window_ms, &KEY_WINDOW_MS_RANGE)?;
    let request_timeout_ms = p.request_timeout_ms.unwrap_or(REQUEST_TIMEOUT_MS_DEFAULT);
    crate::config::ensure_in(&format!("provider {name}: request_timeout_ms"), request_timeout_ms, &REQUEST_TIMEOUT_MS_RANGE)?;
    url_of(name, &p.base_url)?;
    let api = match p.kind.as_str() {
        "stripe" => {
            let currency = p.currency.with_context(|| format!("provider {name}: a Stripe provider needs its currency (`usd`)"))?;
            if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_lowercase()) {
                bail!("provider {name}: currency must be a lower-case ISO code such as `usd`, got {currency:?}");
            }
            ProviderKind::Stripe(StripeConfig { base_url: p.base_url, api_key: Secret::new(api_key), account: p.account, currency, request_timeout_ms })
        }
        other => bail!("provider {name}: kind must be `stripe`, got {other:?}"),
    };
    Ok(ProviderConfig { name: p.name, api, key_window_ms })
}

fn url_of(name: &str, text: &str) -> anyhow::Result<()> {
    match text.split_once("://") {
        Some(("https" | "http", rest)) if !rest.is_empty() => Ok(()),
        _ => bail!("provider {name}: base_url must be an http(s) URL, got {text:?}"),
    }
}

/// The provider's rail and the assets it pays.
pub fn provider_line(p: &ProviderConfig, assets: &AssetRegistry) -> anyhow::Result<StandaloneLine> {
    let name = &p.name;
    let assets: Vec<_> = assets.iter().filter(|a| a.rail == RailFamily::Provider && &a.network == name).cloned().collect();
    if assets.is_empty() {
        bail!("provider {name}: no asset configured on it (an [[assets]] entry `provider:{name}/<SYMBOL>` with kind = \"provider\")");
    }
    let api: Arc<dyn ProviderApi> = match &p.api {
        ProviderKind::Stripe(config) => Arc::new(StripeApi::new(config.clone()).with_context(|| format!("provider {name}: HTTP client"))?),
    };
    tracing::info!(provider = %name, kind = api.provider(), account = api.account(), key_window_ms = p.key_window_ms,
        assets = ?assets.iter().map(|a| a.code.as_str()).collect::<Vec<_>>(), "payout provider");
    let rail = ProviderRail::new(api, Arc::new(SystemClock), ProviderRailConfig { key_window_ms: p.key_window_ms });
    Ok(StandaloneLine { rail: Arc::new(rail), assets })
}
