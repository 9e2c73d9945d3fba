//! The dashboard's actions: each checks the session, its CSRF token and the operator's confirmation, then runs the use case and writes the audit log.

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use payoutd_domain::{ApiKey, IncidentId, Payout, PayoutId};
use payoutd_engine::{OperatorAction, Pipeline, PipelineError, Verdict};
use serde::Deserialize;

use super::Dashboard;
use super::page::{Failure, now_ms, secured};
use super::pages::{dashboard, login_failed, sign_in_throttled};
use super::session::{Session, SignedIn, set_cookie};
use crate::AppState;
use crate::client::Client;

/// Evidence and resolutions are limited like the API's.
const DECISION_TEXT_CHARS_MAX: usize = 2_000;
/// Operator keys longer than this are not even hashed.
const OPERATOR_KEY_CHARS_MAX: usize = 512;

#[derive(Deserialize)]
pub struct SignInForm {
    operator_key: String,
}

/// The fields every action form carries.
#[derive(Deserialize)]
pub struct Confirmed {
    #[serde(default)]
    pub csrf: String,
    #[serde(default)]
    pub confirm: String,
}

#[derive(Deserialize)]
pub struct ResolveForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirm: String,
    #[serde(default)]
    verdict: String,
    #[serde(default)]
    evidence: String,
}

#[derive(Deserialize)]
pub struct ResolveIncidentForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirm: String,
    #[serde(default)]
    resolution: String,
}

pub(super) fn form<T>(form: Result<Form<T>, FormRejection>) -> Result<T, Failure> {
    form.map(|Form(f)| f)
        .map_err(|e| Failure::BadRequest(format!("the form could not be read ({e})")))
}

/// The session's own form, confirmed by the operator.
pub(super) fn checked(session: &Session, csrf: &str, confirm: &str) -> Result<(), Failure> {
    if !session.csrf_matches(csrf) {
        return Err(Failure::Forbidden);
    }
    if confirm != "yes" {
        return Err(Failure::BadRequest("tick Confirm to do this".to_owned()));
    }
    Ok(())
}

pub(super) async fn audit(
    d: &Dashboard,
    actor: &str,
    action: &str,
    subject: &str,
    detail: String,
) -> Result<(), Failure> {
    let entry = OperatorAction {
        at_ms: now_ms(),
        actor: actor.to_owned(),
        action: action.to_owned(),
        subject: subject.to_owned(),
        detail,
    };
    d.views.record_operator_action(&entry).await?;
    // Every action is audited after it took effect: the next overview shows it.
    d.forget_overview().await;
    Ok(())
}

pub(super) fn back_to(path: &str) -> Response {
    secured(Redirect::to(path).into_response())
}

fn pipeline_failure(e: PipelineError) -> Failure {
    match e {
        PipelineError::Store(e) => e.into(),
        other => Failure::Conflict(other.to_string()),
    }
}

pub async fn sign_in(
    State(state): State<AppState>,
    client: Client,
    f: Result<Form<SignInForm>, FormRejection>,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let expected = state.operator_key_hash.as_ref().ok_or(Failure::Disabled)?;
    let f = form(f)?;
    let now = now_ms();
    if let Some(until) = d.sign_ins.refused_until(client.address, now) {
        tracing::warn!(client = %client.shown(), "dashboard sign-in refused: too many failed sign-ins from this address");
        let minutes = (until - now + 59_999) / 60_000;
        return Ok(secured(sign_in_throttled(&format!(
            "Too many failed sign-ins from this address: try again in {minutes} min."
        ))));
    }
    if f.operator_key.len() > OPERATOR_KEY_CHARS_MAX
        || !crate::auth::key_hash_eq(&ApiKey::presented(&f.operator_key).hash(), expected)
    {
        d.sign_ins.failed(client.address, now);
        tracing::warn!(client = %client.shown(), "dashboard sign-in refused: wrong operator key");
        return Ok(secured(login_failed("That is not the operator key.")));
    }
    d.sign_ins.succeeded(client.address);
    let (token, session) = d.sessions.open(now).map_err(|e| Failure::Unavailable(e.to_string()))?;
    tracing::info!(client = %client.shown(), actor = %session.actor, "dashboard sign-in");
    audit(d, &session.actor, "sign_in", "", format!("from {}", client.shown())).await?;
    let mut response = back_to("/dashboard");
    let cookie = HeaderValue::from_str(&set_cookie(&token, client.over_tls))
        .map_err(|e| Failure::Unavailable(e.to_string()))?;
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    Ok(response)
}

