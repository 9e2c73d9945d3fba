//! Provider rails in the configuration (`[[providers]]`): parsed into adapters, then wired as standalone lines.

use std::sync::Arc;

use anyhow::{Context, bail};
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, Asset, AssetRegistry, RailFamily, Secret};
use payoutd_engine::standalone::RailWallet;
use payoutd_engine::{Clock, StandaloneLine};
use payoutd_rail_provider::{
    AWAITING_FUNDS_INCIDENT_AFTER_MS_DEFAULT, BridgeApi, BridgeConfig, CircleApi, CircleConfig,
    CircleGas, CoinbaseApi, CoinbaseConfig, KEY_WINDOW_MS_DEFAULT, ProviderApi, ProviderRail,
    ProviderRailConfig, REQUEST_TIMEOUT_MS_DEFAULT, StripeApi, StripeConfig, TravelRuleConfig,
};
use serde::Deserialize;

/// A key window longer than the providers' documented 24 h would let a retry create again.
pub const KEY_WINDOW_MS_RANGE: std::ops::RangeInclusive<i64> = 60_000..=KEY_WINDOW_MS_DEFAULT;
/// A minute to a day: a Bridge transfer waiting for funds longer than this needs a person.
pub const AWAITING_FUNDS_INCIDENT_AFTER_MS_RANGE: std::ops::RangeInclusive<i64> =
    60_000..=86_400_000;
/// A minute to a day: a horizon past the key window is cut to it anyway.
pub const RESEND_HORIZON_MS_RANGE: std::ops::RangeInclusive<i64> = 60_000..=KEY_WINDOW_MS_DEFAULT;
/// A minute to a day: past a day an unresolved attempt waits for a person anyway.
pub const STUCK_CANCEL_AFTER_MS_RANGE: std::ops::RangeInclusive<i64> = 60_000..=86_400_000;
pub const REQUEST_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=120_000;

/// One `[[providers]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileProvider {
    /// `stripe`, `coinbase`, `bridge` or `circle`.
    kind: String,
    /// The provider's name in asset codes (`provider:<name>/<SYMBOL>`).
    name: String,
    /// The API's base URL (`https://api.stripe.com`).
    base_url: String,
    /// Name of the environment variable holding the API key.
    api_key_env: String,
    /// The account payouts leave from, as the provider names it (logs, reconciliation cursor).
    account: String,
    /// Stripe: the lower-case ISO currency the asset is paid in (`usd`). Bridge: the currency the
    /// recipient gets (`usdc`).
    currency: Option<String>,
    /// Bridge: the currency that leaves the wallet, when it is not `currency` (a Bridge wallet
    /// holds `usdb` and pays it out as `usdc`).
    source_currency: Option<String>,
    /// Bridge: the `initiation` object every transfer carries, for a wallet that answers
    /// `initiation_required: true` (Bridge refuses its transfers without one).
    initiation: Option<serde_json::Value>,
    /// Bridge: the largest gas fee Bridge may take out of a payout's amount, in the asset's base
    /// units, for the payout to count as paid (the recipient gets the rest); default 0, where any
    /// fee taken is a `transfer_mismatch` for a person.
    gas_fee_max_base_units: Option<u64>,
    /// Coinbase: the API key's id (the secret in `api_key_env` signs a JWT per request), the target
    /// network (`base`), the source and target assets (`usdc`).
    api_key_id: Option<String>,
    network: Option<String>,
    source_asset: Option<String>,
    target_asset: Option<String>,
    /// Coinbase: the travel rule data transfers at or above a threshold carry.
    travel_rule: Option<FileTravelRule>,
    /// Bridge: the customer transfers are made for (`on_behalf_of`) and the payment rail (`ethereum`).
    customer_id: Option<String>,
    payment_rail: Option<String>,
    /// Bridge: how long a transfer may wait for its source's funds (`awaiting_funds`) before a
    /// person is told with an `attempt_unresolved` incident.
    awaiting_funds_incident_after_ms: Option<i64>,
    /// Circle: the token paid (Circle's token id), the fee level (`MEDIUM`) and the environment
    /// variable holding the entity secret (64 hex digits).
    token_id: Option<String>,
    fee_level: Option<String>,
    entity_secret_env: Option<String>,
    /// Circle: the chain's native token when the wallet pays its own network fees (an EOA wallet
    /// without Gas Station), as a symbol (`ETH`) and its decimals (18). Each transaction's
    /// `networkFee` is then booked as a fee from the wallet, and its native balance checked.
    gas_symbol: Option<String>,
    gas_decimals: Option<u8>,
    /// Circle: the blockchain the wallet pays on, as Circle names it (`BASE`, `ETH`, `SOL`):
    /// required when a route names the provider, whose rails must all pay on one chain.
    blockchain: Option<String>,
    /// Circle: how long after its attempt began a transaction still `STUCK` is asked to be
    /// cancelled (Circle's `cancel`, best effort); until then it is asked to be accelerated.
    stuck_cancel_after_ms: Option<i64>,
    /// How long a retry may re-send the same request with the same key (default and ceiling 24 h).
    key_window_ms: Option<i64>,
    /// How long after its attempt began a create may still be re-sent (default 15 minutes); past
    /// it lookups decide, and they read only the transfers created in that time.
    resend_horizon_ms: Option<i64>,
    request_timeout_ms: Option<u64>,
}

