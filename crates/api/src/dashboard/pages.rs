//! The dashboard's pages: each reads what it shows and renders its template; nothing here changes state.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use payoutd_domain::{
    AssetCode, AssetRegistry, Incident, MerchantId, Payout, PayoutId, PayoutKey, PayoutStatus,
    TxRef,
};
use payoutd_engine::operator_view::{OPERATOR_PAGE_MAX, OperatorAction, OperatorPayoutQuery};
use serde::Deserialize;

use super::Dashboard;
use super::money::{Shown, shown_amount};
use super::page::{Failure, age, now_ms, render, when};
use super::session::SignedIn;
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
const WAITING: [PayoutStatus; 5] = [
    PayoutStatus::Requested,
    PayoutStatus::HeldForReview,
    PayoutStatus::Approved,
    PayoutStatus::Processing,
    PayoutStatus::NeedsAttention,
];

pub(super) fn dashboard(state: &AppState) -> Result<&Dashboard, Failure> {
    state.dashboard.as_deref().ok_or(Failure::Disabled)
}

/// A payout as a list row shows it.
pub struct Row {
    pub(super) id: String,
    pub(super) merchant: String,
    pub(super) asset: String,
    pub(super) amount: Shown,
    /// Charged to the merchant beside `amount`; refunded if the payout ends unpaid.
    pub(super) network_fee: Shown,
    pub(super) destination: String,
    pub(super) key: String,
    pub(super) status: String,
    pub(super) created: String,
}

