//! Coinbase CDP v2 transfers (`POST /platform/v2/transfers`): from a CDP account to an on-chain address, keyed by `X-Idempotency-Key`.
//!
//! Shapes follow `coinbase/cdp-sdk` openapi.yaml (OpenAPI 3.1.0, info.version 2.0.0). CDP lists
//! transfers by time but cannot filter by metadata: our reference (metadata `payoutd_reference`)
//! is matched here, over the transfers created since the attempt. The list filters by creation
//! time (`createdAfter`, `createdBefore`, both inclusive) and promises no order, so only a time
//! window read to its last page proves what it holds: reconciliation reads windows.

use std::collections::HashMap;

use async_trait::async_trait;
use payoutd_domain::{Amount, Asset, Payout, Secret};
use serde::Deserialize;
use serde_json::json;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::answers::ErrorAnswers;
use crate::api::{
    CallError, Created, CreatedWithin, ProviderApi, ProviderState, ProviderTransfer, TransferPage,
};
use crate::cdp_auth::{CdpKey, CdpKeyError};
use crate::coinbase_errors::{carries_request_id, cdp_error};
use crate::http;
use crate::units::{base_units_of, decimal_of};

/// The metadata key carrying our reference.
pub const METADATA_REFERENCE: &str = "payoutd_reference";
/// The key of a payout's metadata object holding its travel rule parties (`beneficiary`, `originator`).
pub const METADATA_TRAVEL_RULE: &str = "travel_rule";
const TRANSFERS_PER_PAGE: u32 = 100;
/// Pages read per reconciliation pass at most.
const PAGES_PER_CALL_MAX: u32 = 20;
/// Pages one lookup by reference reads at most: 5,000 transfers in its window (from ten minutes
/// before the attempt to ten after its last possible create), what an account paying about
/// 200,000 a day makes in it. A lookup runs only for an attempt whose outcome is unknown.
const LOOKUP_PAGES_MAX: u32 = 50;
/// The narrowest time window reconciliation reads: CDP's time filters name whole seconds.
const WINDOW_MS_MIN: i64 = 1_000;
/// Clock difference between us and CDP tolerated when listing "created since".
const CLOCK_SKEW_MS: i64 = 10 * 60 * 1_000;

#[derive(Clone)]
pub struct CoinbaseConfig {
    /// `https://api.cdp.coinbase.com` in production (paths start `/platform/v2`).
    pub base_url: String,
    /// The API key's id (`organizations/.../apiKeys/...` or a UUID) and its secret, which signs a
    /// JWT for every request.
    pub api_key_id: String,
    pub api_key: Secret,
    /// The CDP account payouts leave from (`account_<uuid>`).
    pub account_id: String,
    /// The source asset (`usdc`), the target network (`base`) and asset (`usdc`).
    pub source_asset: String,
    pub network: String,
    pub target_asset: String,
    /// The payout asset's decimals (amounts are sent as decimal strings).
    pub decimals: u8,
    pub request_timeout_ms: u64,
    /// Travel rule data for transfers at or above a threshold; `None`: never sent.
    pub travel_rule: Option<TravelRuleConfig>,
}

/// When and with what a transfer carries CDP's `travelRule` object ("required for transfers to
/// external wallets above regulatory thresholds"; the fields differ by region).
#[derive(Clone, Debug)]
pub struct TravelRuleConfig {
    /// Payouts of at least this many base units carry the object.
    pub from_base_units: u128,
    /// The originator (CDP's `TravelRuleOriginator`: `name`, `address`, ...): the platform, or its
    /// end customer when the platform is a VASP; a payout's `metadata.travel_rule.originator`
    /// takes its place.
    pub originator: serde_json::Value,
    /// CDP's `isIntermediary`: the platform is a VASP paying for its own end customer.
    pub is_intermediary: bool,
}

