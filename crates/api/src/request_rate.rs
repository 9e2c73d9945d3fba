//! Requests per API key (per client address before a key is shown): governor's keyed rate limiter as a tower layer, answering 429 problem+json with `Retry-After`, its memory of idle keys bounded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{Request, Response, header};
use axum::response::IntoResponse;
use governor::clock::QuantaInstant;
use governor::middleware::NoOpMiddleware;
use payoutd_domain::ApiKey;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

use crate::problem::Problem;

/// Requests one API key may make per second, by default: far above any one client's honest use
/// (the intake benchmark's clients, one key each, stay under 500), far below what would starve the others.
pub const REQUESTS_PER_SECOND_PER_KEY_DEFAULT: u32 = 1_000;
/// Bounds of the configurable rate.
pub const REQUESTS_PER_SECOND_PER_KEY_RANGE: std::ops::RangeInclusive<u32> = 1..=1_000_000;
/// How often keys idle long enough to be full again are forgotten.
const FORGET_IDLE_KEYS_EVERY_MS: u64 = 60_000;
/// Bearer tokens longer than this are not hashed to key the limit (authentication refuses them).
const BEARER_KEY_CHARS_MAX: usize = 512;

/// What one key may do: `per_second` on average, twice that at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRate {
    pub per_second: u32,
}

impl Default for RequestRate {
    fn default() -> Self {
        RequestRate { per_second: REQUESTS_PER_SECOND_PER_KEY_DEFAULT }
    }
}

/// The limit's key: the presented API key's hash, else the peer's address (the proxy's, behind one).
#[derive(Clone)]
pub(crate) struct BearerOrPeer;

impl KeyExtractor for BearerOrPeer {
    type Key = String;

    fn extract<T>(&self, request: &Request<T>) -> Result<String, GovernorError> {
        let bearer = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if let Some(token) =
            bearer.map(str::trim).filter(|t| !t.is_empty() && t.len() <= BEARER_KEY_CHARS_MAX)
        {
            return Ok(format!("key:{}", ApiKey::presented(token).hash().as_str()));
        }
        let peer =
            request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string());
        Ok(format!("peer:{}", peer.unwrap_or_default()))
    }
}

/// The layer, and a task that forgets idle keys while the layer lives. Call within a runtime.
pub(crate) fn layer(
    rate: RequestRate,
) -> GovernorLayer<BearerOrPeer, NoOpMiddleware<QuantaInstant>, axum::body::Body> {
    assert!(
        REQUESTS_PER_SECOND_PER_KEY_RANGE.contains(&rate.per_second),
        "checked when configured: {rate:?}"
    );
    let config = GovernorConfigBuilder::default()
        .period(Duration::from_nanos(1_000_000_000 / u64::from(rate.per_second)))
        .burst_size(rate.per_second.saturating_mul(2))
        .key_extractor(BearerOrPeer)
        .finish()
        .expect("a positive period and burst");
    let limiter = Arc::downgrade(config.limiter());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(FORGET_IDLE_KEYS_EVERY_MS));
        loop {
            every.tick().await;
            let Some(limiter) = limiter.upgrade() else { break };
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    });
    GovernorLayer::new(config).error_handler(refusal)
}

fn refusal(error: GovernorError) -> Response<axum::body::Body> {
    match error {
        GovernorError::TooManyRequests { wait_time, .. } => {
            let mut problem = Problem::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "rate-limited",
                "Too many requests",
                format!(
                    "this API key (or address) made more requests than it may; try again in {wait_time} s"
                ),
            );
            problem.retry_after_s = Some(wait_time.max(1));
            problem.into_response()
        }
        GovernorError::UnableToExtractKey | GovernorError::Other { .. } => {
            Problem::unauthorized("no key to count requests against").into_response()
        }
    }
}
