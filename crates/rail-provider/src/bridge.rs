//! Bridge transfers (`POST /v0/transfers`): from a Bridge wallet to an on-chain address, keyed by `Idempotency-Key`.
//!
//! Shapes follow Bridge's API reference (apidocs.bridge.xyz, v0; Bridge publishes no OpenAPI
//! document). Bridge lists transfers newest first and cannot filter by `client_reference_id`: our
//! reference is matched here, over the pages of the attempt's window.

use async_trait::async_trait;
use payoutd_domain::{Amount, Asset, Payout, Secret};
use serde::Deserialize;
use serde_json::json;

use crate::api::{
    self, CallError, Created, CreatedWithin, ProviderApi, ProviderState, ProviderTransfer,
    TransferPage,
};
use crate::coinbase::ms_of_iso;
use crate::http;
use crate::units::{base_units_of, decimal_of};

/// Bridge's largest page.
const LIMIT_MAX: u32 = 100;
const PAGES_PER_CALL_MAX: u32 = 20;
/// The pages one lookup by reference may read: an account paying 100,000 transfers a day makes
/// about 3,500 in an attempt's window and the search's span after it (see the lookup benchmark).
const LOOKUP_PAGES_MAX: u32 = 60;
/// How far past a window's end the search for a transfer to start reading from looks: transfers
/// Bridge finishes updating within it (minutes, for a wallet's) can start the read.
const TOP_SEARCH_MS: i64 = 10 * 60 * 1_000;
const CLOCK_SKEW_MS: i64 = 10 * 60 * 1_000;
/// The source rail of a transfer paid out of a Bridge wallet.
const BRIDGE_WALLET_RAIL: &str = "bridge_wallet";

#[derive(Clone)]
pub struct BridgeConfig {
    /// `https://api.bridge.xyz` in production (paths start `/v0`).
    pub base_url: String,
    pub api_key: Secret,
    /// The customer the transfers are made for (`on_behalf_of`).
    pub customer_id: String,
    /// The Bridge wallet paid from (the transfer's source), and the chain the payouts go out on
    /// (`ethereum`: the destination's rail).
    pub bridge_wallet_id: String,
    pub payment_rail: String,
    /// The currency leaving the wallet (`usdb`: what a Bridge wallet holds) and the one the
    /// recipient gets (`usdc`): Bridge's wallet guide moves `usdb` out as `usdc`.
    pub source_currency: String,
    pub currency: String,
    /// The `initiation` object sent with every transfer, for a wallet whose answer says
    /// `initiation_required: true`; `None` for a wallet that does not (Bridge: "if the field is
    /// omitted, do not include initiation"). Stored with the request, so a retry sends the same.
    pub initiation: Option<serde_json::Value>,
    pub decimals: u8,
    pub request_timeout_ms: u64,
}

pub struct BridgeApi {
    config: BridgeConfig,
    http: reqwest::Client,
}

/// A customer's Bridge wallet: its balances per currency, as decimal strings.
#[derive(Debug, Deserialize)]
struct BridgeWallet {
    #[serde(default)]
    balances: Vec<BridgeBalance>,
}

#[derive(Debug, Deserialize)]
struct BridgeBalance {
    balance: String,
    currency: String,
}

#[derive(Debug, Deserialize)]
struct BridgeTransfer {
    id: String,
    client_reference_id: Option<String>,
    state: Option<String>,
    amount: Option<String>,
    #[serde(default)]
    destination: serde_json::Value,
    created_at: Option<String>,
    receipt: Option<BridgeReceipt>,
}

/// The part of a transfer's receipt that says what reached the recipient.
#[derive(Debug, Deserialize)]
struct BridgeReceipt {
    /// The amount less Bridge's fees (gas, developer, exchange): what the recipient gets.
    final_amount: Option<String>,
    /// The network's fee Bridge took out of the amount ("usually 0").
    gas_fee: Option<String>,
}

#[derive(Debug, Deserialize)]
struct BridgeList {
    #[serde(default)]
    data: Vec<BridgeTransfer>,
}

#[derive(Debug, Deserialize)]
struct BridgeError {
    code: Option<String>,
    message: Option<String>,
}

impl BridgeApi {
    pub fn new(config: BridgeConfig) -> Result<BridgeApi, http::ClientError> {
        Ok(BridgeApi { http: http::client(&config.base_url, config.request_timeout_ms)?, config })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v0{path}", self.config.base_url.trim_end_matches('/'))
    }