/// `[providers.travel_rule]` of a Coinbase provider.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileTravelRule {
    /// Payouts of at least this many base units carry CDP's `travelRule` object.
    from_base_units: u64,
    /// CDP's `isIntermediary`: the platform is a VASP paying for its own end customer.
    #[serde(default)]
    is_intermediary: bool,
    /// CDP's `TravelRuleOriginator` object (`name`, `address` with `line1`, `city`, `countryCode`, ...).
    originator: serde_json::Value,
}

impl FileTravelRule {
    fn config(self, name: &str) -> anyhow::Result<TravelRuleConfig> {
        let text = |v: &serde_json::Value| v.as_str().is_some_and(|s| !s.trim().is_empty());
        let o = &self.originator;
        for (field, value) in [
            ("name", &o["name"]),
            ("address.line1", &o["address"]["line1"]),
            ("address.city", &o["address"]["city"]),
            ("address.countryCode", &o["address"]["countryCode"]),
        ] {
            if !text(value) {
                bail!(
                    "provider {name}: travel_rule.originator.{field} is required (CDP refuses a travel rule without it)"
                );
            }
        }
        Ok(TravelRuleConfig {
            from_base_units: u128::from(self.from_base_units),
            originator: self.originator,
            is_intermediary: self.is_intermediary,
        })
    }
}

/// A provider as configured, with its API key (never printed).
pub struct ProviderConfig {
    pub name: String,
    api: ProviderKind,
    rail: ProviderRailConfig,
    /// Circle's `blockchain`, which its other settings do not name.
    blockchain: Option<String>,
}

/// The token and the chain or network a provider's transfers deliver, as its settings name them;
/// `None` where they name none (Circle's token is an opaque id, Stripe pays no chain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderPays<'a> {
    pub token: Option<&'a str>,
    /// The setting naming it and its value (`network = "base"`).
    pub network: Option<(&'static str, &'a str)>,
}

impl ProviderConfig {
    /// The account payouts leave from, as the provider names it.
    pub fn account(&self) -> &str {
        match &self.api {
            ProviderKind::Stripe(c) => &c.account,
            ProviderKind::Coinbase(c) => &c.account_id,
            ProviderKind::Bridge(c) => &c.bridge_wallet_id,
            ProviderKind::Circle(c) => &c.wallet_id,
        }
    }

