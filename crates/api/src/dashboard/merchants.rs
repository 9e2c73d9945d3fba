//! The merchants page (balances per asset, API keys) and the events page (each delivery with its tries), with their actions: create a key (shown once), revoke one, redispatch an event.

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use payoutd_domain::{ApiKeyId, EndpointOwner, EventId, MerchantId};
use payoutd_engine::operator_view::MERCHANTS_PAGE_MAX;
use payoutd_engine::webhook_store::{DeliveryState, EventQuery};
use serde::Deserialize;

use super::actions::{Confirmed, audit, back_to, checked, form};
use super::money::{Shown, shown_amount};
use super::page::{Failure, render, when};
use super::pages::dashboard;
use super::session::SignedIn;
use crate::AppState;

#[derive(Template)]
#[template(path = "dashboard/batches.html")]
struct BatchesPage {
    csrf: String,
    batches: Vec<(String, String, u64, String, String)>,
    transfers: Vec<(String, String, String, String, Shown, String)>,
}

pub async fn batches(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let shown = payoutd_engine::operator_view::RECENT_SHOWN_MAX;
    let batches = d
        .views
        .recent_batches(shown)
        .await?
        .into_iter()
        .map(|b| {
            (
                b.id,
                b.merchant.to_string(),
                b.lines,
                when(b.created_at_ms),
                b.completed_at_ms.map_or_else(|| "not yet".to_owned(), when),
            )
        })
        .collect();
    let transfers = d
        .views
        .recent_transfers(shown)
        .await?
        .into_iter()
        .map(|t| {
            (
                t.id,
                t.from.to_string(),
                t.to.to_string(),
                t.asset.to_string(),
                shown_amount(state.engine.assets(), t.asset.as_str(), t.amount),
                when(t.created_at_ms),
            )
        })
        .collect();
    Ok(render(StatusCode::OK, &BatchesPage { csrf: session.csrf, batches, transfers }))
}

/// Events a page shows (each with its deliveries, read one query per event).
const EVENTS_PER_PAGE: u32 = 25;

/// The webhook use cases, when this process delivers webhooks.
fn webhooks(state: &AppState) -> Result<&payoutd_engine::Webhooks, Failure> {
    state
        .webhooks
        .as_ref()
        .ok_or_else(|| Failure::Unavailable("webhooks are not set up in this process".to_owned()))
}

struct MerchantView {
    id: String,
    name: String,
    created: String,
    balances: Vec<(String, Shown, Shown)>,
    keys: Vec<(String, String, String)>,
}

#[derive(Template)]
#[template(path = "dashboard/merchants.html")]
struct MerchantsPage {
    csrf: String,
    merchants: Vec<MerchantView>,
}

pub async fn merchants(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let mut views = Vec::new();
    for m in d.views.merchants(MERCHANTS_PAGE_MAX).await? {
        let balances = state.engine.balances(&m.id).await.map_err(intake_failure)?;
        let keys = state.engine.api_keys(&m.id).await.map_err(intake_failure)?;
        views.push(MerchantView {
            id: m.id.to_string(),
            name: m.name,
            created: when(m.created_at_ms),
            balances: balances
                .iter()
                .map(|b| {
                    let show =
                        |amount| shown_amount(state.engine.assets(), b.asset.as_str(), amount);
                    (b.asset.to_string(), show(b.available), show(b.held))
                })
                .collect(),
            keys: keys
                .iter()
                .map(|k| {
                    (
                        k.id.to_string(),
                        when(k.created_at_ms),
                        k.revoked_at_ms.map(when).unwrap_or_default(),
                    )
                })
                .collect(),
        });
    }
    Ok(render(StatusCode::OK, &MerchantsPage { csrf: session.csrf, merchants: views }))
}

fn intake_failure(e: payoutd_engine::IntakeError) -> Failure {
    match e {
        payoutd_engine::IntakeError::Store(e) => e.into(),
        payoutd_engine::IntakeError::NotFound => Failure::NotFound,
        other => Failure::Conflict(other.to_string()),
    }
}

#[derive(Template)]
#[template(path = "dashboard/new_key.html")]
struct NewKeyPage {
    csrf: String,
    merchant: String,
    key: String,
}

pub async fn create_key(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Path(id): Path<String>,
    f: Result<Form<Confirmed>, FormRejection>,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let f = form(f)?;
    checked(&session, &f.csrf, &f.confirm)?;
    let merchant = MerchantId::parse(&id).map_err(|_| Failure::NotFound)?;
    let mut random = [0u8; payoutd_domain::secret::API_KEY_RANDOM_BYTES];
    getrandom::fill(&mut random)
        .map_err(|e| Failure::Unavailable(format!("no randomness for a key: {e}")))?;
    let (key_id, key) =
        state.engine.create_api_key(&merchant, random).await.map_err(intake_failure)?;
    audit(d, &session.actor, "create_api_key", merchant.as_str(), format!("key {key_id}")).await?;
    // The key itself is shown this once and stored nowhere but as its hash.
    Ok(render(
        StatusCode::OK,
        &NewKeyPage {
            csrf: session.csrf,
            merchant: merchant.to_string(),
            key: key.expose().to_owned(),
        },
    ))
}

