//! The dashboard's pages: each reads what it shows and renders its template; nothing here changes state.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use payoutd_domain::{AssetCode, Attempt, Incident, MerchantId, Payout, PayoutId, PayoutKey, PayoutStatus, TxRef};
use payoutd_engine::operator_view::{OPERATOR_PAGE_MAX, OperatorAction, OperatorPayoutQuery};
use serde::Deserialize;

use super::page::{Failure, age, now_ms, render, when};
use super::session::SignedIn;
use super::Dashboard;
use crate::AppState;

/// Payouts on one page of a list.
const PAYOUTS_PER_PAGE: u32 = 50;
/// The overview's chart: the last hour, one bar per minute.
const CHART_MINUTES: i64 = 60;
const CHART_WIDTH: i64 = 600;
const CHART_HEIGHT: i64 = 120;
/// Incidents and audit entries a page shows at most.
const INCIDENTS_SHOWN_MAX: u32 = 200;
const AUDIT_SHOWN_MAX: u32 = 200;
/// Statuses whose payouts still wait for something.
const WAITING: [PayoutStatus; 5] =
    [PayoutStatus::Requested, PayoutStatus::HeldForReview, PayoutStatus::Approved, PayoutStatus::Processing, PayoutStatus::NeedsAttention];

fn dashboard(state: &AppState) -> Result<&Dashboard, Failure> {
    state.dashboard.as_deref().ok_or(Failure::Disabled)
}

/// A payout as a list row shows it.
pub struct Row {
    id: String,
    merchant: String,
    asset: String,
    amount: String,
    destination: String,
    key: String,
    status: String,
    created: String,
}

impl Row {
    fn of(p: &Payout) -> Row {
        Row {
            id: p.id.to_string(),
            merchant: p.merchant_id.to_string(),
            asset: p.asset.to_string(),
            amount: p.amount.to_string(),
            destination: p.destination.to_string(),
            key: p.key.as_str().to_owned(),
            status: p.status.as_str().to_owned(),
            created: when(p.created_at_ms),
        }
    }
}

#[derive(Template)]
#[template(path = "dashboard/login.html")]
struct LoginPage {
    error: Option<String>,
}

pub async fn login(State(state): State<AppState>) -> Response {
    if state.dashboard.is_none() {
        return axum::response::IntoResponse::into_response(Failure::Disabled);
    }
    render(StatusCode::OK, &LoginPage { error: None })
}

pub fn login_failed(why: &str) -> Response {
    render(StatusCode::UNAUTHORIZED, &LoginPage { error: Some(why.to_owned()) })
}

struct Bar {
    x: i64,
    y: i64,
    height: i64,
    label: String,
}

struct Waiting {
    status: String,
    count: u64,
    oldest: String,
    waited: String,
}

#[derive(Template)]
#[template(path = "dashboard/overview.html")]
struct OverviewPage {
    csrf: String,
    counts: Vec<(String, u64)>,
    waiting: Vec<Waiting>,
    bars: Vec<Bar>,
    chart_width: i64,
    chart_height: i64,
    last_hour: u64,
    incidents: Vec<(String, u64)>,
    wallets: Vec<WalletRow>,
    backlog: Option<u64>,
}

struct WalletRow {
    chain: String,
    address: String,
    next_nonce: String,
    balances: String,
}

