//! What Coinbase CDP's error answers mean: which of its error types refuse a request (nothing made), and which prove nothing.

use serde::Deserialize;

use crate::api::CallError;
use crate::http;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CdpError {
    error_type: String,
    error_message: Option<String>,
    /// Unique per request (the spec's `Error.correlationId`): the same one twice is a replay.
    #[serde(default)]
    correlation_id: Option<String>,
}

/// What a non-2xx answer of Coinbase's means, from its status and its error body.
pub(crate) fn cdp_error(status: u16, body: &str) -> CallError {
    let error = serde_json::from_str::<CdpError>(body).ok();
    let what = match &error {
        Some(e) => format!(
            "Coinbase {status} {}: {}",
            e.error_type,
            e.error_message.as_deref().unwrap_or("")
        ),
        None => format!("Coinbase {status}"),
    };
    match error.as_ref().map(|e| e.error_type.as_str()) {
        Some("idempotency_error") => CallError::KeyConflict(what),
        // Errors CDP names as transient, whatever their status.
        Some(
            "internal_server_error"
            | "bad_gateway"
            | "service_unavailable"
            | "timed_out"
            | "rate_limit_exceeded"
            | "request_canceled",
        ) => CallError::Ambiguous(what),
        // Types that say the request itself was refused (nothing made), and those about the id
        // or the credentials: the status decides as for every provider.
        Some(t) if REFUSING_ERROR_TYPES.contains(&t) => http::by_status(status, what),
        Some("not_found" | "unauthorized" | "forbidden") => http::by_status(status, what),
        // Any other type, one CDP added after this adapter was written among them, or no body:
        // it says nothing of whether the transfer was made.
        _ => CallError::Ambiguous(what),
    }
}

/// CDP's error types (the spec's `ErrorType`) that refuse a request for what it says: nothing was
/// made. Only these make a 4xx to a first call a refusal.
const REFUSING_ERROR_TYPES: [&str; 25] = [
    "invalid_request",
    "malformed_transaction",
    "insufficient_balance",
    "source_account_invalid",
    "target_account_invalid",
    "source_account_not_found",
    "target_account_not_found",
    "source_asset_not_supported",
    "target_asset_not_supported",
    "target_email_invalid",
    "target_onchain_address_invalid",
    "transfer_amount_invalid",
    "transfer_asset_not_supported",
    "metadata_too_many_entries",
    "metadata_key_too_long",
    "metadata_value_too_long",
    "travel_rules_field_missing",
    "travel_rules_recipient_violation",
    "asset_mismatch",
    "network_mismatch",
    "network_not_tradable",
    "recipient_allowlist_violation",
    "policy_violation",
    "daily_transaction_limit_exceeded",
    "daily_amount_limit_exceeded",
];

/// Whether `body` is a CDP error naming the request it answered (`correlationId`).
pub(crate) fn carries_request_id(body: &str) -> bool {
    serde_json::from_str::<CdpError>(body)
        .is_ok_and(|e| e.correlation_id.is_some_and(|id| !id.is_empty()))
}
