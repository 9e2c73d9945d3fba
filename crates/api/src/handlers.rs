//! Request handlers: parse at the edge into domain values, call one use case, answer.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use payoutd_domain::Payout;
use payoutd_domain::{DepositKey, MerchantId, PayoutId, PayoutKey, PayoutRequest, PayoutStatus};
use payoutd_engine::store::PayoutQuery;
use payoutd_engine::{Pipeline, PipelineError, Replay};
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::audit;
use crate::auth::{Caller, Depositor, Merchant, Operator, PresentedKey, merchant_of};
use crate::client::Client;
use crate::idempotency::{self, key_problem};
use crate::models::*;
use crate::problem::Problem;

/// Default page size of listings.
pub const LIST_LIMIT_DEFAULT: u32 = 20;

pub(crate) fn parse_body<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, Problem> {
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "The body is too large",
                format!("bodies are limited to {} bytes", crate::BODY_LIMIT_BYTES),
            )
        } else {
            Problem::invalid(rejection.body_text())
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| Problem::malformed_json(e.to_string()))
}

pub(crate) fn with_replay_header(
    status_if_created: StatusCode,
    replay: Replay,
    body: impl serde::Serialize,
    location: Option<String>,
) -> Response {
    let status = match replay {
        Replay::Created => status_if_created,
        Replay::Replayed => StatusCode::OK,
    };
    let mut response = (status, Json(body)).into_response();
    if replay == Replay::Replayed {
        response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    if let (Replay::Created, Some(location)) = (replay, location)
        && let Ok(v) = HeaderValue::from_str(&location)
    {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}

fn payout_id(text: &str) -> Result<PayoutId, Problem> {
    PayoutId::parse(text).map_err(|_| Problem::not_found())
}

/// Create a payout (idempotent on the merchant's key).
#[utoipa::path(post, path = "/v1/payouts", request_body = CreatePayoutBody,
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 8, max_length = 128, pattern = "^[!#-~]+$",
        description = "8-128 printable ASCII, bare (as described here) or RFC 8941 quoted")),
    responses(
        (status = 201, description = "Created", body = PayoutBody),
        (status = 200, description = "Replay of an earlier identical request (header Idempotent-Replayed: true)", body = PayoutBody),
        (status = 400, description = "Invalid request", body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, description = "Missing or invalid API key", body = ProblemBody, content_type = "application/problem+json"),
        (status = 422, description = "Key reused with other parameters, or insufficient funds", body = ProblemBody, content_type = "application/problem+json"),
    ), security(("merchant_key" = [])))]
pub async fn create_payout(
    State(state): State<AppState>,
    PresentedKey(presented): PresentedKey,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let started = std::time::Instant::now();
    let request = match payout_request(&state, &headers, body) {
        Ok(request) => request,
        // An unknown key is told so before anything about the body, as on every endpoint.
        Err(problem) => return Err(merchant_of(&state, &presented).await.err().unwrap_or(problem)),
    };
    let (payout, replay) = state.engine.create_payout_with_api_key(&presented, request).await?;
    state.failed_auths.know(&presented);
    match replay {
        Replay::Created => metrics::counter!("payoutd_payouts_created_total").increment(1),
        Replay::Replayed => metrics::counter!("payoutd_payout_replays_total").increment(1),
    }
    metrics::histogram!("payoutd_intake_seconds").record(started.elapsed().as_secs_f64());
    let location = format!("/v1/payouts/{}", payout.id);
    Ok(with_replay_header(
        StatusCode::CREATED,
        replay,
        PayoutBody::from_domain(&payout),
        Some(location),
    ))
}

/// A payout request from the body and the idempotency headers, checked against the assets.
fn payout_request(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<PayoutRequest, Problem> {
    let body: CreatePayoutBody = parse_body(body)?;
    let key_text = idempotency::collect(headers, body.idempotency_key.as_deref())?;
    let key_text = match key_text {
        Some(k) => k,
        None if state.require_payout_key => {
            return Err(key_problem(
                "an idempotency key is required: send Idempotency-Key or idempotency_key",
            )
            .with_slug("idempotency-key-missing"));
        }
        // Configured to allow keyless payouts: each such request is a new business event.
        None => format!("auto:{}", uuid::Uuid::new_v4().simple()),
    };
    let key = PayoutKey::parse(&key_text).map_err(|e| key_problem(e.to_string()))?;
    let (asset, amount) = asset_and_amount(state.engine.assets(), &body.asset, &body.amount)?;
    let asset = asset.clone();
    let destination = asset
        .parse_destination(&body.destination)
        .map_err(|e| Problem::invalid(e.to_string()).with_slug("invalid-destination"))?;
    Ok(PayoutRequest::new(key, asset.code.clone(), amount, destination, metadata(body.metadata)?))
}

/// Read one payout.
#[utoipa::path(get, path = "/v1/payouts/{id}", params(("id" = String, Path)),
    responses((status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 200, body = PayoutBody), (status = 404, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = [])))]
