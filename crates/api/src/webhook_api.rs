//! Webhook endpoints and the events API: register, list, delete and rotate endpoints; page through
//! events; see each delivery try; redispatch.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use payoutd_domain::webhook::WEBHOOK_SECRET_RANDOM_BYTES;
use payoutd_domain::{
    EndpointOwner, EventFilter, EventId, EventType, WebhookEndpointId, WebhookUrl,
};
use payoutd_engine::webhook_store::{
    Delivery, DeliveryTry, EventQuery, StoredEvent, WebhookEndpoint,
};
use payoutd_engine::{WebhookError, Webhooks};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::auth::Caller;
use crate::client::Client;
use crate::handlers::{LIST_LIMIT_DEFAULT, parse_body};
use crate::models::ProblemBody;
use crate::problem::Problem;

impl From<WebhookError> for Problem {
    fn from(err: WebhookError) -> Problem {
        match err {
            WebhookError::NotFound => Problem::not_found(),
            WebhookError::UrlRefused(e) => Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "webhook-url-refused",
                "The webhook URL is not allowed",
                e.to_string(),
            ),
            WebhookError::TooManyEndpoints => Problem::new(
                StatusCode::CONFLICT,
                "too-many-endpoints",
                "Too many webhook endpoints",
                err.to_string(),
            ),
            WebhookError::Store(e) => Problem::from(e),
        }
    }
}

/// Writes the audit entry of a webhook action the operator's key took: the operator's endpoints
/// carry incidents, and a redispatch sends any merchant's events again, so each one is recorded
/// with who and from where. A merchant's own endpoints are the merchant's business.
async fn audit_operator(
    state: &AppState,
    client: &Client,
    owner: &EndpointOwner,
    action: &str,
    subject: &str,
    detail: String,
) {
    if matches!(owner, EndpointOwner::Operator) {
        crate::audit::record(state, client, action, subject, detail).await;
    }
}

fn owner(caller: Caller) -> EndpointOwner {
    match caller {
        Caller::Merchant(m) => EndpointOwner::Merchant(m),
        Caller::Operator => EndpointOwner::Operator,
    }
}

fn webhooks(state: &AppState) -> Result<&Webhooks, Problem> {
    state.webhooks.as_ref().ok_or_else(|| {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no-webhooks",
            "Webhooks are not enabled in this process",
            "serve with a configuration that enables webhooks",
        )
    })
}

