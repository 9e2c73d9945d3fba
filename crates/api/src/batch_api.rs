//! Payout batches over HTTP: JSON lines or a CSV upload, refused whole when any line is bad,
//! otherwise one result per line; and the batch read back with each line's status.

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use payoutd_domain::{Amount, BatchId, PayoutKey, PayoutRequest};
use payoutd_engine::batches::{BatchLineOutcome, BatchOutcome};
use payoutd_engine::store::{BATCH_PAGE_LINES_DEFAULT, BatchPage, BatchView};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Merchant;
use crate::handlers::with_replay_header;
use crate::idempotency;
use crate::models::{PayoutBody, ProblemBody, amount_text, metadata};
use crate::problem::Problem;

/// Largest batch body: 10,000 lines of about 200 bytes fit twice over.
pub const BATCH_BODY_MAX_BYTES: usize = 4 * 1024 * 1024;
/// The CSV header, exactly.
pub const CSV_HEADER: [&str; 4] = ["external_id", "asset", "amount", "destination"];
/// Bad lines listed in a refusal; more are counted, not listed.
pub const BAD_LINES_LISTED_MAX: usize = 1_000;

/// `POST /v1/payout_batches` (JSON form; or `text/csv` with the header `external_id,asset,amount,destination`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBatchBody {
    #[schema(min_items = 1, max_items = 10000)]
    pub payouts: Vec<BatchLineBody>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchLineBody {
    /// The line's idempotency key: 8-128 printable ASCII, unique within the batch and, like every
    /// payout key, forever for the merchant.
    #[schema(min_length = 8, max_length = 128, pattern = "^[!-~]+$")]
    pub external_id: String,
    pub asset: String,
    #[schema(value_type = String, pattern = "^[1-9][0-9]{0,77}$", example = "1500000")]
    pub amount: serde_json::Value,
    pub destination: String,
    /// A JSON object of at most 4 KiB, as on `POST /v1/payouts`; absent or null: none.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchLineResult {
    pub line: usize,
    pub external_id: String,
    /// The line's payout: created now, or found (created by an earlier submission).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payout: Option<PayoutBody>,
    /// Why the line has no payout (insufficient funds, a key reused with other parameters).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub error: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchBody {
    pub id: String,
    /// Always `payout_batch`.
    pub object: &'static str,
    pub created: usize,
    pub existing: usize,
    pub failed: usize,
    pub lines: Vec<BatchLineResult>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchLineStatus {
    pub line: u32,
    pub external_id: String,
    pub payout_id: Option<String>,
    pub status: Option<&'static str>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchStatusBody {
    pub id: String,
    pub object: &'static str,
    pub created_at_ms: i64,
    /// The whole batch's lines by status (`no_payout` for lines without one).
    #[schema(value_type = Object)]
    pub counts: HashMap<String, usize>,
    /// This page's lines.
    pub lines: Vec<BatchLineStatus>,
    /// Whether lines follow this page's last (read them with `starting_after`).
    pub has_more: bool,
}

/// One line as it arrived, before any check.
pub(crate) struct RawLine {
    pub(crate) external_id: String,
    pub(crate) asset: String,
    pub(crate) amount: serde_json::Value,
    pub(crate) destination: String,
    pub(crate) metadata: Option<serde_json::Value>,
}

fn is_csv(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        v.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("text/csv"))
    })
}

fn read_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, Problem> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "The body is too large",
                format!("batch bodies are limited to {BATCH_BODY_MAX_BYTES} bytes"),
            )
        } else {
            Problem::invalid(rejection.body_text())
        }
    })
}

fn json_lines(bytes: &[u8], lines_max: usize) -> Result<Vec<Result<RawLine, String>>, Problem> {
    let body: CreateBatchBody =
        serde_json::from_slice(bytes).map_err(|e| Problem::malformed_json(e.to_string()))?;
    if body.payouts.len() > lines_max {
        return Err(too_many(lines_max));
    }
    Ok(body
        .payouts
        .into_iter()
        .map(|l| {
            Ok(RawLine {
                external_id: l.external_id,
                asset: l.asset,
                amount: l.amount,
                destination: l.destination,
                metadata: l.metadata,
            })
        })
        .collect())
}

pub(crate) fn too_many(lines_max: usize) -> Problem {
    Problem::invalid(format!("a batch holds at most {lines_max} lines"))
        .with_slug("batch-too-large")
}