pub async fn revoke_key(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Path(id): Path<String>,
    f: Result<Form<Confirmed>, FormRejection>,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let f = form(f)?;
    checked(&session, &f.csrf, &f.confirm)?;
    let key = ApiKeyId::parse(&id).map_err(|_| Failure::NotFound)?;
    state.engine.revoke_api_key(&key).await.map_err(intake_failure)?;
    audit(d, &session.actor, "revoke_api_key", key.as_str(), String::new()).await?;
    Ok(back_to("/dashboard/merchants"))
}

#[derive(Debug, Default, Deserialize)]
pub struct EventFilters {
    /// Whose events: a merchant id, or empty for the operator's own.
    #[serde(default)]
    merchant: String,
    #[serde(default)]
    after: String,
}

struct EventView {
    id: String,
    event_type: String,
    entity: String,
    created: String,
    deliveries: Vec<DeliveryView>,
}

struct DeliveryView {
    endpoint: String,
    state: String,
    tries: Vec<String>,
}

#[derive(Template)]
#[template(path = "dashboard/events.html")]
struct EventsPage {
    csrf: String,
    merchant: String,
    merchants: Vec<String>,
    events: Vec<EventView>,
    next: Option<String>,
}

fn owner_of(merchant: &str) -> Result<EndpointOwner, Failure> {
    match merchant.trim() {
        "" => Ok(EndpointOwner::Operator),
        id => MerchantId::parse(id)
            .map(EndpointOwner::Merchant)
            .map_err(|e| Failure::BadRequest(format!("merchant: {e}"))),
    }
}

fn webhook_failure(e: payoutd_engine::WebhookError) -> Failure {
    match e {
        payoutd_engine::WebhookError::Store(e) => e.into(),
        payoutd_engine::WebhookError::NotFound => Failure::NotFound,
        other => Failure::Conflict(other.to_string()),
    }
}

pub async fn events(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Query(filters): Query<EventFilters>,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let webhooks = webhooks(&state)?;
    let owner = owner_of(&filters.merchant)?;
    let after = match filters.after.trim() {
        "" => None,
        id => Some(EventId::parse(id).map_err(|e| Failure::BadRequest(format!("after: {e}")))?),
    };
    let page = webhooks
        .events(&EventQuery {
            owner: owner.clone(),
            event_type: None,
            after,
            limit: EVENTS_PER_PAGE,
        })
        .await
        .map_err(webhook_failure)?;
    let mut events = Vec::new();
    for e in &page.events {
        let deliveries = webhooks.deliveries(&owner, &e.id).await.map_err(webhook_failure)?;
        events.push(EventView {
            id: e.id.to_string(),
            event_type: e.event_type.as_str().to_owned(),
            entity: e.entity_id.clone(),
            created: when(e.created_at_ms),
            deliveries: deliveries.iter().map(delivery_view).collect(),
        });
    }
    let next = page.has_more.then(|| events.last().map(|e| e.id.clone())).flatten();
    let merchants = d
        .views
        .merchants(MERCHANTS_PAGE_MAX)
        .await?
        .into_iter()
        .map(|m| m.id.to_string())
        .collect();
    Ok(render(
        StatusCode::OK,
        &EventsPage { csrf: session.csrf, merchant: filters.merchant, merchants, events, next },
    ))
}

#[derive(Deserialize)]
pub struct RedispatchForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirm: String,
    #[serde(default)]
    merchant: String,
}

pub async fn redispatch(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Path(id): Path<String>,
    f: Result<Form<RedispatchForm>, FormRejection>,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let f = form(f)?;
    checked(&session, &f.csrf, &f.confirm)?;
    let webhooks = webhooks(&state)?;
    let owner = owner_of(&f.merchant)?;
    let event = EventId::parse(&id).map_err(|_| Failure::NotFound)?;
    let queued = webhooks.redispatch(&owner, &event).await.map_err(webhook_failure)?;
    audit(
        d,
        &session.actor,
        "redispatch",
        event.as_str(),
        format!("{queued} deliveries queued again"),
    )
    .await?;
    Ok(back_to(&format!("/dashboard/events?merchant={}", f.merchant.trim())))
}

/// One delivery of an event as the events page shows it, every try on its own line.
fn delivery_view(dl: &payoutd_engine::webhook_store::Delivery) -> DeliveryView {
    let state = match dl.state {
        DeliveryState::Delivered => "delivered".to_owned(),
        DeliveryState::Pending => format!("pending, next try {}", when(dl.next_try_at_ms)),
        DeliveryState::Abandoned => "abandoned (redispatch to try again)".to_owned(),
    };
    let tries = dl
        .tries
        .iter()
        .map(|t| {
            let answer = t
                .status_code
                .map_or_else(|| t.error.clone().unwrap_or_default(), |c| c.to_string());
            let at = when(t.at_ms);
            format!("round {} try {} at {at}: {answer} ({} ms)", t.round, t.try_no, t.latency_ms)
        })
        .collect();
    DeliveryView { endpoint: dl.endpoint_id.to_string(), state, tries }
}
