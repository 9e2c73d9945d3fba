//! payoutd's HTTP API (axum): intake, reads, operator actions, problem+json, OpenAPI and metrics.

mod audit;
mod auth;
pub use auth::{bearer, key_hash_eq};
pub mod batch_api;
mod batch_csv;
pub mod client;
pub mod csv_uploads;
pub mod dashboard;
pub mod failed_auth;
mod handlers;
mod idempotency;
pub mod key_api;
pub mod metrics_api;
pub mod models;
pub mod problem;
pub mod request_rate;
pub mod served_doc;
mod server;
pub mod statement_api;
pub mod transfer_api;
pub mod webhook_api;

use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, post};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use payoutd_domain::{ApiKey, ApiKeyHash};
use payoutd_engine::Engine;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

pub use server::{
    CONNECTIONS_MAX_DEFAULT, DRAIN_TIMEOUT_MS, HEADER_READ_TIMEOUT_MS_DEFAULT, ServeLimits,
};

/// Largest accepted request body.
pub const BODY_LIMIT_BYTES: usize = 64 * 1024;
/// A request that takes longer is answered 408; the work it did is idempotent and can be retried.
pub const REQUEST_TIMEOUT_MS: u64 = 15_000;
/// The same for a payout batch; a batch cut short is completed by submitting it again.
pub const BATCH_REQUEST_TIMEOUT_MS: u64 = 300_000;

#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    pub operator_key_hash: Option<ApiKeyHash>,
    /// The key that alone may credit deposits (`PAYOUTD_DEPOSIT_KEY`); absent: the operator key may.
    pub deposit_key_hash: Option<ApiKeyHash>,
    /// SPEC 3: payouts require an idempotency key by default.
    pub require_payout_key: bool,
    pub metrics: PrometheusHandle,
    /// The workers' operator actions (approve, reject, cancel after signing, resolve); absent when
    /// no chain is configured, and then those endpoints answer 503.
    pub pipeline: Option<std::sync::Arc<payoutd_engine::Pipeline>>,
    /// Lines one JSON payout batch may hold (it is parsed whole).
    pub batch_lines_max: usize,
    /// Lines one CSV payout batch may hold (it is streamed a chunk at a time).
    pub csv_batch_lines_max: usize,
    /// Webhook endpoints and the events API; absent: those endpoints answer 503.
    pub webhooks: Option<payoutd_engine::Webhooks>,
    /// The operator's dashboard at `/dashboard`; absent (no operator key): it answers 404.
    pub dashboard: Option<std::sync::Arc<dashboard::Dashboard>>,
    /// Who may read `/metrics` here; nobody until a metrics token is configured.
    pub metrics_access: metrics_api::MetricsAccess,
    /// The operator's views of the store: what the operator key does over the API is recorded
    /// there, and statements are read from it. Absent (tests): nothing is recorded, and
    /// `/v1/statements` answers 503.
    pub operator_views:
        Option<std::sync::Arc<dyn payoutd_engine::operator_view::OperatorViewStore>>,
    /// Requests one API key (or client address) may make per second.
    pub request_rate: request_rate::RequestRate,
    /// Proxies whose `X-Forwarded-For` and `X-Forwarded-Proto` are believed (`trusted_proxies`).
    pub trusted_proxies: std::sync::Arc<Vec<std::net::IpAddr>>,
    /// The store's counts for `/metrics` as last read, and when (per state, not in the
    /// process-wide recorder, so two routers in one process never show each other's store).
    store_counts: std::sync::Arc<tokio::sync::Mutex<Option<metrics_api::StoreCounts>>>,
    /// Failed authentications per client address, and the keys known to be ours (one table per
    /// router's state).
    pub(crate) failed_auths: std::sync::Arc<failed_auth::FailedAuths>,
    /// CSV batch uploads under way (one table per router's state).
    pub csv_uploads: std::sync::Arc<csv_uploads::CsvUploads>,
}

impl AppState {
    pub fn new(engine: Engine, operator_key: Option<&ApiKey>) -> AppState {
        AppState {
            engine,
            operator_key_hash: operator_key.map(ApiKey::hash),
            deposit_key_hash: None,
            require_payout_key: true,
            metrics: metrics_handle(),
            pipeline: None,
            batch_lines_max: payoutd_engine::batches::BATCH_LINES_MAX_DEFAULT,
            csv_batch_lines_max: payoutd_engine::batches::CSV_BATCH_LINES_MAX_DEFAULT,
            webhooks: None,
            dashboard: None,
            metrics_access: metrics_api::MetricsAccess::Nobody,
            trusted_proxies: std::sync::Arc::default(),
            request_rate: request_rate::RequestRate::default(),
            operator_views: None,
            store_counts: std::sync::Arc::default(),
            failed_auths: std::sync::Arc::default(),
            csv_uploads: std::sync::Arc::default(),
        }
    }
}