/// The line as a payout request, or why not.
pub(crate) fn request(state: &AppState, line: RawLine) -> Result<PayoutRequest, String> {
    let key = PayoutKey::parse(&line.external_id).map_err(|e| format!("external_id: {e}"))?;
    let asset = state.engine.assets().get(&line.asset).map_err(|e| e.to_string())?.clone();
    let amount = amount_text(&line.amount).map_err(|p| p.detail)?;
    let amount = Amount::parse_positive(amount).map_err(|e| format!("amount: {e}"))?;
    let destination =
        asset.parse_destination(&line.destination).map_err(|e| format!("destination: {e}"))?;
    let metadata = metadata(line.metadata).map_err(|p| p.detail)?;
    Ok(PayoutRequest::new(key, asset.code.clone(), amount, destination, metadata))
}

/// Lines checked one by one, remembering enough to refuse the batch whole: every bad line (the
/// first `BAD_LINES_LISTED_MAX` listed) and a digest of each external id seen, to find repeats
/// without keeping the ids themselves.
pub(crate) struct LineChecker<'a> {
    state: &'a AppState,
    lines: usize,
    bad: Vec<serde_json::Value>,
    bad_count: usize,
    first_line_of: HashMap<[u8; 16], usize>,
}

impl<'a> LineChecker<'a> {
    pub(crate) fn new(state: &'a AppState) -> Self {
        LineChecker {
            state,
            lines: 0,
            bad: Vec::new(),
            bad_count: 0,
            first_line_of: HashMap::new(),
        }
    }

    /// The next line as a request, or `None` when it is bad (it is then remembered).
    pub(crate) fn check(&mut self, line: Result<RawLine, String>) -> Option<PayoutRequest> {
        self.lines += 1;
        let n = self.lines;
        let external_id = line.as_ref().map(|l| l.external_id.clone()).unwrap_or_default();
        let checked = line.and_then(|l| {
            let digest = id_digest(&l.external_id);
            if let Some(first) = self.first_line_of.get(&digest) {
                return Err(format!("external_id repeats line {first}"));
            }
            self.first_line_of.insert(digest, n);
            request(self.state, l)
        });
        match checked {
            Ok(r) => Some(r),
            Err(detail) => {
                self.bad_count += 1;
                if self.bad.len() < BAD_LINES_LISTED_MAX {
                    self.bad.push(serde_json::json!({"line": n, "external_id": external_id, "detail": detail}));
                }
                None
            }
        }
    }

    /// The number of lines if every one was good, else the refusal listing the bad ones.
    pub(crate) fn finish(self) -> Result<usize, Problem> {
        if self.bad_count > 0 {
            return Err(Problem::invalid(format!(
                "{} lines are invalid; nothing was created",
                self.bad_count
            ))
            .with_slug("invalid-batch")
            .with_errors(self.bad));
        }
        if self.lines == 0 {
            return Err(Problem::invalid("a batch needs at least one line"));
        }
        Ok(self.lines)
    }
}

/// 128 bits of an external id's SHA-256: two different ids share it with a chance far below any
/// hardware fault's, and a false match would only refuse the batch, never create anything.
fn id_digest(external_id: &str) -> [u8; 16] {
    let full = Sha256::digest(external_id.as_bytes());
    let mut digest = [0u8; 16];
    digest.copy_from_slice(&full[..16]);
    digest
}

/// Every line checked; the requests if all are good, else every bad line (with its number).
fn check_lines(
    state: &AppState,
    raw: Vec<Result<RawLine, String>>,
) -> Result<Vec<PayoutRequest>, Problem> {
    let mut checker = LineChecker::new(state);
    let requests: Vec<PayoutRequest> = raw.into_iter().filter_map(|l| checker.check(l)).collect();
    checker.finish()?;
    Ok(requests)
}

/// The answer's counts, kept line by line.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) created: usize,
    pub(crate) existing: usize,
    pub(crate) failed: usize,
}

impl Tally {
    /// Line `n`'s result, counted.
    pub(crate) fn line(&mut self, n: usize, line: BatchLineOutcome) -> BatchLineResult {
        let (payout, error) = match line.result {
            Ok((p, replay)) => {
                match replay {
                    payoutd_engine::Replay::Created => self.created += 1,
                    payoutd_engine::Replay::Replayed => self.existing += 1,
                }
                (Some(PayoutBody::from_domain(&p)), None)
            }
            Err(e) => {
                self.failed += 1;
                (None, Some(Problem::from(e).to_json()))
            }
        };
        BatchLineResult {
            line: n,
            external_id: line.external_id.as_str().to_owned(),
            payout,
            error,
        }
    }
}

fn batch_body(outcome: BatchOutcome) -> BatchBody {
    let mut tally = Tally::default();
    let lines = (1..).zip(outcome.lines).map(|(n, line)| tally.line(n, line)).collect();
    BatchBody {
        id: outcome.id.to_string(),
        object: "payout_batch",
        created: tally.created,
        existing: tally.existing,
        failed: tally.failed,
        lines,
    }
}