pub async fn overview(State(state): State<AppState>, SignedIn(session): SignedIn) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let now = now_ms();
    let since = (now / 60_000 - CHART_MINUTES + 1) * 60_000;
    // Independent reads, each a scan of its own index: at once, so the page waits for the slowest.
    let (counts, ages, per_minute, incidents) = futures::try_join!(
        d.store.count_payouts_by_status(),
        d.views.status_ages(&WAITING),
        d.views.payouts_per_minute(since),
        d.store.count_open_incidents_by_kind(),
    )?;
    let counts = counts.into_iter().map(|(s, n)| (s.as_str().to_owned(), n)).collect();
    let waiting = ages
        .into_iter()
        .map(|a| Waiting { status: a.status.as_str().to_owned(), count: a.count, oldest: a.oldest.to_string(), waited: age(now - a.oldest_since_ms) })
        .collect();
    let peak = per_minute.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    let bar_width = CHART_WIDTH / CHART_MINUTES;
    let bars = per_minute
        .iter()
        .map(|(minute, n)| {
            let height = i64::try_from(*n).unwrap_or(i64::MAX).saturating_mul(CHART_HEIGHT) / i64::try_from(peak).unwrap_or(1);
            Bar { x: (minute - since) / 60_000 * bar_width, y: CHART_HEIGHT - height, height, label: format!("{n} at {}", when(*minute)) }
        })
        .collect();
    let last_hour = per_minute.iter().map(|(_, n)| n).sum();
    let wallets = d
        .views
        .hot_wallets()
        .await?
        .into_iter()
        .map(|w| WalletRow {
            next_nonce: if w.chain.starts_with("evm:") { w.next_nonce.to_string() } else { "no nonces".to_owned() },
            balances: if w.balances.is_empty() {
                "not compared yet".to_owned()
            } else {
                w.balances.iter().map(|(asset, amount)| format!("{amount} {asset}")).collect::<Vec<_>>().join(", ")
            },
            chain: w.chain,
            address: w.address,
        })
        .collect();
    let backlog = match &state.webhooks {
        Some(webhooks) => Some(webhooks.backlog().await.map_err(|_| Failure::Unavailable("The database could not be read; try again.".to_owned()))?),
        None => None,
    };
    Ok(render(
        StatusCode::OK,
        &OverviewPage { csrf: session.csrf, counts, waiting, bars, chart_width: CHART_WIDTH, chart_height: CHART_HEIGHT, last_hour, incidents, wallets, backlog },
    ))
}

/// The payouts page's filters, as the form sends them (empty fields mean no filter).
#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    #[serde(default)]
    status: String,
    #[serde(default)]
    merchant: String,
    #[serde(default)]
    asset: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    destination: String,
    /// A payout id or a transaction hash / provider reference.
    #[serde(default)]
    q: String,
    #[serde(default)]
    before: String,
}

#[derive(Template)]
#[template(path = "dashboard/payouts.html")]
struct PayoutsPage {
    csrf: String,
    statuses: Vec<&'static str>,
    filters: Filters,
    rows: Vec<Row>,
    next: Option<String>,
    note: Option<String>,
}

fn non_empty(text: &str) -> Option<&str> {
    Some(text.trim()).filter(|t| !t.is_empty())
}

fn bad(field: &str) -> impl Fn(String) -> Failure + '_ {
    move |why| Failure::BadRequest(format!("{field}: {why}"))
}

fn query_of(f: &Filters) -> Result<OperatorPayoutQuery, Failure> {
    Ok(OperatorPayoutQuery {
        status: non_empty(&f.status).map(|s| PayoutStatus::parse(s).map_err(|e| bad("status")(e.to_string()))).transpose()?,
        merchant: non_empty(&f.merchant).map(|m| MerchantId::parse(m).map_err(|e| bad("merchant")(e.to_string()))).transpose()?,
        asset: non_empty(&f.asset).map(|a| AssetCode::parse(a).map(|(code, _, _)| code).map_err(|e| bad("asset")(e.to_string()))).transpose()?,
        key: non_empty(&f.key).map(|k| PayoutKey::parse(k).map_err(|e| bad("key")(e.to_string()))).transpose()?,
        destination: non_empty(&f.destination).map(str::to_owned),
        created_from_ms: None,
        before: non_empty(&f.before).map(|b| PayoutId::parse(b).map_err(|e| bad("before")(e.to_string()))).transpose()?,
        limit: PAYOUTS_PER_PAGE + 1,
    })
}