fn secret_randomness() -> Result<[u8; WEBHOOK_SECRET_RANDOM_BYTES], Problem> {
    let mut bytes = [0u8; WEBHOOK_SECRET_RANDOM_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| {
        tracing::error!(error = %e, "the operating system's random source failed");
        Problem::internal()
    })?;
    Ok(bytes)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpointBody {
    /// https URL resolving to public addresses (http and private addresses only where the configuration
    /// allows them); a host that does not resolve, or resolves to a private address, answers 422.
    #[schema(
        max_length = 2048,
        example = "https://hooks.example.com/payoutd",
        pattern = "^https://([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)*[a-z]([a-z0-9-]{0,61}[a-z0-9])?(:[1-9][0-9]{0,3})?(/[A-Za-z0-9._~-]*)*$"
    )]
    pub url: String,
    /// Event types to receive; absent or empty: every type the caller receives.
    #[schema(max_items = 32)]
    pub event_types: Option<Vec<String>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointBody {
    pub id: String,
    pub object: &'static str,
    pub url: String,
    pub event_types: Vec<&'static str>,
    pub created_at_ms: i64,
    /// The signing secret (`whsec_...`): only in the answer that creates it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl EndpointBody {
    fn from_domain(e: &WebhookEndpoint) -> EndpointBody {
        EndpointBody {
            id: e.id.to_string(),
            object: "webhook_endpoint",
            url: e.url.to_string(),
            event_types: e.filter.types().iter().map(|t| t.as_str()).collect(),
            created_at_ms: e.created_at_ms,
            secret: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointList {
    pub object: &'static str,
    pub data: Vec<EndpointBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RotatedSecretBody {
    pub id: String,
    /// The new secret; the previous one keeps signing beside it for the configured overlap.
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventBody {
    /// The deterministic event id, also the `webhook-id` of every delivery.
    pub id: String,
    pub object: &'static str,
    #[serde(rename = "type")]
    pub event_type: &'static str,
    pub created_at_ms: i64,
    /// The entity as it was when the event was written.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

impl EventBody {
    fn from_domain(e: &StoredEvent) -> EventBody {
        EventBody {
            id: e.id.to_string(),
            object: "event",
            event_type: e.event_type.as_str(),
            created_at_ms: e.created_at_ms,
            data: serde_json::from_str(&e.payload_json).unwrap_or(serde_json::Value::Null),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventList {
    pub object: &'static str,
    pub data: Vec<EventBody>,
    pub has_more: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryBody {
    pub endpoint_id: String,
    /// `pending`, `delivered` or `abandoned`.
    pub state: &'static str,
    pub round: u32,
    pub tries_in_round: u32,
    pub next_try_at_ms: i64,
    pub delivered_at_ms: Option<i64>,
    pub tries: Vec<DeliveryTry>,
}

impl DeliveryBody {
    fn from_domain(d: &Delivery) -> DeliveryBody {
        DeliveryBody {
            endpoint_id: d.endpoint_id.to_string(),
            state: d.state.as_str(),
            round: d.round,
            tries_in_round: d.tries_in_round,
            next_try_at_ms: d.next_try_at_ms,
            delivered_at_ms: d.delivered_at_ms,
            tries: d.tries.clone(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    pub object: &'static str,
    pub data: Vec<DeliveryBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RedispatchBody {
    /// Deliveries made pending again, one per endpoint.
    pub redispatched: u32,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventListQuery {
    /// Only events of this type.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub event_type: Option<String>,
    /// Cursor: events written after this event id (oldest first); an id the caller cannot see
    /// answers 404.
    #[param(min_length = 26, max_length = 26, pattern = "^[0-9A-HJKMNP-TV-Z]{26}$")]
    pub after: Option<String>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
}

fn endpoint_id(text: &str) -> Result<WebhookEndpointId, Problem> {
    WebhookEndpointId::parse(text).map_err(|_| Problem::not_found())
}

fn event_id(text: &str) -> Result<EventId, Problem> {
    EventId::parse(text).map_err(|_| Problem::not_found())
}

/// Register a webhook endpoint (merchant key: the merchant's events; operator key: incidents).
#[utoipa::path(post, path = "/v1/webhook_endpoints", request_body = CreateEndpointBody,
    responses(
        (status = 201, description = "Created; the secret is shown this once", body = EndpointBody),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 409, description = "The owner has the maximum number of endpoints", body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 422, description = "The URL is not allowed (http, private address), or a merchant asked for incident events (the operator's)", body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ), security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn create_endpoint(
    State(state): State<AppState>,
    caller: Caller,
    client: Client,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let body: CreateEndpointBody = parse_body(body)?;
    let url =
        WebhookUrl::parse(body.url.trim()).map_err(|e| Problem::invalid(format!("url: {e}")))?;
    let types = body.event_types.unwrap_or_default();
    let filter = EventFilter::parse(types.iter().map(String::as_str))
        .map_err(|e| Problem::invalid(format!("event_types: {e}")))?;
    let owner = owner(caller);
    if let Some(t) = filter.types().iter().find(|t| !owner.may_receive(**t)) {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "event-type-not-available",
            "This event type is the operator's",
            format!("event_types: {} goes to operator endpoints only", t.as_str()),
        ));
    }
    let (endpoint, secret) =
        webhooks(&state)?.create_endpoint(owner.clone(), url, filter, secret_randomness()?).await?;
    let types = match endpoint.filter.to_stored() {
        every if every.is_empty() => "every operator event".to_owned(),
        some => some,
    };
    // Without its query, where a receiver may carry a token of its own.
    let url = endpoint.url.to_string();
    let shown = url.split_once('?').map_or(url.as_str(), |(before, _)| before);
    let detail = format!("{shown} for {types}");
    audit_operator(
        &state,
        &client,
        &owner,
        "create_webhook_endpoint",
        endpoint.id.as_str(),
        detail,
    )
    .await;
    let body = EndpointBody {
        secret: Some(secret.expose().to_owned()),
        ..EndpointBody::from_domain(&endpoint)
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// The caller's webhook endpoints (without secrets).
#[utoipa::path(get, path = "/v1/webhook_endpoints",
    responses((status = 200, body = EndpointList), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn list_endpoints(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<EndpointList>, Problem> {
    let endpoints = webhooks(&state)?.endpoints(&owner(caller)).await?;
    Ok(Json(EndpointList {
        object: "list",
        data: endpoints.iter().map(EndpointBody::from_domain).collect(),
    }))
}

/// Delete an endpoint; its pending deliveries are abandoned.
#[utoipa::path(delete, path = "/v1/webhook_endpoints/{id}", params(("id" = String, Path)),
    responses((status = 204), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn delete_endpoint(
    State(state): State<AppState>,
    caller: Caller,
    client: Client,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    let (owner, id) = (owner(caller), endpoint_id(&id)?);
    webhooks(&state)?.delete_endpoint(&owner, &id).await?;
    let detail = "deleted; its pending deliveries abandoned".to_owned();
    audit_operator(&state, &client, &owner, "delete_webhook_endpoint", id.as_str(), detail).await;
    Ok(StatusCode::NO_CONTENT)
}

/// A new signing secret; the previous one keeps signing beside it for the configured overlap.
#[utoipa::path(post, path = "/v1/webhook_endpoints/{id}/rotate_secret", params(("id" = String, Path)),
    responses((status = 200, body = RotatedSecretBody), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    caller: Caller,
    client: Client,
    Path(id): Path<String>,
) -> Result<Json<RotatedSecretBody>, Problem> {
    let (owner, id) = (owner(caller), endpoint_id(&id)?);
    let secret = webhooks(&state)?.rotate_secret(&owner, &id, secret_randomness()?).await?;
    let detail =
        "a new signing secret; the previous one signs beside it for the overlap".to_owned();
    audit_operator(&state, &client, &owner, "rotate_webhook_secret", id.as_str(), detail).await;
    Ok(Json(RotatedSecretBody { id: id.to_string(), secret: secret.expose().to_owned() }))
}

/// Events, oldest first after the cursor (a merchant sees its own, the operator all).
#[utoipa::path(get, path = "/v1/events", params(EventListQuery),
    responses((status = 200, body = EventList), (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, description = "The `after` event does not exist for this key", body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn list_events(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<EventListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<EventList>, Problem> {
    let Query(q) = query.map_err(|e| Problem::invalid(e.body_text()))?;
    let owner = owner(caller);
    let event_type = q
        .event_type
        .as_deref()
        .map(EventType::parse)
        .transpose()
        .map_err(|e| Problem::invalid(format!("type: {e}")))?;
    let limit = q.limit.unwrap_or(LIST_LIMIT_DEFAULT);
    if !(1..=payoutd_engine::store::LIST_LIMIT_MAX).contains(&limit) {
        return Err(Problem::invalid(format!(
            "limit must be 1-{}",
            payoutd_engine::store::LIST_LIMIT_MAX
        )));
    }
    let webhooks = webhooks(&state)?;
    let after = match q.after.as_deref() {
        Some(text) => {
            let id = EventId::parse(text).map_err(|e| Problem::invalid(format!("after: {e}")))?;
            webhooks.event(&owner, &id).await.map_err(|_| Problem::not_found())?;
            Some(id)
        }
        None => None,
    };
    let page = webhooks.events(&EventQuery { owner, event_type, after, limit }).await?;
    Ok(Json(EventList {
        object: "list",
        data: page.events.iter().map(EventBody::from_domain).collect(),
        has_more: page.has_more,
    }))
}

/// One event.
#[utoipa::path(get, path = "/v1/events/{id}", params(("id" = String, Path)),
    responses((status = 200, body = EventBody), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn get_event(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<EventBody>, Problem> {
    let event = webhooks(&state)?.event(&owner(caller), &event_id(&id)?).await?;
    Ok(Json(EventBody::from_domain(&event)))
}

/// The event's deliveries, each with every try (time, status code or error, latency).
#[utoipa::path(get, path = "/v1/events/{id}/deliveries", params(("id" = String, Path)),
    responses((status = 200, body = DeliveryList), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn event_deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<DeliveryList>, Problem> {
    let deliveries = webhooks(&state)?.deliveries(&owner(caller), &event_id(&id)?).await?;
    Ok(Json(DeliveryList {
        object: "list",
        data: deliveries.iter().map(DeliveryBody::from_domain).collect(),
    }))
}

/// Send the event again, with the same `webhook-id`, to each of the caller's matching endpoints.
#[utoipa::path(post, path = "/v1/events/{id}/redispatch", params(("id" = String, Path)),
    responses((status = 202, body = RedispatchBody), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn redispatch(
    State(state): State<AppState>,
    caller: Caller,
    client: Client,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let (owner, id) = (owner(caller), event_id(&id)?);
    let n = webhooks(&state)?.redispatch(&owner, &id).await?;
    let detail = format!("sent again to {n} endpoint(s)");
    audit_operator(&state, &client, &owner, "redispatch_event", id.as_str(), detail).await;
    Ok((StatusCode::ACCEPTED, Json(RedispatchBody { redispatched: n })).into_response())
}