/// The process-wide Prometheus recorder (installed once, shared by every router in the process).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets(&[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5])
                .expect("static buckets are valid")
                .install_recorder()
                .expect("no other metrics recorder is installed")
        })
        .clone()
}

#[derive(OpenApi)]
#[openapi(
    info(title = "payoutd", description = "Self-hosted payout engine: no business event is ever paid twice."),
    paths(
        handlers::create_payout,
        handlers::get_payout,
        handlers::list_payouts,
        handlers::cancel_payout,
        handlers::balances,
        handlers::create_deposit,
        handlers::approve_payout,
        handlers::reject_payout,
        handlers::resolve_payout,
        handlers::payout_attempts,
        handlers::list_incidents,
        handlers::resolve_incident,
        webhook_api::create_endpoint,
        webhook_api::list_endpoints,
        webhook_api::delete_endpoint,
        webhook_api::rotate_secret,
        webhook_api::list_events,
        webhook_api::get_event,
        webhook_api::event_deliveries,
        webhook_api::redispatch,
        transfer_api::create_transfer,
        transfer_api::get_transfer,
        key_api::create_api_key,
        key_api::list_api_keys,
        key_api::revoke_api_key,
        batch_api::create_batch,
        batch_api::get_batch,
        statement_api::get_statement
    ),
    components(schemas(
        models::CreatePayoutBody,
        models::CreateDepositBody,
        models::PayoutBody,
        models::PayoutList,
        models::BalanceBody,
        models::BalanceList,
        models::DepositBody,
        models::ProblemBody,
        models::ResolvePayoutBody,
        models::ResolveIncidentBody,
        models::AttemptBody,
        models::AttemptTxBody,
        models::AttemptList,
        models::IncidentBody,
        models::IncidentList,
        webhook_api::CreateEndpointBody,
        webhook_api::EndpointBody,
        webhook_api::EndpointList,
        webhook_api::RotatedSecretBody,
        webhook_api::EventBody,
        webhook_api::EventList,
        payoutd_engine::webhook_store::DeliveryTry,
        webhook_api::DeliveryBody,
        webhook_api::DeliveryList,
        webhook_api::RedispatchBody,
        transfer_api::CreateTransferBody,
        transfer_api::TransferBody,
        key_api::ApiKeyBody,
        key_api::ApiKeyList,
        batch_api::CreateBatchBody,
        batch_api::BatchLineBody,
        batch_api::BatchLineResult,
        batch_api::BatchBody,
        batch_api::BatchLineStatus,
        batch_api::BatchStatusBody,
        statement_api::StatementBody,
        statement_api::StatementBalances,
        statement_api::StatementEntryBody
    )),
    modifiers(&SecuritySchemes, &RateLimited)
)]
pub struct ApiDoc;

/// Every operation may answer 429 `rate-limited` with `Retry-After`: a key (or address) past its
/// request rate, or an address whose unknown keys failed past their burst.
struct RateLimited;

