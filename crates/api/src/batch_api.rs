//! Payout batches over HTTP: JSON lines or a CSV upload, refused whole when any line is bad,
//! otherwise one result per line; and the batch read back with each line's status.

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use payoutd_domain::{Amount, BatchId, PayoutKey, PayoutRequest};
use payoutd_engine::batches::BatchOutcome;
use payoutd_engine::store::BatchView;
use serde::{Deserialize, Serialize};
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
    #[schema(value_type = Object)]
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
    /// Lines by status (`no_payout` for lines without one).
    #[schema(value_type = Object)]
    pub counts: HashMap<&'static str, usize>,
    pub lines: Vec<BatchLineStatus>,
}

/// One line as it arrived, before any check.
struct RawLine {
    external_id: String,
    asset: String,
    amount: serde_json::Value,
    destination: String,
    metadata: Option<serde_json::Value>,
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

/// Parses the CSV form record by record; a record that is not four fields is a bad line.
fn csv_lines(bytes: &[u8], lines_max: usize) -> Result<Vec<Result<RawLine, String>>, Problem> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(bytes);
    let header = reader.headers().map_err(|e| Problem::invalid(format!("CSV header: {e}")))?;
    if header.iter().collect::<Vec<_>>() != CSV_HEADER {
        return Err(Problem::invalid(format!(
            "the CSV header must be exactly `{}`",
            CSV_HEADER.join(",")
        )));
    }
    let mut lines = Vec::new();
    for record in reader.records() {
        if lines.len() == lines_max {
            return Err(too_many(lines_max));
        }
        lines.push(match record {
            Ok(r) if r.len() == CSV_HEADER.len() => Ok(RawLine {
                external_id: r[0].to_owned(),
                asset: r[1].to_owned(),
                amount: serde_json::Value::String(r[2].to_owned()),
                destination: r[3].to_owned(),
                metadata: None,
            }),
            Ok(r) => Err(format!("expected {} fields, found {}", CSV_HEADER.len(), r.len())),
            Err(e) => Err(format!("not CSV: {e}")),
        });
    }
    Ok(lines)
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

fn too_many(lines_max: usize) -> Problem {
    Problem::invalid(format!("a batch holds at most {lines_max} lines"))
        .with_slug("batch-too-large")
}

/// The line as a payout request, or why not.
fn request(state: &AppState, line: RawLine) -> Result<PayoutRequest, String> {
    let key = PayoutKey::parse(&line.external_id).map_err(|e| format!("external_id: {e}"))?;
    let asset = state.engine.assets().get(&line.asset).map_err(|e| e.to_string())?.clone();
    let amount = amount_text(&line.amount).map_err(|p| p.detail)?;
    let amount = Amount::parse_positive(amount).map_err(|e| format!("amount: {e}"))?;
    let destination =
        asset.parse_destination(&line.destination).map_err(|e| format!("destination: {e}"))?;
    let metadata = metadata(line.metadata).map_err(|p| p.detail)?;
    Ok(PayoutRequest::new(key, asset.code.clone(), amount, destination, metadata))
}

/// Every line checked; the requests if all are good, else every bad line (with its number).
fn check_lines(
    state: &AppState,
    raw: Vec<Result<RawLine, String>>,
) -> Result<Vec<PayoutRequest>, Problem> {
    let mut requests = Vec::with_capacity(raw.len());
    let mut bad: Vec<serde_json::Value> = Vec::new();
    let mut bad_count = 0usize;
    let mut first_line_of: HashMap<String, usize> = HashMap::with_capacity(raw.len());
    for (i, line) in raw.into_iter().enumerate() {
        let n = i + 1;
        let external_id = line.as_ref().map(|l| l.external_id.clone()).unwrap_or_default();
        let checked = line.and_then(|l| {
            if let Some(first) = first_line_of.get(&l.external_id) {
                return Err(format!("external_id repeats line {first}"));
            }
            first_line_of.insert(l.external_id.clone(), n);
            request(state, l)
        });
        match checked {
            Ok(r) => requests.push(r),
            Err(detail) => {
                bad_count += 1;
                if bad.len() < BAD_LINES_LISTED_MAX {
                    bad.push(serde_json::json!({"line": n, "external_id": external_id, "detail": detail}));
                }
            }
        }
    }
    if bad_count > 0 {
        return Err(Problem::invalid(format!(
            "{bad_count} lines are invalid; nothing was created"
        ))
        .with_slug("invalid-batch")
        .with_errors(bad));
    }
    if requests.is_empty() {
        return Err(Problem::invalid("a batch needs at least one line"));
    }
    Ok(requests)
}

fn batch_body(outcome: BatchOutcome) -> BatchBody {
    let mut body = BatchBody {
        id: outcome.id.to_string(),
        object: "payout_batch",
        created: 0,
        existing: 0,
        failed: 0,
        lines: Vec::new(),
    };
    for (i, line) in outcome.lines.into_iter().enumerate() {
        let (payout, error) = match line.result {
            Ok((p, replay)) => {
                match replay {
                    payoutd_engine::Replay::Created => body.created += 1,
                    payoutd_engine::Replay::Replayed => body.existing += 1,
                }
                (Some(PayoutBody::from_domain(&p)), None)
            }
            Err(e) => {
                body.failed += 1;
                (None, Some(Problem::from(e).to_json()))
            }
        };
        body.lines.push(BatchLineResult {
            line: i + 1,
            external_id: line.external_id.as_str().to_owned(),
            payout,
            error,
        });
    }
    body
}

/// Submit a batch of payouts: every line is checked first (any bad line refuses the whole batch,
/// with every bad line listed); then each line is a payout keyed by its external_id.
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
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let bytes = read_body(body)?;
    let raw = if is_csv(&headers) {
        csv_lines(&bytes, state.batch_lines_max)?
    } else {
        json_lines(&bytes, state.batch_lines_max)?
    };
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

/// A batch with each line's payout status.
#[utoipa::path(get, path = "/v1/payout_batches/{id}", params(("id" = String, Path)),
    responses((status = 200, body = BatchStatusBody), (status = 401, body = ProblemBody, content_type = "application/problem+json"),
        (status = 404, body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = [])))]
