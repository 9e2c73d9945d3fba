//! Operator endpoints for merchants' API keys: create (shown once), list, revoke (refused at once everywhere).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use payoutd_domain::secret::API_KEY_RANDOM_BYTES;
use payoutd_domain::{ApiKeyId, MerchantId};
use payoutd_engine::IntakeError;
use payoutd_engine::store::ApiKeyInfo;
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::audit;
use crate::auth::Operator;
use crate::client::Client;
use crate::models::ProblemBody;
use crate::problem::Problem;

#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKeyBody {
    /// `key_` and 32 hex digits; names the key for listing and revoking.
    pub id: String,
    /// Always `api_key`.
    pub object: &'static str,
    pub merchant_id: String,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
    /// The key itself: only in the answer that creates it; stored hashed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

impl ApiKeyBody {
    fn from_domain(k: &ApiKeyInfo) -> ApiKeyBody {
        ApiKeyBody {
            id: k.id.to_string(),
            object: "api_key",
            merchant_id: k.merchant_id.to_string(),
            created_at_ms: k.created_at_ms,
            revoked_at_ms: k.revoked_at_ms,
            api_key: None,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKeyList {
    pub object: &'static str,
    pub data: Vec<ApiKeyBody>,
}

fn merchant_id(text: &str) -> Result<MerchantId, Problem> {
    MerchantId::parse(text).map_err(|_| Problem::not_found())
}

fn unknown_merchant_is_not_found(err: IntakeError) -> Problem {
    match err {
        IntakeError::UnknownMerchant => Problem::not_found(),
        other => Problem::from(other),
    }
}

/// Operator: another API key for a merchant (a merchant may hold several, to rotate without downtime).
#[utoipa::path(post, path = "/v1/merchants/{id}/api_keys", params(("id" = String, Path)),
    responses((status = 201, description = "Created; the key is shown this once", body = ApiKeyBody),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("operator_key" = [])))]
pub async fn create_api_key(
    State(state): State<AppState>,
    _operator: Operator,
    client: Client,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let merchant = merchant_id(&id)?;
    let mut random = [0u8; API_KEY_RANDOM_BYTES];
    getrandom::fill(&mut random).map_err(|e| {
        tracing::error!(error = %e, "the operating system's random source failed");
        Problem::internal()
    })?;
    let (key_id, key) = state
        .engine
        .create_api_key(&merchant, random)
        .await
        .map_err(unknown_merchant_is_not_found)?;
    let listed = state.engine.api_keys(&merchant).await?;
    let info = listed.iter().find(|k| k.id == key_id).ok_or_else(Problem::internal)?;
    let body =
        ApiKeyBody { api_key: Some(key.expose().to_owned()), ..ApiKeyBody::from_domain(info) };
    audit::record(
        &state,
        &client,
        "create_api_key",
        merchant.as_str(),
        format!("key {key_id} created"),
    )
    .await;
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Operator: a merchant's API keys, revoked ones too (never the keys themselves).
#[utoipa::path(get, path = "/v1/merchants/{id}/api_keys", params(("id" = String, Path)),
    responses((status = 200, body = ApiKeyList), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("operator_key" = [])))]
pub async fn list_api_keys(
    State(state): State<AppState>,
    _operator: Operator,
    Path(id): Path<String>,
) -> Result<Json<ApiKeyList>, Problem> {
    let keys = state.engine.api_keys(&merchant_id(&id)?).await?;
    Ok(Json(ApiKeyList {
        object: "list",
        data: keys.iter().map(ApiKeyBody::from_domain).collect(),
    }))
}

/// Operator: revoke an API key; every request with it answers 401 from now on, in every process.
#[utoipa::path(delete, path = "/v1/api_keys/{id}", params(("id" = String, Path)),
    responses((status = 204), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, description = "No such key, or already revoked", body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("operator_key" = [])))]
pub async fn revoke_api_key(
    State(state): State<AppState>,
    _operator: Operator,
    client: Client,
    Path(id): Path<String>,
) -> Result<StatusCode, Problem> {
    let id = ApiKeyId::parse(&id).map_err(|_| Problem::not_found())?;
    state.engine.revoke_api_key(&id).await?;
    audit::record(&state, &client, "revoke_api_key", id.as_str(), "revoked".to_owned()).await;
    Ok(StatusCode::NO_CONTENT)
}