/// Submit a batch of payouts: every line is checked first (any bad line refuses the whole batch,
/// with every bad line listed); then each line is a payout keyed by its external_id. A CSV batch
/// is streamed: written and answered 1,000 lines at a time, its counts after its lines; an answer
/// cut short is finished by submitting the same batch again.
#[utoipa::path(post, path = "/v1/payout_batches",
    request_body(content((CreateBatchBody = "application/json"), (String = "text/csv"))),
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 8, max_length = 128, pattern = "^[!#-~]+$",
        description = "8-128 printable ASCII; without it the batch is keyed by its lines' external ids")),
    responses(
        (status = 201, description = "Created; one result per line", body = BatchBody),
        (status = 200, description = "The same batch submitted again: only missing lines were created", body = BatchBody),
        (status = 400, description = "A bad line, a repeated external_id or too many lines: nothing was created", body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 413, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json"),
    ), security(("merchant_key" = [])))]
pub async fn create_batch(
    State(state): State<AppState>,
    Merchant(merchant): Merchant,
    request: Request,
) -> Result<Response, Problem> {
    let headers = request.headers().clone();
    if is_csv(&headers) {
        return crate::batch_csv::create_csv_batch(state, merchant, &headers, request.into_body())
            .await;
    }
    let bytes = read_body(Bytes::from_request(request, &state).await)?;
    let raw = json_lines(&bytes, state.batch_lines_max)?;
    drop(bytes);
    let key = idempotency::collect(&headers, None)?;
    if let Some(k) = &key {
        PayoutKey::parse(k).map_err(|e| idempotency::key_problem(e.to_string()))?;
    }
    let requests = check_lines(&state, raw)?;
    let outcome = state.engine.submit_batch(&merchant, key, requests).await?;
    let (location, replay) = (format!("/v1/payout_batches/{}", outcome.id), outcome.replay);
    Ok(with_replay_header(StatusCode::CREATED, replay, batch_body(outcome), Some(location)))
}

/// Which of a batch's lines to read.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BatchLinesParams {
    /// Read the lines after this line number (the last `line` of the previous page); at most
    /// 1,000,000, the most lines any batch may be allowed.
    #[param(minimum = 0, maximum = 1000000)]
    pub starting_after: Option<u32>,
    /// 1-10000, default 10000 (a JSON batch in one page).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
}

/// A batch with each line's payout status, a page of lines at a time (`starting_after`, `limit`);
/// `counts` are the whole batch's.
#[utoipa::path(get, path = "/v1/payout_batches/{id}", params(("id" = String, Path), BatchLinesParams),
    responses((status = 200, body = BatchStatusBody),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = [])))]
pub async fn get_batch(
    State(state): State<AppState>,
    Merchant(merchant): Merchant,
    Path(id): Path<String>,
    params: Result<Query<BatchLinesParams>, QueryRejection>,
) -> Result<Json<BatchStatusBody>, Problem> {
    let Query(params) = params.map_err(|e| Problem::invalid(e.body_text()))?;
    let line_no_max = payoutd_engine::batches::BATCH_LINES_MAX_ALLOWED;
    if params.starting_after.is_some_and(|after| after as usize > line_no_max) {
        return Err(Problem::invalid(format!(
            "starting_after is a line number: at most {line_no_max}"
        )));
    }
    let id = BatchId::parse(&id).map_err(|_| Problem::not_found())?;
    let page = BatchPage {
        after_line_no: params.starting_after.unwrap_or(0),
        limit: params.limit.unwrap_or(BATCH_PAGE_LINES_DEFAULT),
    };
    let view: BatchView = state.engine.batch(&merchant, &id, page).await?;
    let counts = view
        .counts
        .iter()
        .map(|(status, n)| {
            let status =
                if status == "not_created" { "no_payout".to_owned() } else { status.clone() };
            (status, usize::try_from(*n).unwrap_or(0))
        })
        .collect();
    let lines = view
        .lines
        .iter()
        .map(|l| BatchLineStatus {
            line: l.line_no,
            external_id: l.external_id.as_str().to_owned(),
            payout_id: l.payout.as_ref().map(|p| p.id.to_string()),
            status: l.payout.as_ref().map(|p| p.status.as_str()),
            error: if l.payout.is_some() { None } else { l.error.clone() },
        })
        .collect();
    Ok(Json(BatchStatusBody {
        id: view.id.to_string(),
        object: "payout_batch",
        created_at_ms: view.created_at_ms,
        counts,
        lines,
        has_more: view.has_more,
    }))
}