pub async fn payouts(State(state): State<AppState>, SignedIn(session): SignedIn, Query(filters): Query<Filters>) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    if let Some(q) = non_empty(&filters.q) {
        // A payout id or one of its transactions' references: straight to the payout.
        if let Some(id) = found_by_search(d, q).await? {
            return Ok(axum::response::IntoResponse::into_response(axum::response::Redirect::to(&format!("/dashboard/payouts/{id}"))));
        }
    }
    let note = non_empty(&filters.q).map(|q| format!("Nothing has the id or transaction reference {q:?}."));
    let query = query_of(&filters)?;
    // A search that found nothing lists nothing: it is a filter like the others.
    let mut found = if note.is_some() { Vec::new() } else { d.views.operator_payouts(&query).await? };
    let next = (found.len() > PAYOUTS_PER_PAGE as usize).then(|| {
        found.truncate(PAYOUTS_PER_PAGE as usize);
        found.last().map(|p| p.id.to_string()).unwrap_or_default()
    });
    let rows = found.iter().map(Row::of).collect();
    let statuses = PayoutStatus::ALL.iter().map(|s| s.as_str()).collect();
    Ok(render(StatusCode::OK, &PayoutsPage { csrf: session.csrf, statuses, filters, rows, next, note }))
}

async fn found_by_search(d: &Dashboard, q: &str) -> Result<Option<PayoutId>, Failure> {
    if let Ok(id) = PayoutId::parse(q)
        && d.store.payout_by_id(&id).await?.is_some()
    {
        return Ok(Some(id));
    }
    let Ok(reference) = TxRef::parse(q) else { return Ok(None) };
    let owners = d.store.tx_owners(std::slice::from_ref(&reference)).await?;
    Ok(owners.into_iter().next().map(|(_, payout)| payout))
}

struct AttemptRow {
    no: u32,
    status: String,
    rail: String,
    slot: String,
    txs: Vec<(String, String, String)>,
    mined: String,
}

impl AttemptRow {
    fn of(a: &Attempt) -> AttemptRow {
        let slot = match &a.slot {
            payoutd_domain::AttemptSlot::Evm(s) => format!("wallet {} nonce {}", s.wallet_id, s.nonce),
            payoutd_domain::AttemptSlot::Solana { fee_payer, expiry } => format!("fee payer {fee_payer}, {expiry:?}"),
            payoutd_domain::AttemptSlot::Provider { provider, idempotency_key, reference } => {
                format!("{provider} key {idempotency_key}, reference {}", reference.as_ref().map_or("none yet", |r| r.as_str()))
            }
        };
        AttemptRow {
            no: a.attempt_no,
            status: a.status.as_str().to_owned(),
            rail: a.slot.rail().to_owned(),
            slot,
            txs: a.txs.iter().map(|t| (format!("{:?}", t.kind).to_lowercase(), t.hash.to_string(), when(t.created_at_ms))).collect(),
            mined: a.mined.as_ref().map_or_else(String::new, |(block, hash)| format!("{hash} in block {block}")),
        }
    }
}

#[derive(Template)]
#[template(path = "dashboard/payout.html")]
struct PayoutPage {
    csrf: String,
    row: Row,
    metadata: String,
    attempts: Vec<AttemptRow>,
    timeline: Vec<(String, String)>,
}

/// What happened to the payout, oldest first: created, each attempt and each transaction, where it
/// landed, and where the payout stands.
fn timeline(p: &Payout, attempts: &[Attempt]) -> Vec<(String, String)> {
    let mut events: Vec<(i64, String)> = vec![(p.created_at_ms, "created".to_owned())];
    for a in attempts {
        events.push((a.created_at_ms, format!("attempt {} signed ({})", a.attempt_no, a.slot.rail())));
        for t in &a.txs {
            events.push((t.created_at_ms, format!("{:?} {} stored", t.kind, t.hash).to_lowercase()));
        }
        if let Some((block, hash)) = &a.mined {
            events.push((a.updated_at_ms, format!("{hash} mined in block {block}")));
        }
        if !a.status.is_live() {
            events.push((a.updated_at_ms, format!("attempt {} {}", a.attempt_no, a.status.as_str())));
        }
    }
    events.push((p.updated_at_ms, format!("now {}", p.status.as_str())));
    events.sort_by_key(|(at, _)| *at);
    events.into_iter().map(|(at, what)| (when(at), what)).collect()
}

