//! The operator's dashboard at `/dashboard`: HTML rendered here from templates compiled into the binary, signed in with the operator key.

mod actions;
mod merchants;
mod page;
mod pages;
mod session;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use payoutd_engine::{OperatorViewStore, PipelineStore};

pub use page::CONTENT_SECURITY_POLICY;
pub use session::{COOKIE, SESSION_LIFETIME_SECS};

use crate::AppState;

/// What the dashboard reads and writes besides the use cases in `AppState`.
pub struct Dashboard {
    views: Arc<dyn OperatorViewStore>,
    store: Arc<dyn PipelineStore>,
    sessions: session::Sessions,
}

impl Dashboard {
    pub fn new(views: Arc<dyn OperatorViewStore>, store: Arc<dyn PipelineStore>) -> Dashboard {
        Dashboard { views, store, sessions: session::Sessions::default() }
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
        .route("/dashboard/payouts/{id}", get(pages::payout))
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