    fn transfer_of(&self, t: BridgeTransfer) -> ProviderTransfer {
        let state = match t.state.as_deref() {
            // Bridge holds the transfer until its source is funded (never, from an empty or
            // misconfigured source): past a wait, a person is told.
            Some("awaiting_funds") => ProviderState::AwaitingFunds,
            Some("funds_received" | "payment_submitted" | "in_review" | "refund_in_flight") => {
                ProviderState::Processing
            }
            // "Funds have returned to Bridge and a refund to the sender is underway", or on their
            // way back: not final until the refund ends (`refunded`, or `refund_failed`).
            Some("undeliverable" | "returned") => ProviderState::Processing,
            // What reached the recipient is known only once the receipt carries `final_amount`
            // ("missing" until the gas is known): not paid before then.
            Some("payment_processed")
                if t.receipt.as_ref().is_some_and(|r| r.final_amount.is_some()) =>
            {
                ProviderState::Completed
            }
            Some("payment_processed") => ProviderState::Processing,
            // The money never went out, or is back with the source: Bridge's own word is the proof.
            Some(state @ ("canceled" | "refunded")) => {
                ProviderState::Failed { proof: format!("state {state}") }
            }
            // `error` ("requires manual review or developer action"), `refund_failed`,
            // `missing_return_policy` and anything new: not a proof of anything, a person decides.
            other => ProviderState::Unrecognised(other.unwrap_or("(none)").to_owned()),
        };
        // What the recipient gets: the receipt's final amount (fees come out of the amount), else,
        // while the transfer is on its way, the amount asked.
        let delivered =
            t.receipt.as_ref().and_then(|r| r.final_amount.as_deref()).or(t.amount.as_deref());
        let amount = delivered.and_then(|a| base_units_of(a, self.config.decimals));
        let destination =
            t.destination.get("to_address").and_then(|a| a.as_str()).map(str::to_owned);
        // Bridge takes its fees out of the amount: the wallet's side is the whole amount, and the
        // gas it took is what the rail may accept as withheld; a recipient short of anything else
        // is a mismatch for a person.
        let debited = t.amount.as_deref().and_then(|a| base_units_of(a, self.config.decimals));
        let withheld = t
            .receipt
            .as_ref()
            .filter(|r| r.final_amount.is_some())
            .and_then(|r| r.gas_fee.as_deref())
            .and_then(|g| base_units_of(g, self.config.decimals))
            .unwrap_or(Amount::ZERO);
        ProviderTransfer {
            reference: t.client_reference_id,
            id: t.id,
            state,
            amount,
            debited,
            destination,
            withheld,
            fee: Amount::ZERO,
        }
    }

    /// The customer's Bridge wallet (`GET /v0/customers/{customerID}/wallets/{bridgeWalletID}`).
    async fn wallet(&self) -> Result<BridgeWallet, CallError> {
        let path = format!(
            "/customers/{}/wallets/{}",
            self.config.customer_id, self.config.bridge_wallet_id
        );
        let sent = self
            .http
            .get(self.url(&path))
            .header("Api-Key", self.config.api_key.expose())
            .send()
            .await;
        read(sent).await
    }

    /// The wallet's balance of the currency that leaves it, as `asset` (the asset paid, which is
    /// also the one Bridge's fees come out of): `usdb` held pays `usdc` out.
    fn balance_in(&self, wallet: &BridgeWallet, asset: &Asset) -> Result<Amount, CallError> {
        let source = &self.config.source_currency;
        match wallet.balances.iter().find(|b| b.currency.eq_ignore_ascii_case(source)) {
            Some(b) => crate::units::balance_of("Bridge", &b.balance, asset),
            None => Ok(Amount::ZERO),
        }
    }

    /// A transfer Bridge made after `after_ms`, near it: where a lookup of a window that closed
    /// long ago starts reading, instead of at the newest. Found with `updated_before_ms` (the only
    /// time filter of Bridge's list, and one no page cursor goes with): the newest transfer last
    /// updated before a while past `after_ms`. It counts only if it was itself made after
    /// `after_ms`, since every transfer made before it is then listed after it; `None` (read from
    /// the newest) otherwise.
    async fn made_after(&self, after_ms: i64) -> Result<Option<BridgeTransfer>, CallError> {
        let before_ms = after_ms + TOP_SEARCH_MS;
        let query = [("limit", "1".to_owned()), ("updated_before_ms", before_ms.to_string())];
        let top = self.list(&query).await?.into_iter().next();
        Ok(top.filter(|t| created_ms(t).is_some_and(|at| at > after_ms)))
    }

    /// The configured customer's transfers (`GET /v0/customers/{customerID}/transfers`): the
    /// developer account's other customers' transfers are none of this rail's business.
    async fn list(&self, query: &[(&str, String)]) -> Result<Vec<BridgeTransfer>, CallError> {
        let sent = self
            .http
            .get(self.url(&format!("/customers/{}/transfers", self.config.customer_id)))
            .header("Api-Key", self.config.api_key.expose())
            .query(query)
            .send()
            .await;
        Ok(read::<BridgeList>(sent).await?.data)
    }
}