impl TravelRuleConfig {
    /// The `travelRule` object for `payout`, when its amount needs one: the beneficiary (and
    /// optionally the originator) come from the merchant's metadata. A payout that needs it and
    /// lacks a named beneficiary is refused before any call.
    fn object_for(&self, payout: &Payout) -> Result<Option<serde_json::Value>, String> {
        if payout.amount < payoutd_domain::Amount::from_u128(self.from_base_units) {
            return Ok(None);
        }
        let metadata: serde_json::Value =
            serde_json::from_str(payout.metadata.as_json()).map_err(|e| e.to_string())?;
        let given = &metadata[METADATA_TRAVEL_RULE];
        let beneficiary = &given["beneficiary"];
        if beneficiary["name"].as_str().is_none_or(|n| n.trim().is_empty()) {
            return Err(format!(
                "a payout of {} base units or more to an external wallet needs travel rule data: metadata.{METADATA_TRAVEL_RULE}.beneficiary \
                 (CDP's TravelRuleBeneficiary: name, address, walletType) with at least a name",
                self.from_base_units
            ));
        }
        let originator = if given["originator"].is_object() {
            given["originator"].clone()
        } else {
            self.originator.clone()
        };
        Ok(Some(
            json!({"originator": originator, "beneficiary": beneficiary, "isIntermediary": self.is_intermediary}),
        ))
    }
}

pub struct CoinbaseApi {
    config: CoinbaseConfig,
    key: CdpKey,
    /// `host[:port]` of the base URL: what each token's `uris` names.
    host: String,
    http: reqwest::Client,
    transfers_per_page: u32,
    pages_per_call_max: u32,
    lookup_pages_max: u32,
    /// Each key's last server error: CDP returns "the exact same response" to a repeated key, a
    /// saved error too, and its error bodies carry a per-request `correlationId`.
    error_answers: ErrorAnswers,
}

