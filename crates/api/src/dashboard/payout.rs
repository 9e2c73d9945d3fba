//! One payout's page: its attempts with every transaction hash or provider reference (linked to the network's explorer when one is configured) and its timeline.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use payoutd_domain::{Attempt, AttemptSlot, ExplorerUrl, Payout, PayoutId, PayoutStatus};
use payoutd_engine::PayoutHistory;

use super::Dashboard;
use super::page::{Failure, render, when};
use super::pages::{Row, dashboard};
use super::session::SignedIn;
use crate::AppState;

/// A transaction hash, signature or provider reference, and where to see it.
struct TxRow {
    kind: String,
    reference: String,
    at: String,
    link: Option<String>,
}

struct AttemptRow {
    no: u32,
    status: String,
    rail: String,
    slot: String,
    txs: Vec<TxRow>,
    landed: Option<TxRow>,
}

impl AttemptRow {
    fn of(a: &Attempt, explorer: Option<&ExplorerUrl>) -> AttemptRow {
        let link = |reference: &str| explorer.map(|e| e.link(reference));
        let slot = match &a.slot {
            AttemptSlot::Evm(s) => format!("wallet {} nonce {}", s.wallet_id, s.nonce),
            AttemptSlot::Solana { fee_payer, expiry } => {
                format!("fee payer {fee_payer}, {expiry:?}")
            }
            AttemptSlot::Provider { provider, idempotency_key, reference, .. } => {
                format!(
                    "{provider} key {idempotency_key}, provider's id {}",
                    reference.as_ref().map_or("none yet", |r| r.as_str())
                )
            }
        };
        let txs = a
            .txs
            .iter()
            .map(|t| TxRow {
                kind: format!("{:?}", t.kind).to_lowercase(),
                reference: t.hash.to_string(),
                at: when(t.created_at_ms),
                link: link(t.hash.as_str()),
            })
            .collect();
        let landed = a.mined.as_ref().map(|(block, hash)| TxRow {
            kind: format!("in block {block}"),
            reference: hash.to_string(),
            at: when(a.updated_at_ms),
            link: link(hash.as_str()),
        });
        AttemptRow {
            no: a.attempt_no,
            status: a.status.as_str().to_owned(),
            rail: a.slot.rail().to_owned(),
            slot,
            txs,
            landed,
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
    /// Why a payout not yet signed waits: no configured rail pays its asset.
    waits_because: Option<String>,
}

/// What an event says in the timeline.
fn event_words(event_type: &str) -> &str {
    match event_type {
        "payout.created" => "created",
        "payout.approved" => "approved by policy",
        "payout.held_for_review" => "held for review (a near-duplicate of a recent payout)",
        "payout.review_approved" => "approved in review",
        "payout.rejected" => "rejected in review, hold released",
        "payout.canceled" => "canceled, hold released",
        "payout.processing" => "processing",
        "payout.paid" => "paid: final on its rail",
        "payout.failed" => "failed, hold released",
        "payout.needs_attention" => "needs attention",
        other => other,
    }
}

/// What happened to the payout, oldest first: its events (created, held, approved, processing,
/// final), each attempt and each transaction, where it landed, each ended attempt with its
/// evidence (a dead attempt's proof), and what operators did.
fn timeline(p: &Payout, attempts: &[Attempt], history: &PayoutHistory) -> Vec<(String, String)> {
    let mut events: Vec<(i64, String)> = history
        .events
        .iter()
        .map(|(event_type, at)| (*at, event_words(event_type).to_owned()))
        .collect();
    if !history.events.iter().any(|(t, _)| t == "payout.created") {
        events.push((p.created_at_ms, "created".to_owned()));
    }
    for a in attempts {
        events.push((
            a.created_at_ms,
            format!("attempt {} signed ({})", a.attempt_no, a.slot.rail()),
        ));
        for t in &a.txs {
            events.push((
                t.created_at_ms,
                format!("{:?} {} stored, then sent", t.kind, t.hash).to_lowercase(),
            ));
        }
        if let Some((block, hash)) = &a.mined {
            events.push((a.updated_at_ms, format!("{hash} mined in block {block}")));
        }
        if !a.status.is_live() {
            let evidence = history
                .evidence
                .iter()
                .find(|(no, _)| *no == a.attempt_no)
                .map(|(_, e)| e.as_str());
            let what = match evidence {
                Some(e) => format!("attempt {} {}: {e}", a.attempt_no, a.status.as_str()),
                None => format!("attempt {} {}", a.attempt_no, a.status.as_str()),
            };
            events.push((a.updated_at_ms, what));
        }
    }
    for action in &history.actions {
        events.push((
            action.at_ms,
            format!("operator {} ({}): {}", action.action, action.actor, action.detail),
        ));
    }
    // Same instant: keep the order written (events, then attempts, then actions).
    events.sort_by_key(|(at, _)| *at);
    events.into_iter().map(|(at, what)| (when(at), what)).collect()
}

pub async fn payout(
    State(state): State<AppState>,
    SignedIn(session): SignedIn,
    Path(id): Path<String>,
) -> Result<Response, Failure> {
    let d: &Dashboard = dashboard(&state)?;
    let id = PayoutId::parse(&id).map_err(|_| Failure::NotFound)?;
    let p = d.store.payout_by_id(&id).await?.ok_or(Failure::NotFound)?;
    let attempts = d.store.attempts_of(&id).await?;
    let attempts_made = attempts.iter().map(|a| a.attempt_no).max().unwrap_or(0);
    let history = d.views.payout_history(&id, attempts_made).await?;
    let explorer = d.explorer_of(p.asset.as_str());
    let unsigned = matches!(
        p.status,
        PayoutStatus::Requested | PayoutStatus::Approved | PayoutStatus::HeldForReview
    );
    let waits_because = if unsigned { d.payable.why_not(&p.asset) } else { None };
    let page = PayoutPage {
        csrf: session.csrf,
        row: Row::of(&p, state.engine.assets()),
        metadata: p.metadata.as_json().to_owned(),
        timeline: timeline(&p, &attempts, &history),
        attempts: attempts.iter().map(|a| AttemptRow::of(a, explorer)).collect(),
        waits_because,
    };
    Ok(render(StatusCode::OK, &page))
}