pub async fn get_payout(
    State(state): State<AppState>,
    Merchant(merchant): Merchant,
    Path(id): Path<String>,
) -> Result<Json<PayoutBody>, Problem> {
    let payout = state.engine.payout(&merchant, &payout_id(&id)?).await?;
    Ok(Json(PayoutBody::from_domain(&payout)))
}

/// List payouts, newest first; filter by `idempotency_key` ("query before retry") or `status`.
#[utoipa::path(get, path = "/v1/payouts", params(ListPayoutsParams),
    responses((status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 200, body = PayoutList), (status = 400, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = [])))]
pub async fn list_payouts(
    State(state): State<AppState>,
    Merchant(merchant): Merchant,
    params: Result<Query<ListPayoutsParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<PayoutList>, Problem> {
    let Query(params) = params.map_err(|e| Problem::invalid(e.body_text()))?;
    let limit = params.limit.unwrap_or(LIST_LIMIT_DEFAULT);
    if !(1..=payoutd_engine::store::LIST_LIMIT_MAX).contains(&limit) {
        return Err(Problem::invalid(format!(
            "limit must be 1-{}",
            payoutd_engine::store::LIST_LIMIT_MAX
        )));
    }
    let query = PayoutQuery {
        key: params
            .idempotency_key
            .as_deref()
            .map(PayoutKey::parse)
            .transpose()
            .map_err(|e| key_problem(e.to_string()))?,
        status: params
            .status
            .as_deref()
            .map(PayoutStatus::parse)
            .transpose()
            .map_err(|e| Problem::invalid(e.to_string()))?,
        before: params
            .cursor
            .as_deref()
            .map(PayoutId::parse)
            .transpose()
            .map_err(|_| Problem::invalid("cursor must be a payout id from next_cursor"))?,
        limit,
    };
    let page = state.engine.list_payouts(&merchant, query).await?;
    Ok(Json(PayoutList {
        object: "list",
        next_cursor: if page.has_more {
            page.payouts.last().map(|p| p.id.to_string())
        } else {
            None
        },
        has_more: page.has_more,
        data: page.payouts.iter().map(PayoutBody::from_domain).collect(),
    }))
}

/// Cancel. Before signing (merchant or operator key): the hold is released at once (200). After signing
/// (operator key only): a cancel transaction at the same nonce is sent (202); the payout fails only
/// once that cancel is final, and is paid instead if the payout transaction wins. Repeating answers the same.
#[utoipa::path(post, path = "/v1/payouts/{id}/cancel", params(("id" = String, Path)),
    responses((status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 200, body = PayoutBody), (status = 202, description = "Cancel transaction sent", body = PayoutBody),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 409, description = "Already signed (merchant key) or finished", body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn cancel_payout(
    State(state): State<AppState>,
    caller: Caller,
    client: Client,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
    let id = payout_id(&id)?;
    let merchant = match &caller {
        Caller::Merchant(m) => m.clone(),
        Caller::Operator => {
            let pipeline = state.pipeline.as_ref().ok_or_else(Problem::no_pipeline)?;
            let payout =
                pipeline.store().payout_by_id(&id).await?.ok_or_else(Problem::not_found)?;
            if payout.status == PayoutStatus::Processing {
                let cancel = pipeline.cancel_signed(&id).await?;
                audit::record(
                    &state,
                    &client,
                    "cancel",
                    id.as_str(),
                    format!("cancel transaction {} sent", cancel.hash),
                )
                .await;
                return Ok(
                    (StatusCode::ACCEPTED, Json(PayoutBody::from_domain(&payout))).into_response()
                );
            }
            payout.merchant_id
        }
    };
    let (payout, replay) = state.engine.cancel_payout(&merchant, &id).await?;
    if matches!(caller, Caller::Operator) && replay == Replay::Created {
        audit::record(
            &state,
            &client,
            "cancel",
            id.as_str(),
            format!("now {}", payout.status.as_str()),
        )
        .await;
    }
    Ok(with_replay_header(StatusCode::OK, replay, PayoutBody::from_domain(&payout), None))
}

/// Operator: approve a payout held for review (near-duplicate or over a cap).
#[utoipa::path(post, path = "/v1/payouts/{id}/approve", params(("id" = String, Path)),
    responses((status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 200, body = PayoutBody), (status = 409, body = ProblemBody, content_type = "application/problem+json")),
    security(("operator_key" = [])))]