#[derive(Debug, thiserror::Error)]
pub enum CoinbaseSetupError {
    #[error(transparent)]
    Key(#[from] CdpKeyError),
    #[error("base URL {0:?} is not http(s)://host[/...]")]
    BaseUrl(String),
    #[error("HTTP client: {0}")]
    Client(#[from] http::ClientError),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CdpTransfer {
    transfer_id: String,
    status: Option<String>,
    #[serde(default)]
    target: serde_json::Value,
    target_amount: Option<String>,
    source_amount: Option<String>,
    #[serde(default)]
    metadata: HashMap<String, String>,
    failure_reason: Option<String>,
    created_at: Option<String>,
}

/// A balance of one asset: its amount denominated in several assets, keyed by symbol.
#[derive(Debug, Deserialize)]
struct CdpBalance {
    amount: HashMap<String, CdpAmount>,
}

#[derive(Debug, Deserialize)]
struct CdpAmount {
    total: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CdpList {
    #[serde(default)]
    transfers: Vec<CdpTransfer>,
    next_page_token: Option<String>,
}

impl CoinbaseApi {
    pub fn new(config: CoinbaseConfig) -> Result<CoinbaseApi, CoinbaseSetupError> {
        let host = config
            .base_url
            .split_once("://")
            .filter(|(scheme, _)| *scheme == "https" || *scheme == "http")
            .map(|(_, rest)| rest.split('/').next().unwrap_or_default().to_owned())
            .filter(|h| !h.is_empty())
            .ok_or_else(|| CoinbaseSetupError::BaseUrl(config.base_url.clone()))?;
        let key = CdpKey::parse(&config.api_key_id, &config.api_key)?;
        Ok(CoinbaseApi {
            http: http::client(&config.base_url, config.request_timeout_ms)?,
            key,
            host,
            config,
            transfers_per_page: TRANSFERS_PER_PAGE,
            pages_per_call_max: PAGES_PER_CALL_MAX,
            lookup_pages_max: LOOKUP_PAGES_MAX,
            error_answers: ErrorAnswers::default(),
        })
    }

    /// Smaller list reads than CDP's own (tests reach the limits with a few transfers): pages of
    /// `transfers_per_page`, and `pages_per_call_max` a pass or a lookup.
    pub fn with_list_limits(
        mut self,
        transfers_per_page: u32,
        pages_per_call_max: u32,
    ) -> CoinbaseApi {
        self.transfers_per_page = transfers_per_page.max(1);
        self.pages_per_call_max = pages_per_call_max.max(1);
        self.lookup_pages_max = self.pages_per_call_max;
        self
    }

    fn url(&self, path: &str) -> String {
        format!("{}/platform{path}", self.config.base_url.trim_end_matches('/'))
    }

    /// A request to `path` (under `/platform`) with its own token.
    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, CallError> {
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let token = self
            .key
            .token(method.as_str(), &self.host, &format!("/platform{path}"), now_secs)
            .map_err(|e| {
                CallError::Ambiguous(format!("signing the Coinbase request token: {e}"))
            })?;
        Ok(self.http.request(method, self.url(path)).bearer_auth(token))
    }

    fn transfer_of(&self, t: CdpTransfer) -> ProviderTransfer {
        let state = match t.status.as_deref() {
            Some("quoted" | "processing") => ProviderState::Processing,
            Some("completed") => ProviderState::Completed,
            Some("failed") => ProviderState::Failed {
                proof: format!(
                    "failed: {}",
                    t.failure_reason.as_deref().unwrap_or("no reason given")
                ),
            },
            other => ProviderState::Unrecognised(other.unwrap_or("(none)").to_owned()),
        };
        let amount =
            t.target_amount.as_deref().and_then(|a| base_units_of(a, self.config.decimals));
        let destination = t.target.get("address").and_then(|a| a.as_str()).map(str::to_owned);
        let fee = self.fee_of(&t, amount);
        ProviderTransfer {
            reference: t.metadata.get(METADATA_REFERENCE).cloned(),
            id: t.transfer_id,
            state,
            amount,
            debited: None,
            destination,
            withheld: Amount::ZERO,
            fee,
        }
    }

    /// What the transfer took from the account beyond what the recipient gets: `sourceAmount` less
    /// `targetAmount` ("the amount of the source asset that will be transferred out" against the
    /// recipient's), which holds every fee CDP lists in `fees[]` that is charged in the source
    /// asset. Only when the account pays in the asset it sends; zero when CDP says no more.
    fn fee_of(&self, t: &CdpTransfer, target: Option<Amount>) -> Amount {
        if !self.config.source_asset.eq_ignore_ascii_case(&self.config.target_asset) {
            return Amount::ZERO;
        }
        let source =
            t.source_amount.as_deref().and_then(|a| base_units_of(a, self.config.decimals));
        match (source, target) {
            (Some(source), Some(target)) => source.checked_sub(target).unwrap_or(Amount::ZERO),
            _ => Amount::ZERO,
        }
    }
}

/// Reads a CDP answer: the body on 2xx, else its error classified once, here.
async fn read<T: for<'de> Deserialize<'de>>(
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Result<T, CallError> {
    http::read_json("Coinbase", sent, cdp_error).await
}

/// The destination address of a stored create (`target.address`), if it names one.
fn target_address_of(stored_request: &[u8]) -> Option<String> {
    let body: serde_json::Value = serde_json::from_slice(stored_request).ok()?;
    body["target"]["address"].as_str().map(str::to_owned)
}

/// Milliseconds since the epoch as CDP's RFC 3339 timestamps, to the second.
pub(crate) fn iso_of(ms: i64) -> String {
    let at = OffsetDateTime::from_unix_timestamp(ms.div_euclid(1_000))
        .expect("payoutd's times lie within years 1 to 9999");
    at.format(&Rfc3339).expect("a UTC time formats as RFC 3339")
}

/// When CDP says the transfer was created, in ms (0 when it does not say or says it unreadably:
/// such a transfer sorts first and is judged once, like any other).
fn created_ms(t: &CdpTransfer) -> i64 {
    t.created_at.as_deref().and_then(ms_of_iso).unwrap_or(0)
}

/// An RFC 3339 time (`2026-12-02T07:50:00.123Z`, any offset) in ms since the epoch; `None` for
/// anything else, out-of-range fields included.
pub(crate) fn ms_of_iso(text: &str) -> Option<i64> {
    let at = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos().div_euclid(1_000_000)).ok()
}

#[async_trait]
impl ProviderApi for CoinbaseApi {
    fn provider(&self) -> &'static str {
        "coinbase"
    }

    fn account(&self) -> &str {
        &self.config.account_id
    }

    fn request_for(&self, payout: &Payout, reference: &str) -> Result<Vec<u8>, String> {
        let address = crate::api::chain_destination("Coinbase", payout)?;
        let c = &self.config;
        let mut body = json!({
            "source": {"accountId": c.account_id, "asset": c.source_asset},
            "target": {"address": address, "network": c.network, "asset": c.target_asset},
            "amount": decimal_of(payout.amount, c.decimals),
            "asset": c.target_asset,
            // The recipient gets the payout's amount; fees come on top, not out of it.
            "amountType": "target",
            "execute": true,
            "metadata": {METADATA_REFERENCE: reference, "payout_id": payout.id.as_str()},
        });
        if let Some(rule) =
            c.travel_rule.as_ref().map(|t| t.object_for(payout)).transpose()?.flatten()
        {
            body["travelRule"] = rule;
        }
        serde_json::to_vec(&body).map_err(|e| e.to_string())
    }

    async fn create(
        &self,
        idempotency_key: &str,
        stored_request: &[u8],
    ) -> Result<Created, CallError> {
        let sent = self
            .request(reqwest::Method::POST, "/v2/transfers")?
            .header("X-Idempotency-Key", idempotency_key)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(stored_request.to_vec())
            .send()
            .await;
        let (status, body) = http::answer("Coinbase", sent).await?;
        if (200..300).contains(&status) {
            let transfer: CdpTransfer = http::parse("Coinbase", status, &body)?;
            return Ok(Created { transfer: self.transfer_of(transfer) });
        }
        match cdp_error(status, &body) {
            // The same server error, request id and all, as this key's last answer: the saved one
            // replayed, so the key is spent.
            // Only a CDP error body carrying a request id: a gateway's fixed 5xx page, the same on
            // every request, is no replay, and taking it for one would stop retries that may
            // still create while another worker proves the attempt dead.
            CallError::Ambiguous(what)
                if status >= 500
                    && carries_request_id(&body)
                    && self.error_answers.seen_before(idempotency_key, &body) =>
            {
                Err(CallError::Replayed(what))
            }
            error => Err(error),
        }
    }

    async fn get(&self, id: &str) -> Result<ProviderTransfer, CallError> {
        let sent = self.request(reqwest::Method::GET, &format!("/v2/transfers/{id}"))?.send().await;
        Ok(self.transfer_of(read(sent).await?))
    }

    /// First among the transfers to the attempt's destination address (`targetAddress`, a filter
    /// of CDP's list), so a busy account's other transfers never keep ours from being found. Found
    /// nothing there: the account's whole listing since the attempt decides, since how CDP
    /// compares addresses (their case) is not documented, and absence may prove a death.
    async fn find_by_reference(
        &self,
        reference: &str,
        stored_request: &[u8],
        created: CreatedWithin,
    ) -> Result<Vec<ProviderTransfer>, CallError> {
        let window = (created.from_ms - CLOCK_SKEW_MS, created.until_ms + CLOCK_SKEW_MS);
        let ours = |listed: Vec<CdpTransfer>| -> Vec<ProviderTransfer> {
            listed
                .into_iter()
                .filter(|t| t.metadata.get(METADATA_REFERENCE).is_some_and(|r| r == reference))
                .map(|t| self.transfer_of(t))
                .collect()
        };
        if let Some(address) = target_address_of(stored_request) {
            let narrowed = ours(self.created_within(window, &[("targetAddress", address)]).await?);
            if !narrowed.is_empty() {
                return Ok(narrowed);
            }
        }
        Ok(ours(self.created_within(window, &[]).await?))
    }

    /// `GET /v2/accounts/{accountId}/balances/{asset}`: the account's `total` of each asset (what it
    /// holds, funds on hold included), a decimal string keyed by the asset's own symbol.
    async fn balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, CallError> {
        let mut balances = Vec::with_capacity(assets.len());
        for asset in assets {
            let symbol = crate::units::symbol_of(asset);
            let path = format!("/v2/accounts/{}/balances/{symbol}", self.config.account_id);
            let balance: CdpBalance =
                match read(self.request(reqwest::Method::GET, &path)?.send().await).await {
                    Ok(balance) => balance,
                    // An asset the account never held: none. (A wrong account reads as empty too, and
                    // the balance check then reports the whole ledger balance missing.)
                    Err(CallError::NotFound(_)) => {
                        balances.push(Amount::ZERO);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
            let total = balance.amount.get(&symbol).map(|a| a.total.as_str()).unwrap_or("0");
            balances.push(crate::units::balance_of("Coinbase", total, asset)?);
        }
        Ok(balances)
    }

    async fn starting_cursor(&self, now_ms: i64) -> Result<String, CallError> {
        // CDP promises no list order, so the start is a time: what was created before now is not judged.
        Ok(format!("{now_ms}|"))
    }

    /// Time windows from the cursor until one reaches the present or the pass's pages run out;
    /// the cursor moves over each window read whole (see [`Cursor`], [`CatchUp`]).
    async fn transfers_after(&self, text: &str) -> Result<TransferPage, CallError> {
        let mut cursor = Cursor::parse(text)
            .ok_or_else(|| CallError::BadAnswer(format!("reconciliation cursor {text:?}")))?;
        let mut judged = Vec::new();
        let mut pages_left = self.pages_per_call_max;
        loop {
            let window = self.read_window(&cursor, pages_left).await?;
            judged.extend(window.fresh);
            pages_left = pages_left.saturating_sub(window.pages);
            let caught_up = cursor.catch_up.is_none() && window.complete;
            cursor = window.next;
            if caught_up || !window.complete || pages_left == 0 {
                break;
            }
        }
        judged.sort_by_key(judged_key);
        let next = Some(cursor.to_string()).filter(|next| next != text);
        Ok(TransferPage {
            transfers: judged.into_iter().map(|t| self.transfer_of(t)).collect(),
            cursor: next,
        })
    }
}

#[path = "coinbase_listing.rs"]
mod listing;
use listing::{Cursor, judged_key};

#[cfg(test)]
mod tests {
    use super::listing::CatchUp;
    use super::*;

    #[test]
    fn only_an_error_naming_its_request_can_be_a_replay() {
        let cdp =
            r#"{"errorType":"internal_server_error","errorMessage":"x","correlationId":"a1"}"#;
        assert!(carries_request_id(cdp));
        assert!(!carries_request_id(r#"{"errorType":"internal_server_error","errorMessage":"x"}"#));
        assert!(!carries_request_id("<html>503 Service Temporarily Unavailable</html>"));
    }

    #[test]
    fn iso_timestamps_are_utc_seconds() {
        assert_eq!(iso_of(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_of(1_800_000_000_000), "2027-01-15T08:00:00Z");
        assert_eq!(iso_of(951_782_400_000), "2000-02-29T00:00:00Z");
        for ms in [0, 951_782_400_000, 1_800_000_000_000, 1_764_661_800_000] {
            assert_eq!(ms_of_iso(&iso_of(ms)), Some(ms));
        }
        assert_eq!(ms_of_iso("2027-01-15T08:00:00.123Z"), Some(1_800_000_000_123));
        assert_eq!(ms_of_iso("2027-01-15T08:00:00.5+00:00"), Some(1_800_000_000_500));
        assert_eq!(ms_of_iso("yesterday"), None);
        assert_eq!(
            ms_of_iso("2027-01-15T09:00:00+01:00"),
            Some(1_800_000_000_000),
            "an offset is honoured"
        );
        for out_of_range in [
            "2027-13-15T08:00:00Z",
            "2027-02-30T08:00:00Z",
            "2027-01-15T24:00:00Z",
            "2027-01-15T08:61:00Z",
        ] {
            assert_eq!(ms_of_iso(out_of_range), None, "{out_of_range}");
        }
    }

    #[test]
    fn cursors_stored_before_catching_up_existed_still_parse() {
        for old in ["1800000000000|", "1800000000123|transfer_af2937b0-9846-4fe7-bfe9-ccc22d935114"]
        {
            let cursor = Cursor::parse(old).unwrap();
            assert_eq!(cursor.catch_up, None);
            assert_eq!(cursor.to_string(), old);
        }
        let catching_up = "1800000000000||8000|1800000060000";
        assert_eq!(
            Cursor::parse(catching_up).unwrap().catch_up,
            Some(CatchUp { span_ms: 8_000, horizon_ms: 1_800_000_060_000 })
        );
        assert_eq!(Cursor::parse(catching_up).unwrap().to_string(), catching_up);
        for bad in ["", "x|", "1|a|b", "1|a|0|5", "1|a|2|3|4"] {
            assert_eq!(Cursor::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn windows_halve_down_to_a_second_and_never_pass_the_horizon() {
        let c = CatchUp::up_to(0, Some(10_000), 2).unwrap();
        assert_eq!((c.span_ms, c.window_end_ms(0), c.window_end_ms(9_000)), (5_000, 5_000, 10_000));
        let c = c.halved(0, 2).unwrap().halved(0, 2).unwrap().halved(0, 2).unwrap();
        assert_eq!(c.span_ms, WINDOW_MS_MIN);
        assert!(c.halved(0, 2).is_err(), "a second too full for a pass cannot be narrowed");
        assert!(
            CatchUp::up_to(5_000, Some(5_000), 2).is_err(),
            "nothing listed after the cursor names no horizon"
        );
    }
}
