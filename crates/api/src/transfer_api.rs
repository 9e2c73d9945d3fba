//! Internal transfers over HTTP: create (idempotent on the sender's key) and read.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use payoutd_domain::{MerchantId, Transfer, TransferId, TransferKey, TransferRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Merchant;
use crate::handlers::{parse_body, with_replay_header};
use crate::idempotency::{self, key_problem};
use crate::models::{ProblemBody, asset_and_amount};
use crate::problem::Problem;

/// `POST /v1/transfers`: moves available balance to another merchant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTransferBody {
    #[schema(pattern = "^mer_[0-9a-f]{32}$", example = "mer_0192f0c1a2b34c5d8e9f00112233aabb")]
    pub destination_merchant_id: String,
    #[schema(example = "evm:1/USDC")]
    pub asset: String,
    /// Base units, a decimal string.
    #[schema(value_type = String, pattern = "^[1-9][0-9]{0,77}$", example = "1500000")]
    pub amount: serde_json::Value,
    /// 1-64 printable ASCII; or send it in `Idempotency-Key` (described as required here so a
    /// generated client always sends one).
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[!-~]+$",
        required = true,
        nullable = false
    )]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TransferBody {
    pub id: String,
    /// Always `transfer`.
    pub object: &'static str,
    /// Always `completed`: the debit and the credit commit together.
    pub status: &'static str,
    pub merchant_id: String,
    pub destination_merchant_id: String,
    pub asset: String,
    pub amount: String,
    /// The sender's key; `null` when the recipient reads the transfer.
    pub idempotency_key: Option<String>,
    pub created_at_ms: i64,
}

impl TransferBody {
    fn seen_by(t: &Transfer, viewer: &MerchantId) -> TransferBody {
        TransferBody {
            id: t.id.to_string(),
            object: "transfer",
            status: "completed",
            merchant_id: t.merchant_id.to_string(),
            destination_merchant_id: t.destination.to_string(),
            asset: t.asset.to_string(),
            amount: t.amount.to_string(),
            idempotency_key: t.key_seen_by(viewer).map(str::to_owned),
            created_at_ms: t.created_at_ms,
        }
    }
}

/// Transfer to another merchant (idempotent on the sender's key).
#[utoipa::path(post, path = "/v1/transfers", request_body = CreateTransferBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "1-64 printable ASCII; bare or RFC 8941 quoted")),
    responses(
        (status = 201, description = "Created", body = TransferBody),
        (status = 200, description = "Replay of an earlier identical request (header Idempotent-Replayed: true)", body = TransferBody),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, description = "No merchant has `destination_merchant_id`", body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 422, description = "Key reused with other parameters, or insufficient funds", body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ), security(("merchant_key" = [])))]
pub async fn create_transfer(
    State(state): State<AppState>,
    Merchant(merchant): Merchant,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let body: CreateTransferBody = parse_body(body)?;
    let key_text =
        idempotency::collect(&headers, body.idempotency_key.as_deref())?.ok_or_else(|| {
            key_problem("an idempotency key is required: send Idempotency-Key or idempotency_key")
                .with_slug("idempotency-key-missing")
        })?;
    let key = TransferKey::parse(&key_text).map_err(|e| key_problem(e.to_string()))?;
    let destination = MerchantId::parse(body.destination_merchant_id.trim())
        .map_err(|e| Problem::invalid(format!("destination_merchant_id: {e}")))?;
    let (asset, amount) = asset_and_amount(state.engine.assets(), &body.asset, &body.amount)?;
    let asset = asset.code.clone();
    let (transfer, replay) = state
        .engine
        .create_transfer(&merchant, TransferRequest::new(key, destination, asset, amount))
        .await?;
    let location = format!("/v1/transfers/{}", transfer.id);
    Ok(with_replay_header(
        StatusCode::CREATED,
        replay,
        TransferBody::seen_by(&transfer, &merchant),
        Some(location),
    ))
}

/// A transfer the merchant sent or received.
#[utoipa::path(get, path = "/v1/transfers/{id}", params(("id" = String, Path)),
    responses((status = 200, body = TransferBody), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = [])))]
pub async fn get_transfer(
    State(state): State<AppState>,
    Merchant(merchant): Merchant,
    Path(id): Path<String>,
) -> Result<Json<TransferBody>, Problem> {
    let id = TransferId::parse(&id).map_err(|_| Problem::not_found())?;
    Ok(Json(TransferBody::seen_by(&state.engine.transfer(&merchant, &id).await?, &merchant)))
}
