//! `/metrics`: who may scrape it (a bearer token of its own, never a merchant's or the operator's key), and the store's live counts read at most once per interval however often it is scraped.

use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use payoutd_domain::{ApiKey, ApiKeyHash, IncidentKind, PayoutStatus};

use crate::AppState;
use crate::auth::{bearer, key_hash_eq};
use crate::problem::Problem;

/// The store's counts (payouts waiting or in flight by status, open incidents by kind) are read
/// again at most this often per process. They are index reads whose cost follows the backlog, never
/// the history: paid, failed, canceled and rejected payouts are counters the processes keep as they
/// work (`payoutd_payouts_settled_total`, `payoutd_payouts_canceled_total`, ...), which Prometheus
/// sums across processes. The interval keeps even those reads off the shared pool between scrapes.
pub const COUNTS_REFRESH_MS: u64 = 5_000;

/// Who may read `/metrics` on one listener.
#[derive(Clone, Debug)]
pub enum MetricsAccess {
    /// Only a request bearing this token (`PAYOUTD_METRICS_TOKEN`).
    Token(ApiKeyHash),
    /// Anyone who can reach the listener: a metrics-only address the operator chose to bind.
    Anyone,
    /// Nobody: the API's own address with no metrics token configured.
    Nobody,
}

impl MetricsAccess {
    /// On the API's address: only with a token, or not at all.
    pub fn on_api(token: Option<&ApiKey>) -> MetricsAccess {
        token.map_or(MetricsAccess::Nobody, |t| MetricsAccess::Token(t.hash()))
    }

    /// On a metrics-only address: with the token when one is configured, else anyone there.
    pub fn on_metrics_address(token: Option<&ApiKey>) -> MetricsAccess {
        token.map_or(MetricsAccess::Anyone, |t| MetricsAccess::Token(t.hash()))
    }
}

/// Proof that the request may read `/metrics` here.
pub struct MetricsReader;

impl FromRequestParts<AppState> for MetricsReader {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<MetricsReader, Problem> {
        match &state.metrics_access {
            MetricsAccess::Anyone => Ok(MetricsReader),
            MetricsAccess::Nobody => Err(Problem::unauthorized(
                "/metrics on the API's address needs PAYOUTD_METRICS_TOKEN set, and that token as bearer",
            )),
            MetricsAccess::Token(expected) if key_hash_eq(&bearer(parts)?.hash(), expected) => {
                Ok(MetricsReader)
            }
            MetricsAccess::Token(_) => {
                Err(Problem::unauthorized("/metrics needs the metrics token"))
            }
        }
    }
}

pub async fn metrics_text(_reader: MetricsReader, State(state): State<AppState>) -> Response {
    let store_counts = refresh_counts(&state).await;
    let mut text = state.metrics.render();
    text.push_str(&store_counts);
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    response
}

/// The store's counts rendered in the Prometheus text format, and when they were read.
pub(crate) struct StoreCounts {
    read_at: Instant,
    text: String,
}

/// Payouts not yet final by state, and open incidents by kind, read from the store (so every process reports the
/// shared truth) unless this state read them less than `COUNTS_REFRESH_MS` ago. Concurrent
/// scrapes wait for one read. A count the store could not give is left out, not shown as 0.
async fn refresh_counts(state: &AppState) -> String {
    let mut cached = state.store_counts.lock().await;
    if let Some(counts) =
        cached.as_ref().filter(|c| c.read_at.elapsed() < Duration::from_millis(COUNTS_REFRESH_MS))
    {
        return counts.text.clone();
    }
    let mut text = String::new();
    if let Ok(counts) = state.engine.store().count_live_payouts_by_status().await {
        let by_status =
            PayoutStatus::ALL.iter().filter(|status| !status.is_terminal()).map(|&status| {
                (status.as_str(), counts.iter().find(|(s, _)| *s == status).map_or(0, |(_, n)| *n))
            });
        render_gauge(&mut text, "payoutd_payouts", "status", by_status);
    }
    if let Ok(open) = state.engine.store().count_open_incidents_by_kind().await {
        let by_kind = IncidentKind::ALL.iter().map(|kind| {
            (kind.as_str(), open.iter().find(|(k, _)| k == kind.as_str()).map_or(0, |(_, n)| *n))
        });
        render_gauge(&mut text, "payoutd_incidents_open", "kind", by_kind);
    }
    *cached = Some(StoreCounts { read_at: Instant::now(), text: text.clone() });
    text
}

/// One gauge family in the Prometheus text format. Label values are our own enum names, never
/// caller input, so they need no escaping.
fn render_gauge<N: std::fmt::Display>(
    out: &mut String,
    name: &str,
    label: &str,
    values: impl Iterator<Item = (&'static str, N)>,
) {
    use std::fmt::Write;
    let _ = writeln!(out, "# TYPE {name} gauge");
    for (value, n) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
    }
    out.push('\n');
}
