//! Stripe: Connect transfers (`POST /v1/transfers`) from the platform balance to a connected account, found by `transfer_group`.
//!
//! Why transfers and not payouts: a transfer is final when created (no `paid` that can still turn
//! `failed` days later, as Stripe documents for payouts), and `transfer_group` is a server-side
//! list filter, so a transfer is found by our reference with one exact query; Stripe offers no
//! search over payouts. Shapes follow `stripe/openapi` spec3 (API version 2023-08-16).

use std::collections::HashMap;

use async_trait::async_trait;
use payoutd_domain::{Amount, Asset, Destination, Payout, Secret};
use serde::Deserialize;

use crate::api::{
    self, CallError, Created, CreatedWithin, ProviderApi, ProviderState, ProviderTransfer,
    TransferPage,
};
use crate::http;

/// Stripe's largest page.
const LIST_LIMIT_MAX: u32 = 100;
/// The API version every request pins (`Stripe-Version`): the one of the spec the shapes here
/// follow, whatever the account's default version is or becomes.
pub const STRIPE_API_VERSION: &str = "2023-08-16";
/// Pages read per reconciliation pass at most; the cursor carries on next pass.
const LIST_PAGES_PER_PASS_MAX: u32 = 10;
/// The metadata key carrying our reference (beside `transfer_group`).
pub const METADATA_REFERENCE: &str = "payoutd_reference";

#[derive(Clone)]
pub struct StripeConfig {
    /// `https://api.stripe.com` in production.
    pub base_url: String,
    /// The platform's secret key (`sk_...`).
    pub api_key: Secret,
    /// Names the platform account in logs and the reconciliation cursor.
    pub account: String,
    /// The lower-case ISO currency the asset is paid in (`usd`); amounts are its minor units.
    pub currency: String,
    pub request_timeout_ms: u64,
}

pub struct StripeApi {
    config: StripeConfig,
    http: reqwest::Client,
}

#[derive(Debug, Deserialize)]
struct StripeTransfer {
    id: String,
    amount: i64,
    #[serde(default)]
    amount_reversed: i64,
    currency: String,
    destination: Option<String>,
    transfer_group: Option<String>,
    #[serde(default)]
    metadata: HashMap<String, String>,
    #[serde(default)]
    reversed: bool,
}

/// `GET /v1/balance`: funds per currency; transfers draw on `available`.
#[derive(Debug, Deserialize)]
struct StripeBalance {
    available: Vec<StripeFunds>,
}

#[derive(Debug, Deserialize)]
struct StripeFunds {
    /// In the currency's minor units, as every Stripe amount.
    amount: i64,
    currency: String,
}

#[derive(Debug, Deserialize)]
struct StripeList {
    data: Vec<StripeTransfer>,
    has_more: bool,
}

#[derive(Debug, Deserialize)]
struct StripeErrorBody {
    error: StripeError,
}

#[derive(Debug, Deserialize)]
struct StripeError {
    #[serde(rename = "type")]
    kind: String,
    code: Option<String>,
    message: Option<String>,
}

impl StripeApi {
    pub fn new(config: StripeConfig) -> Result<StripeApi, http::ClientError> {
        Ok(StripeApi { http: http::client(&config.base_url, config.request_timeout_ms)?, config })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.config.base_url.trim_end_matches('/'))
    }

    fn transfer_of(&self, t: StripeTransfer) -> ProviderTransfer {
        let reference =
            t.transfer_group.clone().or_else(|| t.metadata.get(METADATA_REFERENCE).cloned());
        // A transfer is final when created; only a reversal, made by someone with the platform's
        // account, takes money back: in full, a person decides (paying again on our own would
        // undo a deliberate clawback); in part, the recipient kept less than the payout.
        let state = if t.reversed && t.amount_reversed >= t.amount {
            ProviderState::Reversed {
                detail: format!(
                    "reversed in full ({} of {} {})",
                    t.amount_reversed, t.amount, t.currency
                ),
            }
        } else {
            ProviderState::Completed
        };
        let kept = t.amount.saturating_sub(t.amount_reversed);
        let amount = (t.currency == self.config.currency)
            .then(|| u128::try_from(kept).ok().map(Amount::from_u128))
            .flatten();
        // Stripe charges no fee on a transfer between accounts.
        ProviderTransfer {
            id: t.id,
            reference,
            state,
            amount,
            debited: None,
            destination: t.destination,
            withheld: Amount::ZERO,
            fee: Amount::ZERO,
        }
    }

    async fn get_json<T: for<'de> Deserialize<'de>>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, CallError> {
        read(
            self.http
                .get(self.url(path))
                .bearer_auth(self.config.api_key.expose())
                .header("Stripe-Version", STRIPE_API_VERSION)
                .query(query)
                .send()
                .await,
        )
        .await
    }

    async fn list(&self, query: &[(&str, String)]) -> Result<StripeList, CallError> {
        self.get_json("/v1/transfers", query).await
    }
}

/// A 5xx that Stripe marks as the saved answer of an earlier request with the same key.
fn replayed_server_error(response: &reqwest::Response) -> bool {
    response.status().is_server_error()
        && response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}

