//! The demo's intake scenarios beside the bulk: a near-duplicate pair the operator and the merchant decide, and answers that must create nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use payoutd_demo::api::{Api, As};
use payoutd_demo::intake::{self, Copies, Outcome, Planned};
use payoutd_demo::report::Checks;
use payoutd_domain::Amount;
use reqwest::StatusCode;
use serde_json::json;

use super::{ETH, ETH_DEPOSIT_WEI, REVIEW_WAIT_SECS, USDC};

/// The near-duplicate scenario and what it leaves behind for the summary.
pub(crate) struct ReviewPair {
    /// Paid after the operator approves it (if policy held it too).
    pub twin: Planned,
    pub twin_outcome: Outcome,
    /// Canceled by the merchant while held.
    pub sibling: Planned,
    pub sibling_id: String,
}

/// The same amount to the same address under two keys. Policy holds the second (and the
/// first too if both arrive before a policy pass); the merchant cancels the second, and the
/// watch loop approves the first with the operator CLI.
pub(crate) async fn review_pair(
    api: &Arc<Api>,
    run_tag: u32,
    checks: &mut Checks,
) -> anyhow::Result<ReviewPair> {
    let twin = intake::plan(1, run_tag, ETH, USDC, 0, intake::BURSTS).remove(0);
    let twin = Planned { key: format!("review-{run_tag:08x}-a"), copies: Copies::Twice, ..twin };
    let sibling = Planned { key: format!("review-{run_tag:08x}-b"), ..twin.clone() };
    let twin_outcome = intake::submit(api, &twin).await;
    let sibling_reply = api.post("/v1/payouts", &sibling.body(), As::Merchant).await?;
    let sibling_id = sibling_reply.str_field("id").to_owned();
    ensure!(
        sibling_reply.status == StatusCode::CREATED,
        "near-duplicate sibling: {} {}",
        sibling_reply.status,
        sibling_reply.body
    );
    let review_deadline = Instant::now() + Duration::from_secs(REVIEW_WAIT_SECS);
    let sibling_status = loop {
        let reply = api.get(&format!("/v1/payouts/{sibling_id}")).await?;
        let status = reply.str_field("status").to_owned();
        if status != "requested" || Instant::now() > review_deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let cancel =
        api.post(&format!("/v1/payouts/{sibling_id}/cancel"), &json!({}), As::Merchant).await?;
    let cancel_again =
        api.post(&format!("/v1/payouts/{sibling_id}/cancel"), &json!({}), As::Merchant).await?;
    checks.add(
        sibling_status == "held_for_review"
            && cancel.status == StatusCode::OK
            && cancel.str_field("status") == "canceled"
            && cancel_again.status == StatusCode::OK
            && cancel_again.replayed,
        format!(
            "near-duplicate held ({sibling_status}), canceled by the merchant ({} {}), cancel repeated ({} replayed={})",
            cancel.status.as_u16(),
            cancel.str_field("status"),
            cancel_again.status.as_u16(),
            cancel_again.replayed
        ),
    );
    Ok(ReviewPair { twin, twin_outcome, sibling, sibling_id })
}

/// Intake answers that must not create anything: query before retry finds the one payout,
/// a key reused with another amount and a payout above the balance are refused.
pub(crate) async fn edge_checks(
    api: &Api,
    probe: &Planned,
    probe_id: Option<&str>,
    run_tag: u32,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let found = api.get(&format!("/v1/payouts?idempotency_key={}", probe.key)).await?;
    let found_ids: Vec<&str> = found.body["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|p| p["id"].as_str()).collect())
        .unwrap_or_default();
    checks.add(
        found_ids.len() == 1 && Some(found_ids[0]) == probe_id,
        format!("query before retry: ?idempotency_key={} -> {found_ids:?}", probe.key),
    );
    // The same key with one more base unit: a different request, so a refusal, never a second payout.
    let mut changed = probe.body();
    changed["amount"] =
        json!(probe.amount.checked_add(Amount::from_u128(1)).unwrap_or(probe.amount).to_string());
    let reuse = api.post("/v1/payouts", &changed, As::Merchant).await?;
    checks.add(
        reuse.status == StatusCode::UNPROCESSABLE_ENTITY
            && reuse.problem_slug() == "idempotency-key-reused",
        format!("same key, another amount -> {} {}", reuse.status.as_u16(), reuse.problem_slug()),
    );
    let too_much = json!({
        "asset": ETH,
        "amount": (ETH_DEPOSIT_WEI + 1).to_string(),
        "destination": intake::destination(run_tag, u32::MAX).to_string(),
        "idempotency_key": format!("too-much-{run_tag:08x}"),
    });
    let too_much = api.post("/v1/payouts", &too_much, As::Merchant).await?;
    checks.add(
        too_much.status == StatusCode::UNPROCESSABLE_ENTITY
            && too_much.problem_slug() == "insufficient-funds",
        format!(
            "payout above the balance -> {} {}",
            too_much.status.as_u16(),
            too_much.problem_slug()
        ),
    );
    Ok(())
}