    /// The asset the account's fees are charged in, beside `paid` (the asset it pays out): the
    /// chain's native token of a Circle wallet paying its own gas, else `paid` itself. `None` for
    /// a Coinbase account converting another asset into the one sent: its balance is in the other.
    fn fee_asset(&self, paid: &Asset) -> anyhow::Result<Option<Asset>> {
        Ok(match &self.api {
            ProviderKind::Circle(CircleConfig { gas: Some(gas), .. }) => {
                let code = format!("provider:{}/{}", self.name, gas.symbol);
                Some(
                    Asset::new(&code, gas.decimals, TokenKind::Native)
                        .with_context(|| format!("provider {}: gas asset {code}", self.name))?,
                )
            }
            ProviderKind::Coinbase(c) if !c.source_asset.eq_ignore_ascii_case(&c.target_asset) => {
                None
            }
            _ => Some(paid.clone()),
        })
    }

    /// What the provider's transfers deliver, as its settings name it.
    pub fn pays(&self) -> ProviderPays<'_> {
        match &self.api {
            ProviderKind::Stripe(c) => ProviderPays { token: Some(&c.currency), network: None },
            ProviderKind::Coinbase(c) => ProviderPays {
                token: Some(&c.target_asset),
                network: Some(("network", &c.network)),
            },
            ProviderKind::Bridge(c) => ProviderPays {
                token: Some(&c.currency),
                network: Some(("payment_rail", &c.payment_rail)),
            },
            ProviderKind::Circle(_) => ProviderPays {
                token: None,
                network: self.blockchain.as_deref().map(|b| ("blockchain", b)),
            },
        }
    }

    /// `stripe`, `coinbase`, `bridge` or `circle`.
    pub fn kind(&self) -> &'static str {
        match self.api {
            ProviderKind::Stripe(_) => "stripe",
            ProviderKind::Coinbase(_) => "coinbase",
            ProviderKind::Bridge(_) => "bridge",
            ProviderKind::Circle(_) => "circle",
        }
    }
}

enum ProviderKind {
    Stripe(StripeConfig),
    Coinbase(CoinbaseConfig),
    Bridge(BridgeConfig),
    Circle(CircleConfig),
}

pub(crate) fn provider(p: FileProvider) -> anyhow::Result<ProviderConfig> {
    let name = &p.name;
    if name.is_empty()
        || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        bail!(
            "provider {name:?}: name must be lower-case letters, digits and '-' (it names assets provider:<name>/<SYMBOL>)"
        );
    }
    let api_key = std::env::var(&p.api_key_env).with_context(|| {
        format!("provider {name}: environment variable {} (the API key) is not set", p.api_key_env)
    })?;
    let key_window_ms = p.key_window_ms.unwrap_or(KEY_WINDOW_MS_DEFAULT);
    crate::config::ensure_in(
        &format!("provider {name}: key_window_ms"),
        key_window_ms,
        &KEY_WINDOW_MS_RANGE,
    )?;
    let request_timeout_ms = p.request_timeout_ms.unwrap_or(REQUEST_TIMEOUT_MS_DEFAULT);
    crate::config::ensure_in(
        &format!("provider {name}: request_timeout_ms"),
        request_timeout_ms,
        &REQUEST_TIMEOUT_MS_RANGE,
    )?;
    let mut rail = ProviderRailConfig::new(key_window_ms, request_timeout_ms)
        .map_err(|e| anyhow::anyhow!("provider {name}: {e}"))?;
    if let Some(ms) = p.resend_horizon_ms {
        let what = format!("provider {name}: resend_horizon_ms");
        crate::config::ensure_in(&what, ms, &RESEND_HORIZON_MS_RANGE)?;
        rail = rail.with_resend_horizon_ms(ms);
    }
    url_of(name, &p.base_url)?;
    let given = Given(&p);
    let api = match p.kind.as_str() {
        "stripe" => stripe_api(&p, &given, api_key, request_timeout_ms)?,
        "coinbase" => coinbase_api(&p, &given, api_key, request_timeout_ms)?,
        "bridge" => {
            let (api, with_bridge) = bridge_api(&p, &given, api_key, request_timeout_ms)?;
            rail = with_bridge(rail);
            api
        }
        "circle" => {
            let api = circle_api(&p, &given, api_key, request_timeout_ms)?;
            if let Some(ms) = p.stuck_cancel_after_ms {
                let what = format!("provider {name}: stuck_cancel_after_ms");
                crate::config::ensure_in(&what, ms, &STUCK_CANCEL_AFTER_MS_RANGE)?;
                rail = rail.with_stuck_cancel_after_ms(ms);
            }
            api
        }
        other => bail!(
            "provider {name}: kind must be `stripe`, `coinbase`, `bridge` or `circle`, got {other:?}"
        ),
    };
    Ok(ProviderConfig { name: p.name, api, rail, blockchain: p.blockchain })
}

