//! RFC 9457 problem+json errors with stable `type` URIs; every refusal of the API goes through here.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use payoutd_engine::{IntakeError, StoreError};

/// Base of every problem `type`; the slug after it is part of the API contract.
pub const PROBLEM_TYPE_BASE: &str = "https://payoutd.dev/problems/";

#[derive(Debug, Clone)]
pub struct Problem {
    pub status: StatusCode,
    pub slug: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// RFC 9457 extension member `errors`: one entry per refused part (a batch's bad lines).
    pub errors: Vec<serde_json::Value>,
    /// Sent as `Retry-After` (seconds) when the caller should wait before trying again.
    pub retry_after_s: Option<u64>,
}

impl Problem {
    pub fn new(
        status: StatusCode,
        slug: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Problem {
        Problem {
            status,
            slug,
            title,
            detail: detail.into(),
            errors: Vec::new(),
            retry_after_s: None,
        }
    }

    pub fn with_errors(mut self, errors: Vec<serde_json::Value>) -> Problem {
        self.errors = errors;
        self
    }

    /// The members of the problem document.
    pub fn to_json(&self) -> serde_json::Value {
        let mut body = serde_json::json!({
            "type": format!("{PROBLEM_TYPE_BASE}{}", self.slug),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if !self.errors.is_empty() {
            body["errors"] = serde_json::Value::Array(self.errors.clone());
        }
        body
    }

    pub fn invalid(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-request", "The request is invalid", detail)
    }

    pub fn malformed_json(detail: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "malformed-json",
            "The body is not valid JSON for this endpoint",
            detail,
        )
    }

    pub fn unauthorized(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", "Missing or invalid API key", detail)
    }

    pub fn not_found() -> Problem {
        Problem::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "No such resource",
            "no such resource for this API key",
        )
    }

    pub fn internal() -> Problem {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "see the server log",
        )
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.to_json().to_string()).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(seconds) = self.retry_after_s {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<StoreError> for Problem {
    fn from(err: StoreError) -> Problem {
        match err {
            StoreError::Unavailable(e) => {
                tracing::warn!(error = %e, "store unavailable");
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store-unavailable",
                    "Storage is unavailable",
                    "retry with the same idempotency key",
                )
            }
            StoreError::Invariant(e) => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "refused-by-ledger",
                "The ledger refused this change",
                format!("nothing was changed: {e}"),
            ),
            StoreError::Corrupt(e) => {
                tracing::error!(error = %e, "corrupt stored data");
                Problem::internal()
            }
        }
    }
}

impl From<IntakeError> for Problem {
    #[allow(clippy::too_many_lines)]
    // one arm per intake error: the problem table is read whole.
    fn from(err: IntakeError) -> Problem {
        use StatusCode as S;
        match err {
            IntakeError::KeyReused => Problem::new(
                S::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency key reused with different parameters",
                "this idempotency key was already used for a request with different parameters; nothing was changed",
            ),
            IntakeError::InsufficientFunds => Problem::new(
                S::UNPROCESSABLE_ENTITY,
                "insufficient-funds",
                "Insufficient funds",
                "the available balance does not cover this amount; nothing was reserved",
            ),
            IntakeError::NotFound => Problem::not_found(),
            IntakeError::UnknownApiKey => Problem::unauthorized("unknown or revoked API key"),
            IntakeError::UnknownMerchant => Problem::new(
                S::NOT_FOUND,
                "unknown-merchant",
                "Unknown merchant",
                "no merchant with this id",
            ),
            IntakeError::NotCancelable(status) => Problem::new(
                S::CONFLICT,
                "payout-not-cancelable",
                "The payout can no longer be canceled here",
                format!(
                    "the payout is {status}; only payouts not yet signed can be canceled this way"
                ),
            ),
            IntakeError::AttemptRemembered => Problem::new(
                S::CONFLICT,
                "payout-not-cancelable",
                "The payout can no longer be canceled here",
                "an attempt of this payout may have gone out (the send guard remembers it); a person decides",
            ),
            IntakeError::GuardUnavailable(why) => Problem::new(
                S::SERVICE_UNAVAILABLE,
                "guard-unavailable",
                "The send guard could not be asked",
                format!("{why}; nothing was changed, retry"),
            ),
            IntakeError::Invalid(detail) => Problem::invalid(detail),
            IntakeError::AssetNotPayable(why) => Problem::new(
                S::UNPROCESSABLE_ENTITY,
                "asset-not-payable",
                "No configured rail pays this asset",
                format!("{why}; nothing was reserved"),
            ),
            IntakeError::BelowMinimum { .. } => Problem::new(
                S::UNPROCESSABLE_ENTITY,
                "amount-below-minimum",
                "The amount is below the asset's minimum payout",
                format!("{err}; nothing was reserved"),
            ),
            IntakeError::RateLimited { retry_after_ms } => Problem {
                retry_after_s: Some(retry_after_ms.div_ceil(1_000).max(1)),
                ..Problem::new(
                    S::TOO_MANY_REQUESTS,
                    "rate-limited",
                    "Too many new payouts",
                    format!("{err}; nothing was reserved"),
                )
            },
            IntakeError::OwnWallet => Problem::new(
                S::UNPROCESSABLE_ENTITY,
                "destination-is-hot-wallet",
                "The destination is a hot wallet of this deployment",
                format!("{err}; nothing was reserved"),
            ),
            IntakeError::Contended => Problem::new(
                S::CONFLICT,
                "contended",
                "Concurrent change",
                "the payout changed concurrently; retry",
            ),
            IntakeError::Store(e) => Problem::from(e),
        }
    }
}

impl From<payoutd_engine::PipelineError> for Problem {
    fn from(err: payoutd_engine::PipelineError) -> Problem {
        use StatusCode as S;
        use payoutd_engine::PipelineError as E;
        match err {
            E::Store(e) => Problem::from(e),
            E::NotFound => Problem::not_found(),
            E::WrongState(status) => Problem::new(
                S::CONFLICT,
                "payout-wrong-state",
                "The payout is not in a state that allows this",
                format!("the payout is {status}"),
            ),
            E::Refused(why) => Problem::new(S::CONFLICT, "refused", "Refused", why),
            E::RailUnavailable(why) => Problem::new(
                S::SERVICE_UNAVAILABLE,
                "rail-unavailable",
                "The chain could not be read",
                format!("{why}; nothing was changed, retry"),
            ),
        }
    }
}

impl Problem {
    /// Operator actions need the workers (a configured chain).
    pub fn no_pipeline() -> Problem {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no-pipeline",
            "No chain is configured in this process",
            "operator actions on signed payouts need `[[chains]]` in the configuration",
        )
    }
}