impl Modify for RateLimited {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let response = ResponseBuilder::new()
            .description("Too many requests from this key or address (`rate-limited`); `Retry-After` says when to try again")
            .content(
                "application/problem+json",
                ContentBuilder::new().schema(Some(Ref::from_schema_name("ProblemBody"))).build(),
            )
            .build();
        for item in openapi.paths.paths.values_mut() {
            let operations =
                [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
            for operation in operations.into_iter().flatten() {
                operation.responses.responses.insert("429".to_owned(), response.clone().into());
            }
        }
    }
}

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["merchant_key", "operator_key", "deposit_key"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

async fn record_request(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(request.method());
    let response = next.run(request).await;
    metrics::counter!("payoutd_http_requests_total", "method" => method, "route" => route,
        "status" => response.status().as_u16().to_string())
    .increment(1);
    response
}

/// The method as a metrics label: the standard ones by name, anything a client invents as
/// `other`, so a client cannot grow the number of series without bound.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/payouts", post(handlers::create_payout).get(handlers::list_payouts))
        .route("/v1/payouts/{id}", get(handlers::get_payout))
        .route("/v1/payouts/{id}/cancel", post(handlers::cancel_payout))
        .route("/v1/payouts/{id}/approve", post(handlers::approve_payout))
        .route("/v1/payouts/{id}/reject", post(handlers::reject_payout))
        .route("/v1/payouts/{id}/resolve", post(handlers::resolve_payout))
        .route("/v1/payouts/{id}/attempts", get(handlers::payout_attempts))
        .route("/v1/incidents", get(handlers::list_incidents))
        .route("/v1/incidents/{id}/resolve", post(handlers::resolve_incident))
        .route(
            "/v1/webhook_endpoints",
            post(webhook_api::create_endpoint).get(webhook_api::list_endpoints),
        )
        .route("/v1/webhook_endpoints/{id}", delete(webhook_api::delete_endpoint))
        .route("/v1/webhook_endpoints/{id}/rotate_secret", post(webhook_api::rotate_secret))
        .route("/v1/events", get(webhook_api::list_events))
        .route("/v1/events/{id}", get(webhook_api::get_event))
        .route("/v1/events/{id}/deliveries", get(webhook_api::event_deliveries))
        .route("/v1/events/{id}/redispatch", post(webhook_api::redispatch))
        .route("/v1/transfers", post(transfer_api::create_transfer))
        .route("/v1/transfers/{id}", get(transfer_api::get_transfer))
        .route(
            "/v1/merchants/{id}/api_keys",
            post(key_api::create_api_key).get(key_api::list_api_keys),
        )
        .route("/v1/api_keys/{id}", delete(key_api::revoke_api_key))
        .route("/v1/payout_batches/{id}", get(batch_api::get_batch))
        .route("/v1/balances", get(handlers::balances))
        .route("/v1/statements", get(statement_api::get_statement))
        .route("/v1/deposits", post(handlers::create_deposit))
        .route("/openapi.json", get(handlers::openapi))
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(metrics_api::metrics_text))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            Duration::from_millis(REQUEST_TIMEOUT_MS),
        ))
        // A batch has its own body limit and time: a JSON batch is read whole (up to 10,000 lines),
        // a CSV batch streamed (its own limit, `batch_csv::CSV_BATCH_BODY_MAX_BYTES`).
        .merge(
            Router::new()
                .route("/v1/payout_batches", post(batch_api::create_batch))
                .layer(DefaultBodyLimit::max(batch_api::BATCH_BODY_MAX_BYTES))
                .layer(TimeoutLayer::with_status_code(
                    axum::http::StatusCode::REQUEST_TIMEOUT,
                    Duration::from_millis(BATCH_REQUEST_TIMEOUT_MS),
                )),
        )
        .merge(dashboard::routes().layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            Duration::from_millis(REQUEST_TIMEOUT_MS),
        )))
        .fallback(handlers::fallback)
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .layer(request_rate::layer(state.request_rate))
        .layer(middleware::from_fn_with_state(state.clone(), failed_auth::limit))
        .layer(middleware::from_fn(record_request))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// The metrics alone, for processes that serve no API (`payoutd worker`): `/metrics` and `/healthz`.
/// Nothing in it is per merchant.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    engine: Engine,
    access: metrics_api::MetricsAccess,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut state = AppState::new(engine, None);
    state.metrics_access = access;
    let router = Router::new()
        .route("/metrics", get(metrics_api::metrics_text))
        .route("/healthz", get(handlers::healthz))
        .fallback(handlers::fallback)
        .with_state(state);
    server::serve_router(listener, router, ServeLimits::default(), shutdown).await
}

/// Serves the API on `listener` until `shutdown` completes, finishing in-flight requests, with the
/// default connection limits.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with_limits(listener, state, ServeLimits::default(), shutdown).await
}

/// Serves any router (payoutd's other listeners: the signer service) with the same accept loop,
/// timeouts and connection cap as the API.
pub async fn serve_router_with_limits(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    limits: ServeLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve_router(listener, router, limits, shutdown).await
}

/// `serve` with the connection limits an operator configured.
pub async fn serve_with_limits(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: ServeLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve_router(listener, router(state), limits, shutdown).await
}

#[cfg(test)]
mod metrics_label_tests {
    use axum::http::Method;

    /// A method a client makes up is one label, not one series per spelling. (Before, the label
    /// was the method as sent.)
    #[test]
    fn invented_methods_share_one_label() {
        assert_eq!(super::method_label(&Method::POST), "POST");
        for invented in ["FOOBAR", "X1", "PROPFIND"] {
            assert_eq!(
                super::method_label(&Method::from_bytes(invented.as_bytes()).unwrap()),
                "other"
            );
        }
    }
}