/// The provider's own settings, each kind's alone (`Given::only` refuses another kind's).
/// A Bridge provider's adapter, and what its settings change in the rail.
fn bridge_api(
    p: &FileProvider,
    given: &Given<'_>,
    api_key: String,
    request_timeout_ms: u64,
) -> anyhow::Result<(ProviderKind, impl FnOnce(ProviderRailConfig) -> ProviderRailConfig)> {
    let name = &p.name;
    given.only(
        name,
        "bridge",
        &[
            "customer_id",
            "payment_rail",
            "currency",
            "source_currency",
            "initiation",
            "gas_fee_max_base_units",
            "awaiting_funds_incident_after_ms",
        ],
    )?;
    let wait_ms =
        p.awaiting_funds_incident_after_ms.unwrap_or(AWAITING_FUNDS_INCIDENT_AFTER_MS_DEFAULT);
    crate::config::ensure_in(
        &format!("provider {name}: awaiting_funds_incident_after_ms"),
        wait_ms,
        &AWAITING_FUNDS_INCIDENT_AFTER_MS_RANGE,
    )?;
    if p.initiation.as_ref().is_some_and(|i| !i.is_object()) {
        bail!("provider {name}: `initiation` must be a table (Bridge's initiation object)");
    }
    let currency = given.required(name, "currency", &p.currency)?;
    let source_currency = match &p.source_currency {
        Some(_) => given.required(name, "source_currency", &p.source_currency)?,
        None => currency.clone(),
    };
    let gas_fee_max = Amount::from_u128(u128::from(p.gas_fee_max_base_units.unwrap_or(0)));
    let api = ProviderKind::Bridge(BridgeConfig {
        base_url: p.base_url.clone(),
        api_key: Secret::new(api_key),
        customer_id: given.required(name, "customer_id", &p.customer_id)?,
        bridge_wallet_id: p.account.clone(),
        payment_rail: given.required(name, "payment_rail", &p.payment_rail)?,
        source_currency,
        currency,
        initiation: p.initiation.clone(),
        decimals: DECIMALS_FROM_ASSET,
        request_timeout_ms,
    });
    let with_bridge = move |rail: ProviderRailConfig| {
        rail.with_awaiting_funds_incident_after_ms(wait_ms).with_withheld_max(gas_fee_max)
    };
    Ok((api, with_bridge))
}

fn stripe_api(
    p: &FileProvider,
    given: &Given<'_>,
    api_key: String,
    request_timeout_ms: u64,
) -> anyhow::Result<ProviderKind> {
    let name = &p.name;
    given.only(name, "stripe", &["currency"])?;
    let currency = given.required(name, "currency", &p.currency)?;
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_lowercase()) {
        bail!(
            "provider {name}: currency must be a lower-case ISO code such as `usd`, got {currency:?}"
        );
    }
    Ok(ProviderKind::Stripe(StripeConfig {
        base_url: p.base_url.clone(),
        api_key: Secret::new(api_key),
        account: p.account.clone(),
        currency,
        request_timeout_ms,
    }))
}

