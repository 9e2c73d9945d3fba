//! The operator's dashboard at `/dashboard`: HTML rendered here from templates compiled into the binary, signed in with the operator key.

mod actions;
mod merchants;
mod money;
mod page;
mod pages;
mod payout;
mod session;
mod throttle;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    /// Failed sign-ins per client address.
    sign_ins: throttle::SignInThrottle,
    /// Per network (`evm:1`, `solana:mainnet`: an asset code's part before `/`), where a transaction can be seen.
    explorers: BTreeMap<String, ExplorerUrl>,
    /// The overview's latest reads, shared by every session (see `overview_reads`).
    overview: tokio::sync::Mutex<Option<OverviewSnapshot>>,
    /// Held while a request makes the reads itself.
    overview_making: tokio::sync::Mutex<()>,
    /// Whether a background task is making them.
    overview_refreshing: AtomicBool,
    /// Raised by every action: reads begun before it are dropped.
    overview_generation: AtomicU64,
    /// What this deployment's rails pay: a payout page says why a payout in another asset waits.
    payable: Payable,
}

/// How long the overview's reads (full counts over the payouts) serve every session as they are:
/// ten open dashboards cost one set of scans, not ten.
pub const OVERVIEW_FRESH_MS: i64 = 2_000;
/// Older reads are still shown while the next are made in the background; beyond this age a page
/// waits for fresh ones.
pub const OVERVIEW_STALE_MAX_MS: i64 = 15_000;

#[derive(Clone)]
struct OverviewSnapshot {
    at_ms: i64,
    reads: Arc<pages::OverviewReads>,
}

impl Dashboard {
    pub fn new(views: Arc<dyn OperatorViewStore>, store: Arc<dyn PipelineStore>) -> Dashboard {
        Dashboard {
            views,
            store,
            sessions: session::Sessions::default(),
            sign_ins: throttle::SignInThrottle::default(),
            explorers: BTreeMap::new(),
            overview: tokio::sync::Mutex::new(None),
            overview_making: tokio::sync::Mutex::new(()),
            overview_refreshing: AtomicBool::new(false),
            overview_generation: AtomicU64::new(0),
            payable: Payable::Any,
        }
    }

    /// Payouts in assets outside `payable` (accepted before the rails changed) say why they wait.
    pub fn with_payable(mut self, payable: Payable) -> Dashboard {
        self.payable = payable;
        self
    }

    /// The overview's reads. Younger than [`OVERVIEW_FRESH_MS`]: as they are. Younger than
    /// [`OVERVIEW_STALE_MAX_MS`]: as they are, while one background task makes them again, so no
    /// page waits for the full counts. Older, or none (at start, after an action): made here, by
    /// one request while the others wait for it.
    async fn overview_reads(
        self: &Arc<Self>,
        state: &AppState,
        now_ms: i64,
    ) -> Result<Arc<pages::OverviewReads>, page::Failure> {
        let snapshot = self.overview.lock().await.clone();
        if let Some(snapshot) = snapshot {
            let age_ms = now_ms - snapshot.at_ms;
            if (0..OVERVIEW_FRESH_MS).contains(&age_ms) {
                return Ok(snapshot.reads);
            }
            if (0..OVERVIEW_STALE_MAX_MS).contains(&age_ms) {
                self.refresh_overview_in_background(state, now_ms);
                return Ok(snapshot.reads);
            }
        }
        let _one_at_a_time = self.overview_making.lock().await;
        if let Some(snapshot) = self.overview.lock().await.clone()
            && (0..OVERVIEW_FRESH_MS).contains(&(now_ms - snapshot.at_ms))
        {
            return Ok(snapshot.reads);
        }
        let generation = self.overview_generation.load(Ordering::SeqCst);
        let reads = Arc::new(pages::read_overview(self, state, now_ms).await?);
        self.keep_overview(generation, now_ms, reads.clone()).await;
        Ok(reads)
    }

    fn refresh_overview_in_background(self: &Arc<Self>, state: &AppState, now_ms: i64) {
        if self.overview_refreshing.swap(true, Ordering::SeqCst) {
            return;
        }
        let (dashboard, state) = (self.clone(), state.clone());
        tokio::spawn(async move {
            let generation = dashboard.overview_generation.load(Ordering::SeqCst);
            match pages::read_overview(&dashboard, &state, now_ms).await {
                Ok(reads) => dashboard.keep_overview(generation, now_ms, Arc::new(reads)).await,
                Err(e) => {
                    tracing::warn!(error = ?e, "the overview's reads failed; the next page makes them")
                }
            }
            dashboard.overview_refreshing.store(false, Ordering::SeqCst);
        });
    }

    /// Keeps reads begun at `generation`, unless an action has made them stale since.
    async fn keep_overview(&self, generation: u64, at_ms: i64, reads: Arc<pages::OverviewReads>) {
        let mut snapshot = self.overview.lock().await;
        if self.overview_generation.load(Ordering::SeqCst) == generation
            && snapshot.as_ref().is_none_or(|s| s.at_ms <= at_ms)
        {
            *snapshot = Some(OverviewSnapshot { at_ms, reads });
        }
    }

    /// After an operator's action: the next overview reads afresh and shows it; reads begun
    /// before it are not kept.
    pub async fn forget_overview(&self) {
        let mut snapshot = self.overview.lock().await;
        self.overview_generation.fetch_add(1, Ordering::SeqCst);
        *snapshot = None;
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
        .route(
            "/dashboard/static/dashboard.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route(
            "/dashboard/static/dashboard.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
}