pub async fn payout(State(state): State<AppState>, SignedIn(session): SignedIn, Path(id): Path<String>) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let id = PayoutId::parse(&id).map_err(|_| Failure::NotFound)?;
    let p = d.store.payout_by_id(&id).await?.ok_or(Failure::NotFound)?;
    let attempts = d.store.attempts_of(&id).await?;
    let metadata = p.metadata.as_json().to_owned();
    Ok(render(StatusCode::OK, &PayoutPage { csrf: session.csrf, row: Row::of(&p), metadata, timeline: timeline(&p, &attempts), attempts: attempts.iter().map(AttemptRow::of).collect() }))
}

async fn in_status(d: &Dashboard, status: PayoutStatus) -> Result<Vec<Payout>, Failure> {
    let query = OperatorPayoutQuery { status: Some(status), limit: OPERATOR_PAGE_MAX, ..OperatorPayoutQuery::default() };
    Ok(d.views.operator_payouts(&query).await?)
}

#[derive(Template)]
#[template(path = "dashboard/review.html")]
struct ReviewPage {
    csrf: String,
    rows: Vec<Row>,
}

pub async fn review(State(state): State<AppState>, SignedIn(session): SignedIn) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let rows = in_status(d, PayoutStatus::HeldForReview).await?.iter().map(Row::of).collect();
    Ok(render(StatusCode::OK, &ReviewPage { csrf: session.csrf, rows }))
}

#[derive(Template)]
#[template(path = "dashboard/attention.html")]
struct AttentionPage {
    csrf: String,
    rows: Vec<Row>,
}

pub async fn attention(State(state): State<AppState>, SignedIn(session): SignedIn) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let rows = in_status(d, PayoutStatus::NeedsAttention).await?.iter().map(Row::of).collect();
    Ok(render(StatusCode::OK, &AttentionPage { csrf: session.csrf, rows }))
}

struct IncidentRow {
    id: String,
    kind: String,
    payout: String,
    opened: String,
    detail: String,
}

impl IncidentRow {
    fn of(i: &Incident) -> IncidentRow {
        IncidentRow {
            id: i.id.to_string(),
            kind: i.kind.as_str().to_owned(),
            payout: i.payout_id.as_ref().map(ToString::to_string).unwrap_or_default(),
            opened: when(i.created_at_ms),
            detail: i.detail.clone(),
        }
    }
}

#[derive(Template)]
#[template(path = "dashboard/incidents.html")]
struct IncidentsPage {
    csrf: String,
    rows: Vec<IncidentRow>,
}

pub async fn incidents(State(state): State<AppState>, SignedIn(session): SignedIn) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let rows = d.store.open_incidents(INCIDENTS_SHOWN_MAX).await?.iter().map(IncidentRow::of).collect();
    Ok(render(StatusCode::OK, &IncidentsPage { csrf: session.csrf, rows }))
}

#[derive(Template)]
#[template(path = "dashboard/audit.html")]
struct AuditPage {
    csrf: String,
    rows: Vec<(String, OperatorAction)>,
}

pub async fn audit(State(state): State<AppState>, SignedIn(session): SignedIn) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let rows = d.views.operator_actions(AUDIT_SHOWN_MAX).await?.into_iter().map(|a| (when(a.at_ms), a)).collect();
    Ok(render(StatusCode::OK, &AuditPage { csrf: session.csrf, rows }))
}