impl Row {
    pub(super) fn of(p: &Payout, assets: &AssetRegistry) -> Row {
        Row {
            id: p.id.to_string(),
            merchant: p.merchant_id.to_string(),
            asset: p.asset.to_string(),
            amount: shown_amount(assets, p.asset.as_str(), p.amount),
            network_fee: shown_amount(assets, p.asset.as_str(), p.network_fee),
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

/// The sign-in page for an address refused for now (429).
pub fn sign_in_throttled(why: &str) -> Response {
    render(StatusCode::TOO_MANY_REQUESTS, &LoginPage { error: Some(why.to_owned()) })
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
    /// What the chart's full height stands for: the busiest minute's payouts.
    chart_peak: u64,
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

impl WalletRow {
    /// A hot wallet with the balances the ledger explains, each in its asset's units.
    fn of(w: &payoutd_engine::WalletSummary, assets: &AssetRegistry) -> WalletRow {
        let balances = if w.balances.is_empty() {
            "not compared yet".to_owned()
        } else {
            let shown = w.balances.iter().map(|(asset, amount)| {
                format!("{} {asset}", shown_amount(assets, asset.as_str(), *amount).units)
            });
            shown.collect::<Vec<_>>().join(", ")
        };
        WalletRow {
            next_nonce: w.next_in_line.map_or_else(|| "no nonces".to_owned(), |n| n.to_string()),
            balances,
            chain: w.chain.clone(),
            address: w.address.clone(),
        }
    }
}

pub async fn overview(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
) -> Result<Response, Failure> {
    let d = state.dashboard.clone().ok_or(Failure::Disabled)?;
    let now = now_ms();
    let reads = d.overview_reads(&state, now).await?;
    let since = reads.since_ms;
    let counts = reads.counts.iter().map(|(s, n)| (s.as_str().to_owned(), *n)).collect();
    let waiting = reads
        .ages
        .iter()
        .map(|a| Waiting {
            status: a.status.as_str().to_owned(),
            count: a.count,
            oldest: a.oldest.to_string(),
            waited: age(now - a.oldest_since_ms),
        })
        .collect();
    let peak = reads.per_minute.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    let bar_width = CHART_WIDTH / CHART_MINUTES;
    let bars = reads
        .per_minute
        .iter()
        .map(|(minute, n)| {
            let height = i64::try_from(*n).unwrap_or(i64::MAX).saturating_mul(CHART_HEIGHT)
                / i64::try_from(peak).unwrap_or(1);
            Bar {
                x: (minute - since) / 60_000 * bar_width,
                y: CHART_HEIGHT - height,
                height,
                label: format!("{n} at {}", when(*minute)),
            }
        })
        .collect();
    let last_hour = reads.per_minute.iter().map(|(_, n)| n).sum();
    let wallets = reads.wallets.iter().map(|w| WalletRow::of(w, state.engine.assets())).collect();
    let page = OverviewPage {
        csrf: session.csrf,
        counts,
        waiting,
        bars,
        chart_width: CHART_WIDTH,
        chart_height: CHART_HEIGHT,
        chart_peak: peak,
        last_hour,
        incidents: reads.incidents.clone(),
        wallets,
        backlog: reads.backlog,
    };
    Ok(render(StatusCode::OK, &page))
}

/// What the overview shows, read at one moment.
pub(super) struct OverviewReads {
    /// The chart's first minute.
    since_ms: i64,
    counts: Vec<(PayoutStatus, u64)>,
    ages: Vec<payoutd_engine::StatusAge>,
    per_minute: Vec<(i64, u64)>,
    incidents: Vec<(String, u64)>,
    wallets: Vec<payoutd_engine::WalletSummary>,
    backlog: Option<u64>,
}

/// Reads everything the overview shows. Independent reads, each a scan of its own index: at
/// once, so the page waits for the slowest.
pub(super) async fn read_overview(
    d: &Dashboard,
    state: &AppState,
    now: i64,
) -> Result<OverviewReads, Failure> {
    let since_ms = (now / 60_000 - CHART_MINUTES + 1) * 60_000;
    let backlog = async {
        match &state.webhooks {
            Some(webhooks) => webhooks.backlog().await.map(Some).map_err(|_| {
                Failure::Unavailable("The database could not be read; try again.".to_owned())
            }),
            None => Ok(None),
        }
    };
    let store_reads = async {
        futures::try_join!(
            d.store.count_payouts_by_status(),
            d.views.status_ages(&WAITING),
            d.views.payouts_per_minute(since_ms),
            d.store.count_open_incidents_by_kind(),
            d.views.hot_wallets(),
        )
        .map_err(Failure::from)
    };
    let ((counts, ages, per_minute, incidents, wallets), backlog) =
        futures::try_join!(store_reads, backlog)?;
    Ok(OverviewReads { since_ms, counts, ages, per_minute, incidents, wallets, backlog })
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
    /// Created on or after this day (YYYY-MM-DD, UTC).
    #[serde(default)]
    from: String,
    /// Created on or before this day (YYYY-MM-DD, UTC).
    #[serde(default)]
    to: String,
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

const DAY_MS: i64 = 86_400_000;

/// `2026-12-01` as the milliseconds of its first instant, UTC.
fn day_start_ms(text: &str) -> Result<i64, String> {
    let refuse = || format!("{text:?} is not a day as YYYY-MM-DD");
    let mut parts = text.splitn(3, '-').map(|p| p.parse::<i32>().map_err(|_| refuse()));
    let (year, month, day) = (
        parts.next().ok_or_else(refuse)??,
        parts.next().ok_or_else(refuse)??,
        parts.next().ok_or_else(refuse)??,
    );
    let month = u8::try_from(month)
        .ok()
        .and_then(|m| cookie::time::Month::try_from(m).ok())
        .ok_or_else(refuse)?;
    let date = cookie::time::Date::from_calendar_date(
        year,
        month,
        u8::try_from(day).map_err(|_| refuse())?,
    )
    .map_err(|_| refuse())?;
    Ok(date.midnight().assume_utc().unix_timestamp() * 1_000)
}

fn query_of(f: &Filters) -> Result<OperatorPayoutQuery, Failure> {
    Ok(OperatorPayoutQuery {
        status: non_empty(&f.status)
            .map(|s| PayoutStatus::parse(s).map_err(|e| bad("status")(e.to_string())))
            .transpose()?,
        merchant: non_empty(&f.merchant)
            .map(|m| MerchantId::parse(m).map_err(|e| bad("merchant")(e.to_string())))
            .transpose()?,
        asset: non_empty(&f.asset)
            .map(|a| {
                AssetCode::parse(a)
                    .map(|(code, _, _)| code)
                    .map_err(|e| bad("asset")(e.to_string()))
            })
            .transpose()?,
        key: non_empty(&f.key)
            .map(|k| PayoutKey::parse(k).map_err(|e| bad("key")(e.to_string())))
            .transpose()?,
        destination: non_empty(&f.destination).map(str::to_owned),
        created_from_ms: non_empty(&f.from)
            .map(|d| day_start_ms(d).map_err(bad("from")))
            .transpose()?,
        created_before_ms: non_empty(&f.to)
            .map(|d| day_start_ms(d).map(|ms| ms + DAY_MS).map_err(bad("to")))
            .transpose()?,
        before: non_empty(&f.before)
            .map(|b| PayoutId::parse(b).map_err(|e| bad("before")(e.to_string())))
            .transpose()?,
        limit: PAYOUTS_PER_PAGE + 1,
    })
}

pub async fn payouts(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Query(filters): Query<Filters>,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    if let Some(q) = non_empty(&filters.q) {
        // A payout id or one of its transactions' references: straight to the payout.
        if let Some(id) = found_by_search(d, q).await? {
            return Ok(axum::response::IntoResponse::into_response(axum::response::Redirect::to(
                &format!("/dashboard/payouts/{id}"),
            )));
        }
    }
    let note = non_empty(&filters.q)
        .map(|q| format!("Nothing has the id or transaction reference {q:?}."));
    let query = query_of(&filters)?;
    // A search that found nothing lists nothing: it is a filter like the others.
    let mut found =
        if note.is_some() { Vec::new() } else { d.views.operator_payouts(&query).await? };
    let next = (found.len() > PAYOUTS_PER_PAGE as usize).then(|| {
        found.truncate(PAYOUTS_PER_PAGE as usize);
        found.last().map(|p| p.id.to_string()).unwrap_or_default()
    });
    let rows = found.iter().map(|p| Row::of(p, state.engine.assets())).collect();
    let statuses = PayoutStatus::ALL.iter().map(|s| s.as_str()).collect();
    Ok(render(
        StatusCode::OK,
        &PayoutsPage { csrf: session.csrf, statuses, filters, rows, next, note },
    ))
}

/// A payout id; our reference at a provider (`<payout id>-<attempt no>`); a transaction hash or
/// signature; or the provider's id of a transfer.
async fn found_by_search(d: &Dashboard, q: &str) -> Result<Option<PayoutId>, Failure> {
    // Our provider reference is the payout id with `-<attempt no>`: the payout id is what is looked up.
    let payout_part = q
        .rsplit_once('-')
        .filter(|(_, no)| !no.is_empty() && no.bytes().all(|b| b.is_ascii_digit()))
        .map_or(q, |(id, _)| id);
    if let Ok(id) = PayoutId::parse(payout_part)
        && d.store.payout_by_id(&id).await?.is_some()
    {
        return Ok(Some(id));
    }
    if let Ok(reference) = TxRef::parse(q)
        && let Some((_, payout)) =
            d.store.tx_owners(std::slice::from_ref(&reference)).await?.into_iter().next()
    {
        return Ok(Some(payout));
    }
    Ok(d.views.payout_by_provider_reference(q).await?)
}

async fn in_status(d: &Dashboard, status: PayoutStatus) -> Result<Vec<Payout>, Failure> {
    let query = OperatorPayoutQuery {
        status: Some(status),
        limit: OPERATOR_PAGE_MAX,
        ..OperatorPayoutQuery::default()
    };
    Ok(d.views.operator_payouts(&query).await?)
}

#[derive(Template)]
#[template(path = "dashboard/review.html")]
struct ReviewPage {
    csrf: String,
    rows: Vec<Row>,
}

pub async fn review(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let held = in_status(d, PayoutStatus::HeldForReview).await?;
    let rows = held.iter().map(|p| Row::of(p, state.engine.assets())).collect();
    Ok(render(StatusCode::OK, &ReviewPage { csrf: session.csrf, rows }))
}

#[derive(Template)]
#[template(path = "dashboard/attention.html")]
struct AttentionPage {
    csrf: String,
    rows: Vec<Row>,
}

pub async fn attention(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let waiting = in_status(d, PayoutStatus::NeedsAttention).await?;
    let rows = waiting.iter().map(|p| Row::of(p, state.engine.assets())).collect();
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

pub async fn incidents(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let rows =
        d.store.open_incidents(INCIDENTS_SHOWN_MAX).await?.iter().map(IncidentRow::of).collect();
    Ok(render(StatusCode::OK, &IncidentsPage { csrf: session.csrf, rows }))
}

#[derive(Template)]
#[template(path = "dashboard/audit.html")]
struct AuditPage {
    csrf: String,
    rows: Vec<(String, OperatorAction)>,
}

pub async fn audit(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let rows = d
        .views
        .operator_actions(AUDIT_SHOWN_MAX)
        .await?
        .into_iter()
        .map(|a| (when(a.at_ms), a))
        .collect();
    Ok(render(StatusCode::OK, &AuditPage { csrf: session.csrf, rows }))
}