fn coinbase_api(
    p: &FileProvider,
    given: &Given<'_>,
    api_key: String,
    request_timeout_ms: u64,
) -> anyhow::Result<ProviderKind> {
    let name = &p.name;
    given.only(
        name,
        "coinbase",
        &["api_key_id", "network", "source_asset", "target_asset", "travel_rule"],
    )?;
    let config = CoinbaseConfig {
        base_url: p.base_url.clone(),
        api_key_id: given.required(name, "api_key_id", &p.api_key_id)?,
        api_key: Secret::new(api_key),
        account_id: p.account.clone(),
        network: given.required(name, "network", &p.network)?,
        source_asset: given.required(name, "source_asset", &p.source_asset)?,
        target_asset: given.required(name, "target_asset", &p.target_asset)?,
        decimals: DECIMALS_FROM_ASSET,
        request_timeout_ms,
        travel_rule: None,
    };
    let config = CoinbaseConfig {
        travel_rule: p.travel_rule.clone().map(|t| t.config(name)).transpose()?,
        ..config
    };
    // The key is read now: a malformed secret is a configuration error, not a failing payout.
    CoinbaseApi::new(config.clone()).with_context(|| format!("provider {name}"))?;
    Ok(ProviderKind::Coinbase(config))
}

fn circle_api(
    p: &FileProvider,
    given: &Given<'_>,
    api_key: String,
    request_timeout_ms: u64,
) -> anyhow::Result<ProviderKind> {
    let name = &p.name;
    given.only(
        name,
        "circle",
        &[
            "token_id",
            "fee_level",
            "entity_secret_env",
            "gas_symbol",
            "gas_decimals",
            "blockchain",
            "stuck_cancel_after_ms",
        ],
    )?;
    let gas = match (&p.gas_symbol, p.gas_decimals) {
        (None, None) => None,
        (Some(symbol), Some(decimals))
            if !symbol.is_empty()
                && symbol.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
                && decimals <= 36 =>
        {
            Some(CircleGas { symbol: symbol.clone(), decimals })
        }
        _ => bail!(
            "provider {name}: gas_symbol (upper-case, such as `ETH`) and gas_decimals (at most 36) go together, or neither when Gas Station pays the fees"
        ),
    };
    let env = given.required(name, "entity_secret_env", &p.entity_secret_env)?;
    let secret = std::env::var(&env).with_context(|| {
        format!("provider {name}: environment variable {env} (the entity secret) is not set")
    })?;
    let fee_level = p.fee_level.clone().unwrap_or_else(|| "MEDIUM".to_owned());
    if !["LOW", "MEDIUM", "HIGH"].contains(&fee_level.as_str()) {
        bail!("provider {name}: fee_level must be LOW, MEDIUM or HIGH, got {fee_level:?}");
    }
    Ok(ProviderKind::Circle(CircleConfig {
        base_url: p.base_url.clone(),
        api_key: Secret::new(api_key),
        entity_secret: Secret::new(secret),
        wallet_id: p.account.clone(),
        token_id: given.required(name, "token_id", &p.token_id)?,
        fee_level,
        decimals: DECIMALS_FROM_ASSET,
        gas,
        request_timeout_ms,
    }))
}

/// Set at wiring, from the provider's one asset: decimals are said once, in `[[assets]]`.
const DECIMALS_FROM_ASSET: u8 = 0;

/// The kind-specific fields an entry holds, to refuse the ones its kind does not use.
struct Given<'a>(&'a FileProvider);