/// When Bridge made `transfer`, by its own clock.
fn created_ms(transfer: &BridgeTransfer) -> Option<i64> {
    transfer.created_at.as_deref().and_then(ms_of_iso)
}

/// `transfer`, if it carries our `reference`.
fn matching(reference: &str, transfer: BridgeTransfer) -> Option<BridgeTransfer> {
    (transfer.client_reference_id.as_deref() == Some(reference)).then_some(transfer)
}

/// Reads a Bridge answer: the body on 2xx, else its error classified once, here.
async fn read<T: for<'de> Deserialize<'de>>(
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Result<T, CallError> {
    http::read_json("Bridge", sent, bridge_error).await
}

/// What a non-2xx answer of Bridge's means, from its status and its error body.
fn bridge_error(status: u16, body: &str) -> CallError {
    let error = serde_json::from_str::<BridgeError>(body).ok();
    let code = error.as_ref().and_then(|e| e.code.clone()).unwrap_or_default();
    let what =
        format!("Bridge {status} {code}: {}", error.and_then(|e| e.message).unwrap_or_default());
    match (status, code.as_str()) {
        // The same key with another body: proves nothing either way.
        (_, "duplicate_record" | "not_truly_idempotent") => CallError::KeyConflict(what),
        // Bridge documents a 422 for a key past its 24 h, which no create of ours can send (creates
        // stop a margin before the window ends); any other 422 is a request Bridge would not
        // process. As a refusal it ends a first call, and proves nothing on a retry (the rail's rule).
        (422, _) => CallError::Refused(what),
        // A 4xx refuses only with a code Bridge documents for a request it would not process; any
        // other code, one added after this adapter was written among them, or no body says
        // nothing of whether the transfer was made: a lookup decides.
        (400..=403, code) if REFUSING_CODES.contains(&code) => CallError::Refused(what),
        (404, _) => CallError::NotFound(what),
        (400..=499, _) => CallError::Ambiguous(what),
        _ => http::by_status(status, what),
    }
}

/// Bridge's error codes that refuse a request for what it says, nothing made ("transfer errors
/// and recovery"): the 400s, `not_allowed` (401) and the 403s documented there.
const REFUSING_CODES: [&str; 14] = [
    "invalid_parameters",
    "invalid_json",
    "not_found",
    "bad_request",
    "frozen",
    "has_not_accepted_tos",
    "requires_active_kyc_status",
    "deactivated_external_account",
    "invalid_geographic_location",
    "missing_address_data",
    "cards_endorsement_approval_required",
    "not_allowed",
    "missing_required_endorsements",
    "developer_limits_exceeded",
];

#[async_trait]
impl ProviderApi for BridgeApi {
    fn provider(&self) -> &'static str {
        "bridge"
    }

    fn account(&self) -> &str {
        &self.config.bridge_wallet_id
    }

    fn request_for(&self, payout: &Payout, reference: &str) -> Result<Vec<u8>, String> {
        let address = crate::api::chain_destination("Bridge", payout)?;
        let c = &self.config;
        let mut body = json!({
            "client_reference_id": reference,
            "amount": decimal_of(payout.amount, c.decimals),
            "on_behalf_of": c.customer_id,
            // Bridge pulls the funds itself only from a Bridge wallet (or a prefunded account); any
            // other source answers deposit instructions and waits in `awaiting_funds`.
            "source": {"payment_rail": BRIDGE_WALLET_RAIL, "currency": c.source_currency, "bridge_wallet_id": c.bridge_wallet_id},
            "destination": {"payment_rail": c.payment_rail, "currency": c.currency, "to_address": address},
        });
        if let Some(initiation) = &c.initiation {
            body["initiation"] = initiation.clone();
        }
        serde_json::to_vec(&body).map_err(|e| e.to_string())
    }

    async fn create(
        &self,
        idempotency_key: &str,
        stored_request: &[u8],
    ) -> Result<Created, CallError> {
        let sent = self
            .http
            .post(self.url("/transfers"))
            .header("Api-Key", self.config.api_key.expose())
            .header("Idempotency-Key", idempotency_key)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(stored_request.to_vec())
            .send()
            .await;
        Ok(Created { transfer: self.transfer_of(read(sent).await?) })
    }

    async fn get(&self, id: &str) -> Result<ProviderTransfer, CallError> {
        let sent = self
            .http
            .get(self.url(&format!("/transfers/{id}")))
            .header("Api-Key", self.config.api_key.expose())
            .send()
            .await;
        Ok(self.transfer_of(read(sent).await?))
    }

    async fn find_by_reference(
        &self,
        reference: &str,
        _stored_request: &[u8],
        created: CreatedWithin,
    ) -> Result<Vec<ProviderTransfer>, CallError> {
        // Newest first, from a transfer made after the window (or the newest) back past its start,
        // each end widened by the clock skew: Bridge's list filters by neither creation time nor
        // reference, so every transfer in between is read.
        let (oldest_ms, newest_ms) =
            (created.from_ms - CLOCK_SKEW_MS, created.until_ms + CLOCK_SKEW_MS);
        let mut found = Vec::new();
        let top = self.made_after(newest_ms).await?;
        let mut after = top.as_ref().map(|t| t.id.clone());
        found.extend(top.and_then(|t| matching(reference, t)));
        for _ in 0..LOOKUP_PAGES_MAX {
            let mut query = vec![("limit", LIMIT_MAX.to_string())];
            query.extend(after.clone().map(|id| ("starting_after", id)));
            let page = self.list(&query).await?;
            let Some(last) = page.last() else {
                return Ok(found.into_iter().map(|t| self.transfer_of(t)).collect());
            };
            after = Some(last.id.clone());
            let reached_oldest = created_ms(last).is_some_and(|at| at < oldest_ms);
            found.extend(page.into_iter().filter_map(|t| matching(reference, t)));
            if reached_oldest {
                return Ok(found.into_iter().map(|t| self.transfer_of(t)).collect());
            }
        }
        // A partial scan proves no absence: finding nothing in it must not let an attempt die.
        Err(CallError::Ambiguous(format!(
            "{LOOKUP_PAGES_MAX} pages of Bridge transfers did not reach the attempt's window; read again later"
        )))
    }

    async fn balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, CallError> {
        let wallet = self.wallet().await?;
        assets.iter().map(|asset| self.balance_in(&wallet, asset)).collect()
    }

    async fn starting_cursor(&self, _now_ms: i64) -> Result<String, CallError> {
        let newest = self.list(&[("limit", "1".to_owned())]).await?;
        Ok(api::newest_cursor(newest.first().map(|t| t.id.as_str())))
    }

    async fn transfers_after(&self, cursor: &str) -> Result<TransferPage, CallError> {
        let page = |before: Option<String>| async move {
            let mut query = vec![("limit", LIMIT_MAX.to_string())];
            query.extend(before.map(|id| ("ending_before", id)));
            let items = self.list(&query).await?;
            // Bridge says nothing of more: a full page may have more before it.
            let more = items.len() == LIMIT_MAX as usize;
            Ok::<_, CallError>(api::NewestFirst { items, more })
        };
        let (transfers, at) =
            api::newer_than(cursor, PAGES_PER_CALL_MAX, page, |t: &BridgeTransfer| &t.id).await?;
        let transfers = transfers.into_iter().map(|t| self.transfer_of(t)).collect();
        Ok(TransferPage { transfers, cursor: Some(at) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bridge documents a 422 only for a key past its 24 h, which no create of ours sends: any
    /// other 422 refuses (a first call ends at once, a retry proves nothing by the rail's rule),
    /// while the key meeting another body proves nothing. (Before, every 422 was a key conflict,
    /// which held the payout a day for a request Bridge would never process.)
    #[test]
    fn a_422_refuses_and_a_key_with_another_body_proves_nothing() {
        let body = r#"{"code":"unprocessable_entity","message":"amount below the minimum"}"#;
        assert!(matches!(bridge_error(422, body), CallError::Refused(_)));
        let conflict = r#"{"code":"not_truly_idempotent","message":"another body"}"#;
        assert!(matches!(bridge_error(400, conflict), CallError::KeyConflict(_)));
        let duplicate = r#"{"code":"duplicate_record","message":"reused"}"#;
        assert!(matches!(bridge_error(400, duplicate), CallError::KeyConflict(_)));
        assert!(matches!(bridge_error(400, r#"{"code":"not_found"}"#), CallError::Refused(_)));
        assert!(matches!(bridge_error(500, ""), CallError::Ambiguous(_)));
    }

    /// A 4xx whose code Bridge does not document (or with no body) proves nothing: it may have
    /// come after the transfer was made. (Before, any 400 was a refusal that ended the attempt
    /// and let the next one pay.)
    #[test]
    fn an_undocumented_code_proves_nothing() {
        let unknown = r#"{"code":"something_new","message":"?"}"#;
        assert!(matches!(bridge_error(400, unknown), CallError::Ambiguous(_)));
        assert!(matches!(bridge_error(400, "<html>bad gateway</html>"), CallError::Ambiguous(_)));
        let limits = r#"{"code":"developer_limits_exceeded"}"#;
        assert!(matches!(bridge_error(403, limits), CallError::Refused(_)));
        assert!(matches!(bridge_error(404, ""), CallError::NotFound(_)));
    }
}