/// Reads a Stripe answer: the body on 2xx, else its error classified once, here.
async fn read<T: for<'de> Deserialize<'de>>(
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Result<T, CallError> {
    http::read_json("Stripe", sent, stripe_error).await
}

/// What a non-2xx answer of Stripe's means, from its status and its error body.
fn stripe_error(status: u16, body: &str) -> CallError {
    let error = serde_json::from_str::<StripeErrorBody>(body).ok().map(|b| b.error);
    let what = match &error {
        Some(e) => format!(
            "Stripe {status} {} {}: {}",
            e.kind,
            e.code.as_deref().unwrap_or("-"),
            e.message.as_deref().unwrap_or("")
        ),
        None => format!("Stripe {status}"),
    };
    match error.as_ref().map(|e| e.kind.as_str()) {
        Some("idempotency_error") => CallError::KeyConflict(what),
        // The types Stripe documents (docs.stripe.com/api/errors): the status decides.
        Some("invalid_request_error" | "card_error" | "api_error") => http::by_status(status, what),
        // Any other type, or no body: it says nothing of whether the transfer was made.
        _ => CallError::Ambiguous(what),
    }
}

#[async_trait]
impl ProviderApi for StripeApi {
    fn provider(&self) -> &'static str {
        "stripe"
    }

    fn account(&self) -> &str {
        &self.config.account
    }

    fn request_for(&self, payout: &Payout, reference: &str) -> Result<Vec<u8>, String> {
        let Destination::Account(account) = &payout.destination else {
            return Err(format!(
                "Stripe pays connected accounts (acct_...), not {}",
                payout.destination
            ));
        };
        let amount: i64 = payout.amount.to_string().parse().map_err(|_| {
            format!("amount {} does not fit Stripe's integer amounts", payout.amount)
        })?;
        let form = [
            ("amount", amount.to_string()),
            ("currency", self.config.currency.clone()),
            ("destination", account.to_string()),
            ("transfer_group", reference.to_owned()),
            (&format!("metadata[{METADATA_REFERENCE}]"), reference.to_owned()),
            ("metadata[payout_id]", payout.id.to_string()),
            ("description", format!("payoutd payout {}", payout.id)),
        ];
        serde_urlencoded::to_string(form).map(String::into_bytes).map_err(|e| e.to_string())
    }

    async fn create(
        &self,
        idempotency_key: &str,
        stored_request: &[u8],
    ) -> Result<Created, CallError> {
        let sent = self
            .http
            .post(self.url("/v1/transfers"))
            .bearer_auth(self.config.api_key.expose())
            .header("Stripe-Version", STRIPE_API_VERSION)
            .header("Idempotency-Key", idempotency_key)
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(stored_request.to_vec())
            .send()
            .await;
        let replayed = sent.as_ref().is_ok_and(replayed_server_error);
        match read::<StripeTransfer>(sent).await {
            Ok(transfer) => Ok(Created { transfer: self.transfer_of(transfer) }),
            // "Subsequent requests with the same key return the same result, including 500
            // errors" (docs.stripe.com/api/idempotent_requests): the key is spent.
            Err(CallError::Ambiguous(what)) if replayed => Err(CallError::Replayed(what)),
            Err(e) => Err(e),
        }
    }

    async fn get(&self, id: &str) -> Result<ProviderTransfer, CallError> {
        let transfer: StripeTransfer = self.get_json(&format!("/v1/transfers/{id}"), &[]).await?;
        Ok(self.transfer_of(transfer))
    }

    async fn find_by_reference(
        &self,
        reference: &str,
        _stored_request: &[u8],
        _created: CreatedWithin,
    ) -> Result<Vec<ProviderTransfer>, CallError> {
        // `transfer_group` is filtered by Stripe itself: exact, whatever the age.
        let list = self
            .list(&[
                ("transfer_group", reference.to_owned()),
                ("limit", LIST_LIMIT_MAX.to_string()),
            ])
            .await?;
        Ok(list.data.into_iter().map(|t| self.transfer_of(t)).collect())
    }

    /// The platform's `available` funds of each asset's currency: what transfers draw on.
    async fn balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, CallError> {
        let balance: StripeBalance = self.get_json("/v1/balance", &[]).await?;
        assets
            .iter()
            .map(|asset| {
                let currency = crate::units::symbol_of(asset);
                let minor: i64 = balance
                    .available
                    .iter()
                    .filter(|f| f.currency == currency)
                    .map(|f| f.amount)
                    .sum();
                // A negative available balance is a debt the account owes Stripe: below every payout.
                u128::try_from(minor).map(Amount::from_u128).or(Ok(Amount::ZERO))
            })
            .collect()
    }

    async fn starting_cursor(&self, _now_ms: i64) -> Result<String, CallError> {
        // The newest transfer now (or the very start).
        let newest = self.list(&[("limit", "1".to_owned())]).await?;
        Ok(api::newest_cursor(newest.data.first().map(|t| t.id.as_str())))
    }

    async fn transfers_after(&self, cursor: &str) -> Result<TransferPage, CallError> {
        let page = |before: Option<String>| async move {
            let mut query = vec![("limit", LIST_LIMIT_MAX.to_string())];
            query.extend(before.map(|id| ("ending_before", id)));
            let list = self.list(&query).await?;
            Ok::<_, CallError>(api::NewestFirst { items: list.data, more: list.has_more })
        };
        let (transfers, at) =
            api::newer_than(cursor, LIST_PAGES_PER_PASS_MAX, page, |t: &StripeTransfer| &t.id)
                .await?;
        let transfers = transfers.into_iter().map(|t| self.transfer_of(t)).collect();
        Ok(TransferPage { transfers, cursor: Some(at) })
    }
}