pub async fn sign_out(
    State(state): State<AppState>,
    client: Client,
    SignedIn(session): SignedIn,
    f: Result<Form<Confirmed>, FormRejection>,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let f = form(f)?;
    if !session.csrf_matches(&f.csrf) {
        return Err(Failure::Forbidden);
    }
    d.sessions.close(&session);
    audit(d, &session.actor, "sign_out", "", String::new()).await?;
    let mut response = back_to("/dashboard/login");
    let cookie = HeaderValue::from_str(&set_cookie("", client.over_tls))
        .map_err(|e| Failure::Unavailable(e.to_string()))?;
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    Ok(response)
}

fn payout_id(id: &str) -> Result<PayoutId, Failure> {
    PayoutId::parse(id).map_err(|_| Failure::NotFound)
}

pub async fn approve(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Path(id): Path<String>,
    f: Result<Form<Confirmed>, FormRejection>,
) -> Result<Response, Failure> {
    review(&state, &session, &id, f, "approve", async |pipeline, id| pipeline.approve(id).await)
        .await
}

pub async fn reject(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Path(id): Path<String>,
    f: Result<Form<Confirmed>, FormRejection>,
) -> Result<Response, Failure> {
    review(&state, &session, &id, f, "reject", async |pipeline, id| pipeline.reject(id).await).await
}

/// A payout held for review, approved or rejected: the same confirmation and the same audit
/// line, one pipeline call apart.
async fn review(
    state: &AppState,
    session: &Session,
    id: &str,
    f: Result<Form<Confirmed>, FormRejection>,
    action: &'static str,
    decide: impl AsyncFnOnce(&Pipeline, &PayoutId) -> Result<Payout, PipelineError>,
) -> Result<Response, Failure> {
    let d = dashboard(state)?;
    let f = form(f)?;
    checked(session, &f.csrf, &f.confirm)?;
    let pipeline = state.pipeline.as_ref().ok_or_else(|| {
        Failure::Unavailable("no chain or rail is configured: no payout can be reviewed".to_owned())
    })?;
    let id = payout_id(id)?;
    let payout = decide(pipeline, &id).await.map_err(pipeline_failure)?;
    audit(d, &session.actor, action, id.as_str(), format!("now {}", payout.status.as_str()))
        .await?;
    Ok(back_to("/dashboard/review"))
}

pub async fn resolve(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Path(id): Path<String>,
    f: Result<Form<ResolveForm>, FormRejection>,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let f = form(f)?;
    checked(&session, &f.csrf, &f.confirm)?;
    let verdict = Verdict::parse(&f.verdict).ok_or_else(|| {
        Failure::BadRequest("the verdict must be paid, failed or retry".to_owned())
    })?;
    let evidence = f.evidence.trim();
    if evidence.is_empty() || evidence.chars().count() > DECISION_TEXT_CHARS_MAX {
        return Err(Failure::BadRequest(format!(
            "the evidence must say what was seen, in at most {DECISION_TEXT_CHARS_MAX} characters"
        )));
    }
    let pipeline = state
        .pipeline
        .as_ref()
        .ok_or_else(|| Failure::Unavailable("no chain or rail is configured".to_owned()))?;
    let id = payout_id(&id)?;
    let payout =
        pipeline.resolve_needs_attention(&id, verdict, evidence).await.map_err(pipeline_failure)?;
    audit(
        d,
        &session.actor,
        "resolve",
        id.as_str(),
        format!("verdict {}: {evidence}; now {}", f.verdict, payout.status.as_str()),
    )
    .await?;
    Ok(back_to("/dashboard/attention"))
}

pub async fn resolve_incident(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Path(id): Path<String>,
    f: Result<Form<ResolveIncidentForm>, FormRejection>,
) -> Result<Response, Failure> {
    let d = dashboard(&state)?;
    let f = form(f)?;
    checked(&session, &f.csrf, &f.confirm)?;
    let resolution = f.resolution.trim();
    if resolution.is_empty() || resolution.chars().count() > DECISION_TEXT_CHARS_MAX {
        return Err(Failure::BadRequest(format!(
            "the resolution must say what was decided, in at most {DECISION_TEXT_CHARS_MAX} characters"
        )));
    }
    let id = IncidentId::parse(&id).map_err(|_| Failure::NotFound)?;
    if !d.store.resolve_incident(&id, resolution, now_ms()).await? {
        return Err(Failure::Conflict(format!("incident {id} is not open")));
    }
    audit(d, &session.actor, "resolve_incident", id.as_str(), resolution.to_owned()).await?;
    Ok(back_to("/dashboard/incidents"))
}
