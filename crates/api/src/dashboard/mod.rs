//! The operator's dashboard at `/dashboard`: HTML rendered here from templates compiled into the binary, signed in with the operator key.

mod actions;
mod merchants;
mod page;
mod pages;
mod payout;
mod session;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use payoutd_domain::ExplorerUrl;
use payoutd_engine::{OperatorViewStore, Payable, PipelineStore};

pub use page::CONTENT_SECURITY_POLICY;
pub use session::{COOKIE, SESSION_LIFETIME_SECS};

use crate::AppState;

/// What the dashboard reads and writes besides the use cases in `AppState`.
pub struct Dashboard {
    views: Arc<dyn OperatorViewStore>,
    store: Arc<dyn PipelineStore>,
    sessions: session::Sessions,
    /// Per network (`evm:1`, `solana:mainnet`: an asset code's part before `/`), where a transaction can be seen.
    explorers: BTreeMap<String, ExplorerUrl>,
    /// The overview's reads and when they were made: every session's overview within
    /// [`OVERVIEW_FRESH_MS`] shares one set of reads, computed by one request while the others wait.
    overview: tokio::sync::Mutex<Option<(i64, Arc<pages::OverviewReads>)>>,
    /// What this deployment's rails pay: a payout page says why a payout in another asset waits.
    payable: Payable,
}

/// How long the overview's reads (full counts over the payouts) serve every session before they are
/// made again: the pages refresh every 5 s, so ten open dashboards cost one set of scans, not ten.
pub const OVERVIEW_FRESH_MS: i64 = 2_000;

impl Dashboard {
    pub fn new(views: Arc<dyn OperatorViewStore>, store: Arc<dyn PipelineStore>) -> Dashboard {
        Dashboard { views, store, sessions: session::Sessions::default(), explorers: BTreeMap::new(), overview: tokio::sync::Mutex::new(None), payable: Payable::Any }
    }

    /// Payouts in assets outside `payable` (accepted before the rails changed) say why they wait.
    pub fn with_payable(mut self, payable: Payable) -> Dashboard {
        self.payable = payable;
        self
    }

    /// The overview's reads, made again when older than [`OVERVIEW_FRESH_MS`] or after an action.
    async fn overview_reads(&self, state: &AppState, now_ms: i64) -> Result<Arc<pages::OverviewReads>, page::Failure> {
        let mut cached = self.overview.lock().await;
        if let Some((at_ms, reads)) = cached.as_ref()
            && (0..OVERVIEW_FRESH_MS).contains(&(now_ms - at_ms))
        {
            return Ok(reads.clone());
        }
        let reads = Arc::new(pages::read_overview(self, state, now_ms).await?);
        *cached = Some((now_ms, reads.clone()));
        Ok(reads)
    }

    /// After an operator's action: the next overview reads afresh and shows it.
    pub async fn forget_overview(&self) {
        *self.overview.lock().await = None;
    }

    /// Links the transactions of `network`'s payouts (`evm:1`, `solana:mainnet`) to its explorer.
    pub fn with_explorer(mut self, network: &str, url: ExplorerUrl) -> Dashboard {
        self.explorers.insert(network.to_owned(), url);
        self
    }

    fn explorer_of(&self, asset_code: &str) -> Option<&ExplorerUrl> {
        let network = asset_code.split_once('/').map_or(asset_code, |(network, _)| network);
        self.explorers.get(network)
    }
}

const STYLE: &str = include_str!("../../static/dashboard.css");
const SCRIPT: &str = include_str!("../../static/dashboard.js");

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    page::secured(response)
}

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/dashboard", get(pages::overview))
        .route("/dashboard/login", get(pages::login).post(actions::sign_in))
        .route("/dashboard/logout", post(actions::sign_out))
        .route("/dashboard/payouts", get(pages::payouts))
        .route("/dashboard/payouts/{id}", get(payout::payout))
        .route("/dashboard/payouts/{id}/approve", post(actions::approve))
        .route("/dashboard/payouts/{id}/reject", post(actions::reject))
        .route("/dashboard/payouts/{id}/resolve", post(actions::resolve))
        .route("/dashboard/review", get(pages::review))
        .route("/dashboard/attention", get(pages::attention))
        .route("/dashboard/incidents", get(pages::incidents))
        .route("/dashboard/incidents/{id}/resolve", post(actions::resolve_incident))
        .route("/dashboard/audit", get(pages::audit))
        .route("/dashboard/merchants", get(merchants::merchants))
        .route("/dashboard/batches", get(merchants::batches))
        .route("/dashboard/merchants/{id}/api_keys", post(merchants::create_key))
        .route("/dashboard/api_keys/{id}/revoke", post(merchants::revoke_key))
        .route("/dashboard/events", get(merchants::events))
        .route("/dashboard/events/{id}/redispatch", post(merchants::redispatch))
        .route("/dashboard/static/dashboard.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/dashboard/static/dashboard.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
}
