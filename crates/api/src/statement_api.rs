//! `GET /v1/statements`: the merchant's statement for a period in one asset (the opening balances, every ledger entry with the balances after it, the closing balances), as JSON or, asked with `Accept: text/csv`, the CSV finance imports.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, http::StatusCode};
use payoutd_engine::statement_text::{account_name, parse_instant, signed_change, statement_csv};
use payoutd_engine::statements::{Balances, Period, Statement, StatementError, statement};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Merchant;
use crate::models::ProblemBody;
use crate::problem::Problem;

/// What the CSV is served as.
const CSV_CONTENT_TYPE: &str = "text/csv; charset=utf-8";

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatementParams {
    /// The asset, as in `/v1/balances`.
    #[param(min_length = 1, max_length = 128)]
    pub asset: String,
    /// Where the period starts: a day (`2026-12-01`, its first instant in UTC) or milliseconds
    /// since the epoch.
    #[param(pattern = "^([0-9]{1,15}|[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))$")]
    pub from: String,
    /// Where it ends (excluded), as `from`; after `from` (else 422 `empty-period`).
    #[param(pattern = "^([0-9]{1,15}|[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))$")]
    pub to: String,
}

/// A merchant's two balances in the asset, in base units.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatementBalances {
    pub available: String,
    pub held: String,
}

/// One ledger entry of the period, with the balances after it.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatementEntryBody {
    pub at_ms: i64,
    pub journal_id: String,
    /// `deposit`, `hold`, `release`, `settle`, `transfer`, `fee`, ...
    pub kind: String,
    /// What the journal is about: a deposit, payout or transfer id.
    pub reference: String,
    /// `available` or `held`.
    pub account: String,
    /// The change in base units: negative for what left the account.
    pub change: String,
    pub after: StatementBalances,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StatementBody {
    pub object: &'static str,
    pub asset: String,
    pub from_ms: i64,
    pub to_ms: i64,
    /// The balances at `from_ms`: every entry before it.
    pub opening: StatementBalances,
    pub entries: Vec<StatementEntryBody>,
    /// The balances at `to_ms`: the opening and every entry of the period.
    pub closing: StatementBalances,
}

fn balances_body(b: &Balances) -> StatementBalances {
    StatementBalances { available: b.available.to_string(), held: b.held.to_string() }
}

impl StatementBody {
    fn of(asset: &str, s: &Statement) -> StatementBody {
        let entries = s
            .lines
            .iter()
            .map(|line| StatementEntryBody {
                at_ms: line.entry.at_ms,
                journal_id: line.entry.journal_id.clone(),
                kind: line.entry.kind.clone(),
                reference: line.entry.reference.clone(),
                account: account_name(line.entry.bucket).to_owned(),
                change: signed_change(line.entry.arrives, line.entry.amount),
                after: balances_body(&line.after),
            })
            .collect();
        StatementBody {
            object: "statement",
            asset: asset.to_owned(),
            from_ms: s.period.from_ms(),
            to_ms: s.period.to_ms(),
            opening: balances_body(&s.opening),
            entries,
            closing: balances_body(&s.closing),
        }
    }
}

/// The merchant's statement for `[from, to)` in one asset; the closing balances of one period are
/// the opening balances of the next. At most 100,000 entries: a longer period is asked in parts.
#[utoipa::path(get, path = "/v1/statements", params(StatementParams),
    responses(
        (status = 200, description = "The statement; `Accept: text/csv` for CSV (cells a spreadsheet would run as a formula are prefixed with `'`)",
            content((StatementBody = "application/json"), (String = "text/csv"))),
        (status = 400, body = ProblemBody, content_type = "application/problem+json"),
        (status = 401, description = "Missing, unknown or revoked key", body = ProblemBody, content_type = "application/problem+json"),
        (status = 422, description = "A period that ends before it starts, or more entries than one statement holds", body = ProblemBody, content_type = "application/problem+json"),
        (status = 503, description = "The database is unavailable; nothing is known to have changed", body = ProblemBody, content_type = "application/problem+json")),
    security(("merchant_key" = [])))]
pub async fn get_statement(
    State(state): State<AppState>,
    Merchant(merchant): Merchant,
    headers: HeaderMap,
    params: Result<Query<StatementParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    let Query(params) = params.map_err(|e| Problem::invalid(e.body_text()))?;
    let asset =
        state.engine.assets().get(&params.asset).map_err(|e| Problem::invalid(e.to_string()))?;
    let instant = |name: &str, text: &str| {
        parse_instant(text).map_err(|e| Problem::invalid(format!("{name}: {e}")))
    };
    let period = Period::new(instant("from", &params.from)?, instant("to", &params.to)?)
        .map_err(statement_problem)?;
    let Some(views) = &state.operator_views else {
        return Err(Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Statements are not served here",
            "this process reads no statements",
        ));
    };
    let statement = statement(views.as_ref(), &merchant, &asset.code, period)
        .await
        .map_err(statement_problem)?;
    if wants_csv(&headers) {
        let mut response = statement_csv(&statement).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(CSV_CONTENT_TYPE));
        return Ok(response);
    }
    Ok(Json(StatementBody::of(asset.code.as_str(), &statement)).into_response())
}

/// Whether the client asked for CSV first: `text/csv` before any JSON in `Accept`.
fn wants_csv(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let csv = accept.find("text/csv");
    let json = accept.find("application/json");
    match (csv, json) {
        (Some(c), Some(j)) => c < j,
        (Some(_), None) => true,
        _ => false,
    }
}

fn statement_problem(e: StatementError) -> Problem {
    match e {
        StatementError::EmptyPeriod { .. } => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "empty-period",
            "The period ends before it starts",
            e.to_string(),
        ),
        StatementError::TooManyLines => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "statement-too-long",
            "The period holds more entries than one statement",
            e.to_string(),
        ),
        StatementError::Unbalanced(detail) => {
            tracing::error!(%detail, "a statement met a ledger that does not add up");
            Problem::internal()
        }
        StatementError::Store(e) => Problem::from(e),
    }
}