pub async fn approve_payout(
    State(state): State<AppState>,
    _operator: Operator,
    client: Client,
    Path(id): Path<String>,
) -> Result<Json<PayoutBody>, Problem> {
    review(&state, &client, &id, "approve", async |pipeline, id| pipeline.approve(id).await).await
}

/// Operator: reject a payout held for review; releases its hold.
#[utoipa::path(post, path = "/v1/payouts/{id}/reject", params(("id" = String, Path)),
    responses((status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 200, body = PayoutBody), (status = 409, body = ProblemBody, content_type = "application/problem+json")),
    security(("operator_key" = [])))]
pub async fn reject_payout(
    State(state): State<AppState>,
    _operator: Operator,
    client: Client,
    Path(id): Path<String>,
) -> Result<Json<PayoutBody>, Problem> {
    review(&state, &client, &id, "reject", async |pipeline, id| pipeline.reject(id).await).await
}

/// A payout held for review, approved or rejected: the same audit line and answer, one pipeline
/// call apart (the dashboard's `review` is the same decision behind a signed form).
async fn review(
    state: &AppState,
    client: &Client,
    id: &str,
    action: &'static str,
    decide: impl AsyncFnOnce(&Pipeline, &PayoutId) -> Result<Payout, PipelineError>,
) -> Result<Json<PayoutBody>, Problem> {
    let pipeline = state.pipeline.as_ref().ok_or_else(Problem::no_pipeline)?;
    let payout = decide(pipeline, &payout_id(id)?).await?;
    let detail = format!("now {}", payout.status.as_str());
    audit::record(state, client, action, payout.id.as_str(), detail).await;
    Ok(Json(PayoutBody::from_domain(&payout)))
}

/// Operator: settle a payout in `needs_attention` as `paid` or `failed`, or `retry` it (next attempt,
/// same hold), with evidence. `failed` and `retry` are refused while the chain cannot prove that no
/// transaction of it can still land.
#[utoipa::path(post, path = "/v1/payouts/{id}/resolve", params(("id" = String, Path)), request_body = ResolvePayoutBody,
    responses((status = 400, description = "The body is not valid for this operation; nothing changed", body = ProblemBody, content_type = "application/problem+json"), (status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 200, body = PayoutBody), (status = 409, body = ProblemBody, content_type = "application/problem+json")),
    security(("operator_key" = [])))]
pub async fn resolve_payout(
    State(state): State<AppState>,
    _operator: Operator,
    client: Client,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PayoutBody>, Problem> {
    let body: ResolvePayoutBody = parse_body(body)?;
    let verdict = payoutd_engine::Verdict::parse(&body.verdict)
        .ok_or_else(|| Problem::invalid("verdict must be `paid`, `failed` or `retry`"))?;
    if body.evidence.chars().count() > DECISION_TEXT_CHARS_MAX {
        return Err(Problem::invalid(format!(
            "evidence is limited to {DECISION_TEXT_CHARS_MAX} characters"
        )));
    }
    let pipeline = state.pipeline.as_ref().ok_or_else(Problem::no_pipeline)?;
    let payout =
        pipeline.resolve_needs_attention(&payout_id(&id)?, verdict, &body.evidence).await?;
    let detail =
        format!("{}: now {}; evidence: {}", body.verdict, payout.status.as_str(), body.evidence);
    audit::record(&state, &client, "resolve", payout.id.as_str(), detail).await;
    Ok(Json(PayoutBody::from_domain(&payout)))
}

/// Attempts of a payout with every transaction hash they ever broadcast.
#[utoipa::path(get, path = "/v1/payouts/{id}/attempts", params(("id" = String, Path)),
    responses((status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 200, body = AttemptList), (status = 404, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = []), ("operator_key" = [])))]
pub async fn payout_attempts(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<AttemptList>, Problem> {
    let id = payout_id(&id)?;
    if let Caller::Merchant(m) = &caller {
        state.engine.payout(m, &id).await?; // 404 unless it is this merchant's
    }
    let attempts = match &state.pipeline {
        Some(p) => p.store().attempts_of(&id).await?,
        None => vec![],
    };
    Ok(Json(AttemptList {
        object: "list",
        data: attempts.iter().map(AttemptBody::from_domain).collect(),
    }))
}

/// Operator: open incidents, oldest first.
#[utoipa::path(get, path = "/v1/incidents", responses((status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 200, body = IncidentList)), security(("operator_key" = [])))]
pub async fn list_incidents(
    State(state): State<AppState>,
    _operator: Operator,
) -> Result<Json<IncidentList>, Problem> {
    let pipeline = state.pipeline.as_ref().ok_or_else(Problem::no_pipeline)?;
    let incidents = pipeline.store().open_incidents(payoutd_engine::store::LIST_LIMIT_MAX).await?;
    Ok(Json(IncidentList {
        object: "list",
        data: incidents.iter().map(IncidentBody::from_domain).collect(),
    }))
}

/// Operator: close an incident with a note (the payout itself is settled with `/resolve`).
#[utoipa::path(post, path = "/v1/incidents/{id}/resolve", params(("id" = String, Path)), request_body = ResolveIncidentBody,
    responses((status = 400, description = "The body is not valid for this operation; nothing changed", body = ProblemBody, content_type = "application/problem+json"), (status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 204), (status = 404, body = ProblemBody, content_type = "application/problem+json")),
    security(("operator_key" = [])))]