pub async fn get_batch(
    State(state): State<AppState>,
    Merchant(merchant): Merchant,
    Path(id): Path<String>,
) -> Result<Json<BatchStatusBody>, Problem> {
    let id = BatchId::parse(&id).map_err(|_| Problem::not_found())?;
    let view: BatchView = state.engine.batch(&merchant, &id).await?;
    let mut counts: HashMap<&'static str, usize> = HashMap::new();
    let lines = view
        .lines
        .iter()
        .map(|l| {
            let status = l.payout.as_ref().map(|p| p.status.as_str());
            *counts.entry(status.unwrap_or("no_payout")).or_default() += 1;
            BatchLineStatus {
                line: l.line_no,
                external_id: l.external_id.as_str().to_owned(),
                payout_id: l.payout.as_ref().map(|p| p.id.to_string()),
                status,
                error: if l.payout.is_some() { None } else { l.error.clone() },
            }
        })
        .collect();
    Ok(Json(BatchStatusBody {
        id: view.id.to_string(),
        object: "payout_batch",
        created_at_ms: view.created_at_ms,
        counts,
        lines,
    }))
}

#[cfg(test)]
mod parser_properties {
    use proptest::prelude::*;

    use super::{CSV_HEADER, csv_lines, json_lines};

    /// Lines a batch may hold in these properties: small, so that the limit is crossed often.
    const LINES_MAX: usize = 8;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any body: no panic, and never more lines than the limit; a line is four fields or an error.
        #[test]
        fn a_csv_batch_never_panics_and_holds_at_most_its_limit(body in proptest::collection::vec(any::<u8>(), 0..600), rows in proptest::collection::vec("[ -~]{0,40}", 0..12)) {
            for bytes in [body.clone(), format!("{}\n{}", CSV_HEADER.join(","), rows.join("\n")).into_bytes()] {
                if let Ok(lines) = csv_lines(&bytes, LINES_MAX) {
                    prop_assert!(lines.len() <= LINES_MAX);
                }
            }
        }

        /// Any body: no panic, and never more lines than the limit.
        #[test]
        fn a_json_batch_never_panics_and_holds_at_most_its_limit(body in "\\PC{0,300}", n in 0usize..12) {
            let lines: Vec<String> = (0..n).map(|i| format!(r#"{{"external_id":"line-{i:04}","asset":"a","amount":"1","destination":"d"}}"#)).collect();
            for text in [body.clone(), format!(r#"{{"payouts":[{}]}}"#, lines.join(","))] {
                if let Ok(lines) = json_lines(text.as_bytes(), LINES_MAX) {
                    prop_assert!(lines.len() <= LINES_MAX);
                }
            }
        }
    }
}