impl Given<'_> {
    fn present(&self) -> Vec<&'static str> {
        let p = self.0;
        let fields: [(&'static str, bool); 19] = [
            ("stuck_cancel_after_ms", p.stuck_cancel_after_ms.is_some()),
            ("currency", p.currency.is_some()),
            ("source_currency", p.source_currency.is_some()),
            ("initiation", p.initiation.is_some()),
            ("gas_fee_max_base_units", p.gas_fee_max_base_units.is_some()),
            ("api_key_id", p.api_key_id.is_some()),
            ("network", p.network.is_some()),
            ("source_asset", p.source_asset.is_some()),
            ("target_asset", p.target_asset.is_some()),
            ("customer_id", p.customer_id.is_some()),
            ("payment_rail", p.payment_rail.is_some()),
            ("awaiting_funds_incident_after_ms", p.awaiting_funds_incident_after_ms.is_some()),
            ("travel_rule", p.travel_rule.is_some()),
            ("token_id", p.token_id.is_some()),
            ("fee_level", p.fee_level.is_some()),
            ("entity_secret_env", p.entity_secret_env.is_some()),
            ("gas_symbol", p.gas_symbol.is_some()),
            ("gas_decimals", p.gas_decimals.is_some()),
            ("blockchain", p.blockchain.is_some()),
        ];
        fields.into_iter().filter(|(_, set)| *set).map(|(field, _)| field).collect()
    }

    fn only(&self, name: &str, kind: &str, allowed: &[&str]) -> anyhow::Result<()> {
        match self.present().into_iter().find(|f| !allowed.contains(f)) {
            Some(field) => bail!(
                "provider {name}: `{field}` is not a setting of a {kind} provider (its own: {})",
                allowed.join(", ")
            ),
            None => Ok(()),
        }
    }

    fn required(&self, name: &str, field: &str, value: &Option<String>) -> anyhow::Result<String> {
        match value {
            Some(v) if !v.trim().is_empty() => Ok(v.clone()),
            _ => bail!("provider {name}: `{field}` is required for a {} provider", self.0.kind),
        }
    }
}

fn url_of(name: &str, text: &str) -> anyhow::Result<()> {
    payoutd_rail_provider::check_base_url(text).with_context(|| format!("provider {name}"))
}

/// The provider's rail and the assets it pays; its account kept in the ledger as hot wallet
/// `wallet_id` (the row `ensure_signing_wallet` gave it) where the balance can be compared.
pub fn provider_line(
    p: &ProviderConfig,
    assets: &AssetRegistry,
    wallet_id: String,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<StandaloneLine> {
    let name = &p.name;
    let assets: Vec<_> = assets
        .iter()
        .filter(|a| a.rail == RailFamily::Provider && &a.network == name)
        .cloned()
        .collect();
    if assets.is_empty() {
        bail!(
            "provider {name}: no asset configured on it (an [[assets]] entry `provider:{name}/<SYMBOL>` with kind = \"provider\")"
        );
    }
    let [asset] = assets.as_slice() else {
        bail!("provider {name}: pays exactly one asset, {} configured", assets.len());
    };
    let decimals = asset.decimals;
    let http = |e: payoutd_rail_provider::ClientError| anyhow::anyhow!("provider {name}: {e}");
    let api: Arc<dyn ProviderApi> = match &p.api {
        ProviderKind::Stripe(config) => Arc::new(StripeApi::new(config.clone()).map_err(http)?),
        ProviderKind::Coinbase(config) => Arc::new(
            CoinbaseApi::new(CoinbaseConfig { decimals, ..config.clone() })
                .with_context(|| format!("provider {name}"))?,
        ),
        ProviderKind::Bridge(config) => {
            Arc::new(BridgeApi::new(BridgeConfig { decimals, ..config.clone() }).map_err(http)?)
        }
        ProviderKind::Circle(config) => Arc::new(
            CircleApi::new(CircleConfig { decimals, ..config.clone() })
                .with_context(|| format!("provider {name}"))?,
        ),
    };
    tracing::info!(provider = %name, kind = api.provider(), account = api.account(), key_window_ms = p.rail.key_window_ms(), margin_ms = p.rail.margin_ms(),
        assets = ?assets.iter().map(|a| a.code.as_str()).collect::<Vec<_>>(), "payout provider");
    let rail = ProviderRail::new(api, clock, p.rail.clone());
    let rail = match p.fee_asset(asset)? {
        Some(native) => {
            rail.with_wallet(RailWallet { id: wallet_id, address: p.account().to_owned(), native })
        }
        None => {
            tracing::warn!(provider = %name, "the account pays in another asset than it sends: its books and balance are not kept in the ledger");
            rail
        }
    };
    Ok(StandaloneLine { rail: Arc::new(rail), assets })
}

#[cfg(test)]
mod tests;