pub async fn resolve_incident(
    State(state): State<AppState>,
    _operator: Operator,
    client: Client,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, Problem> {
    let body: ResolveIncidentBody = parse_body(body)?;
    if body.resolution.trim().is_empty() {
        return Err(Problem::invalid("resolution must say what was decided"));
    }
    if body.resolution.chars().count() > DECISION_TEXT_CHARS_MAX {
        return Err(Problem::invalid(format!(
            "resolution is limited to {DECISION_TEXT_CHARS_MAX} characters"
        )));
    }
    let id = payoutd_domain::IncidentId::parse(&id).map_err(|_| Problem::not_found())?;
    let pipeline = state.pipeline.as_ref().ok_or_else(Problem::no_pipeline)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    if pipeline.store().resolve_incident(&id, body.resolution.trim(), now).await? {
        audit::record(
            &state,
            &client,
            "resolve_incident",
            id.as_str(),
            body.resolution.trim().to_owned(),
        )
        .await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Problem::not_found())
    }
}

/// The merchant's balances per asset.
#[utoipa::path(get, path = "/v1/balances", responses((status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 200, body = BalanceList)), security(("merchant_key" = [])))]
pub async fn balances(
    State(state): State<AppState>,
    Merchant(merchant): Merchant,
) -> Result<Json<BalanceList>, Problem> {
    let balances = state.engine.balances(&merchant).await?;
    Ok(Json(BalanceList {
        object: "list",
        data: balances.iter().map(BalanceBody::from_domain).collect(),
    }))
}

/// Credit a merchant's balance (idempotent on the merchant and key), with the deposit key when one
/// is configured, else the operator key.
#[utoipa::path(post, path = "/v1/deposits", request_body = CreateDepositBody,
    responses((status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"), (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json"), (status = 201, body = DepositBody), (status = 200, description = "Replay", body = DepositBody),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, description = "Unknown merchant", body = ProblemBody, content_type = "application/problem+json"),
        (status = 422, body = ProblemBody, content_type = "application/problem+json")),
    security(("deposit_key" = []), ("operator_key" = [])))]
pub async fn create_deposit(
    State(state): State<AppState>,
    _depositor: Depositor,
    client: Client,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let body: CreateDepositBody = parse_body(body)?;
    let key_text =
        idempotency::collect(&headers, body.idempotency_key.as_deref())?.ok_or_else(|| {
            key_problem("deposits need an idempotency key").with_slug("idempotency-key-missing")
        })?;
    let key = DepositKey::parse(&key_text).map_err(|e| key_problem(e.to_string()))?;
    let merchant = MerchantId::parse(&body.merchant_id)
        .map_err(|_| Problem::invalid("merchant_id is not a merchant id"))?;
    let (asset, amount) = asset_and_amount(state.engine.assets(), &body.asset, &body.amount)?;
    let asset = asset.code.clone();
    let (deposit, replay) = state.engine.deposit(&merchant, &asset, amount, key).await?;
    if replay == Replay::Created {
        let detail = format!("{} {} credited ({})", deposit.amount, deposit.asset, deposit.id);
        audit::record(&state, &client, "deposit", merchant.as_str(), detail).await;
    }
    Ok(with_replay_header(StatusCode::CREATED, replay, DepositBody::from_domain(&deposit), None))
}

pub async fn healthz() -> &'static str {
    "ok"
}

pub async fn readyz(State(state): State<AppState>) -> Result<&'static str, Problem> {
    state.engine.store().ping().await?;
    Ok("ready")
}

/// The longest evidence or resolution an operator may write (it is stored and shown as written).
pub const DECISION_TEXT_CHARS_MAX: usize = 4_096;

pub async fn openapi(State(state): State<AppState>) -> Response {
    let doc = crate::served_doc::served_document(state.engine.assets(), state.batch_lines_max);
    let mut response = serde_json::to_string_pretty(&doc).unwrap_or_default().into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub async fn fallback() -> Problem {
    Problem::not_found()
}
