//! The HTTP edge shared by the adapters: one client per adapter, answers read into (status, body), transport failures ambiguous.

use std::time::Duration;

use crate::api::CallError;

/// Answers longer than this are cut before parsing: a provider's page of transfers fits easily.
const ANSWER_BYTES_MAX: usize = 4 << 20;

/// One client per adapter, reused across calls (rustls, the adapter's timeout).
pub fn client(timeout_ms: u64) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder().timeout(Duration::from_millis(timeout_ms)).build()
}

/// The status and body of an answer; no answer (timeout, reset, refused connection) is ambiguous.
pub async fn answer(provider: &str, sent: Result<reqwest::Response, reqwest::Error>) -> Result<(u16, String), CallError> {
    let response = sent.map_err(|e| CallError::Ambiguous(format!("no answer from {provider}: {e}")))?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(|e| CallError::Ambiguous(format!("{provider} answer cut: {e}")))?;
    if bytes.len() > ANSWER_BYTES_MAX {
        return Err(CallError::BadAnswer(format!("{provider} answered {} bytes, more than {ANSWER_BYTES_MAX}", bytes.len())));
    }
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// The classification every provider shares for statuses its error body does not decide: auth
/// and permission errors decide nothing about the transfer (the configuration is wrong), 404 is
/// not found, conflicts, rate limits and server errors are ambiguous, other 4xx refuse.
pub fn by_status(status: u16, what: String) -> CallError {
    match status {
        404 => CallError::NotFound(what),
        401 | 403 | 409 | 429 => CallError::Ambiguous(what),
        400..=499 => CallError::Refused(what),
        _ => CallError::Ambiguous(what),
    }
}

/// Parses a 2xx body as the provider documents it.
pub fn parse<T: for<'de> serde::Deserialize<'de>>(provider: &str, status: u16, body: &str) -> Result<T, CallError> {
    serde_json::from_str(body).map_err(|e| CallError::BadAnswer(format!("{provider} {status}: {e}")))
}
