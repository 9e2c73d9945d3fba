//! Settlement and policy on anvil: the ledger of a paid token payout, reverts, cancels after signing, reviews, caps at signing, retries, finalized blocks.

use super::*;

async fn erc20_payout_settles_the_ledger_and_emits_paid_once(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let payout = w.request("withdrawal-erc20-1", USDC, 2_500_000, RECIPIENTS[0]).await;
    let p = w.pipeline().await;
    w.tick_until(&p, async || paid(w.payout(&payout).await.status)).await;
    let b = w.engine.balances(&w.merchant).await.unwrap();
    let usdc = b.iter().find(|b| b.asset.as_str() == USDC).unwrap();
    assert_eq!(usdc.held, payoutd_domain::Amount::ZERO, "the hold became a final debit");
    assert_eq!(usdc.available, payoutd_domain::Amount::from_u128(10u128.pow(16) - 2_500_000));
    assert_eq!(
        w.store.count_events(&w.merchant, payoutd_domain::EventType::PayoutPaid).await.unwrap(),
        1
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    assert_eq!(w.transfers_to(USDC, RECIPIENTS[0]).await, 1);
}

async fn a_reverted_transfer_opens_an_incident_and_keeps_the_hold(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    // More tokens than the hot wallet holds (it was minted 10^15): the token contract reverts the transfer.
    let payout = w.request("withdrawal-revert-1", USDC, 10u128.pow(15) + 1, RECIPIENTS[1]).await;
    let p = w.pipeline().await;
    w.tick_until(&p, async || w.payout(&payout).await.status == PayoutStatus::NeedsAttention).await;
    let attempt = &w.store.attempts_of(&payout.id).await.unwrap()[0];
    assert_eq!(attempt.status, AttemptStatus::Reverted);
    let incidents = w.store.open_incidents(10).await.unwrap();
    assert_eq!(incidents.iter().map(|i| i.kind.as_str()).collect::<Vec<_>>(), vec!["reverted"]);
    let usdc = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == USDC)
        .unwrap();
    assert_eq!(
        usdc.held,
        payoutd_domain::Amount::from_u128(10u128.pow(15) + 1),
        "held until a person decides"
    );
    // A verdict without evidence is refused and changes nothing (the verdicts with the chain's
    // proof are tested in `failing_a_reverted_payout_needs_the_final_revert` and below).
    let resolved = p.resolve_needs_attention(&payout.id, Verdict::Paid, "");
    assert!(resolved.await.is_err(), "evidence is required");
    assert_eq!(
        w.payout(&payout).await.status,
        PayoutStatus::NeedsAttention,
        "the refused verdict changed nothing"
    );
}

async fn operator_cancel_after_signing_fails_the_payout_only_once_the_cancel_is_final(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-cancel-1", ETH, 900, RECIPIENTS[0]).await;
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    let cancel = p.cancel_signed(&payout.id).await.unwrap();
    assert_eq!(cancel.kind, TxKind::Cancel);
    p.resolve_pass().await.unwrap();
    assert_eq!(
        w.payout(&payout).await.status,
        PayoutStatus::Processing,
        "not failed before the cancel is mined"
    );
    w.anvil.mine(1).await.unwrap();
    w.tick_until(&p, async || w.payout(&payout).await.status == PayoutStatus::Failed).await;
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 0);
    let eth = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == ETH)
        .unwrap();
    assert_eq!(eth.held, payoutd_domain::Amount::ZERO, "proven dead: the hold is released");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Batches go through the same policy as single payouts: the same recipient, asset and amount in a
/// second batch (another external id) waits for review.
async fn the_same_recipient_in_a_later_batch_waits_for_review(db: TestDb) {
    use payoutd_domain::{Amount, Destination, EvmAddress, Metadata, PayoutKey, PayoutRequest};
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let line = |key: &str, to: &str| {
        let to = Destination::Evm(EvmAddress::parse(to).unwrap());
        PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            w.asset(USDC),
            Amount::from_u128(2_500_000),
            to,
            Metadata::empty(),
        )
    };
    let first = w
        .engine
        .submit_batch(
            &w.merchant,
            None,
            vec![line("march-payroll-1", RECIPIENTS[0]), line("march-payroll-2", RECIPIENTS[1])],
        )
        .await
        .unwrap();
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    let payout_of = |outcome: &payoutd_engine::batches::BatchLineOutcome| {
        outcome.result.as_ref().unwrap().0.clone()
    };
    for line in &first.lines {
        assert_eq!(w.payout(&payout_of(line)).await.status, PayoutStatus::Approved);
    }
    let second = w
        .engine
        .submit_batch(&w.merchant, None, vec![line("march-payroll-rerun-1", RECIPIENTS[0])])
        .await
        .unwrap();
    assert_ne!(second.id, first.id, "another batch");
    p.policy_pass().await.unwrap();
    assert_eq!(
        w.payout(&payout_of(&second.lines[0])).await.status,
        PayoutStatus::HeldForReview,
        "a near-duplicate across batches is held"
    );
}

async fn near_duplicates_and_cap_breaches_wait_for_review(db: TestDb) {
    let mut config = quick();
    let caps = Caps {
        per_destination_per_hour: payoutd_domain::Amount::from_u128(1_000),
        per_wallet_per_hour: payoutd_domain::Amount::from_u128(10_000),
    };
    let w0 = World::new(db, AnvilOptions::default(), config.clone()).await;
    config.caps.insert(w0.asset(ETH), caps);
    let w = World { config, ..w0 };
    let a = w.request("bonus-0001-a", ETH, 400, RECIPIENTS[0]).await;
    let dup = w.request("bonus-0001-b", ETH, 400, RECIPIENTS[0]).await; // same merchant, destination, amount
    let big = w.request("bonus-0002", ETH, 1_001, RECIPIENTS[1]).await; // over the destination cap
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    assert_eq!(
        w.payout(&a).await.status,
        PayoutStatus::HeldForReview,
        "the first of a pair is held too"
    );
    assert_eq!(w.payout(&dup).await.status, PayoutStatus::HeldForReview);
    assert_eq!(w.payout(&big).await.status, PayoutStatus::HeldForReview);
    p.approve(&a.id).await.unwrap();
    p.reject(&dup.id).await.unwrap();
    p.approve(&big.id).await.unwrap(); // a person accepted the breach: signing caps no longer apply
    w.tick_until(&p, async || paid(w.payout(&a).await.status) && paid(w.payout(&big).await.status))
        .await;
    assert_eq!(w.payout(&dup).await.status, PayoutStatus::Rejected);
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 1);
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// I8 at signing: the per-wallet cap and the destination cap are checked again when the payouts are
/// signed, counting what the same session signed before them.
async fn caps_are_checked_again_at_signing_per_wallet_and_per_destination(db: TestDb) {
    let mut config = quick();
    let caps = Caps {
        per_destination_per_hour: payoutd_domain::Amount::from_u128(1_000),
        per_wallet_per_hour: payoutd_domain::Amount::from_u128(1_500),
    };
    let w0 = World::new(db, AnvilOptions::default(), config.clone()).await;
    config.caps.insert(w0.asset(ETH), caps);
    let w = World { config, ..w0 };
    // Each passes the policy alone (nothing is signed yet); together they breach both caps.
    let a = w.request("cap-sign-a", ETH, 600, RECIPIENTS[0]).await;
    let b = w.request("cap-sign-b", ETH, 601, RECIPIENTS[0]).await; // A's destination: 1,201 > 1,000
    let c = w.request("cap-sign-c", ETH, 800, RECIPIENTS[1]).await; // the wallet: 600 + 800 = 1,400
    let d = w.request("cap-sign-d", ETH, 200, RECIPIENTS[2]).await; // the wallet: 1,400 + 200 = 1,600 > 1,500
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    for q in [&a, &b, &c, &d] {
        assert_eq!(
            w.payout(q).await.status,
            PayoutStatus::Approved,
            "the policy alone sees no breach"
        );
    }
    let report = p.sign_pass().await.unwrap();
    assert_eq!((report.signed, report.held), (2, 2));
    assert_eq!(
        w.payout(&b).await.status,
        PayoutStatus::HeldForReview,
        "destination cap at signing"
    );
    assert_eq!(w.payout(&d).await.status, PayoutStatus::HeldForReview, "per-wallet cap at signing");
    w.tick_until(&p, async || paid(w.payout(&a).await.status) && paid(w.payout(&c).await.status))
        .await;
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 1);
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[2]).await, 0);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A reverted transfer moved nothing (its final revert is the proof): a person may retry it. The
/// second attempt reverts too and needs a person again (its own event), then fails with the proof.
async fn a_reverted_payout_can_be_retried_and_then_failed(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let payout = w.request("withdrawal-revert-3", USDC, 10u128.pow(15) + 1, RECIPIENTS[1]).await;
    let p = w.pipeline().await;
    w.tick_until(&p, async || w.payout(&payout).await.status == PayoutStatus::NeedsAttention).await;
    let retried = p
        .resolve_needs_attention(
            &payout.id,
            Verdict::Retry,
            "reverted: token balance too low; topped up",
        )
        .await
        .unwrap();
    assert_eq!(retried.status, PayoutStatus::Processing);
    w.tick_until(&p, async || w.payout(&payout).await.status == PayoutStatus::NeedsAttention).await;
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Reverted), (2, AttemptStatus::Reverted)]
    );
    assert_ne!(attempts[0].nonce(), attempts[1].nonce(), "a new attempt, a new nonce");
    assert_eq!(
        w.store
            .count_events(&w.merchant, payoutd_domain::EventType::PayoutNeedsAttention)
            .await
            .unwrap(),
        2,
        "one per attempt"
    );
    let failed =
        p.resolve_needs_attention(&payout.id, Verdict::Failed, "reverted twice").await.unwrap();
    assert_eq!(failed.status, PayoutStatus::Failed);
    let usdc = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == USDC)
        .unwrap();
    assert_eq!(usdc.held, payoutd_domain::Amount::ZERO);
    assert_eq!(w.transfers_to(USDC, RECIPIENTS[1]).await, 0);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A chain final by its `finalized` block tag (anvil: 64 blocks under the head): a transfer is paid,
/// and a cancel releases the hold, only once the block holding it is finalized, however deep it is.
async fn on_a_chain_with_a_finalized_tag_money_moves_only_on_finalized_blocks(db: TestDb) {
    const ANVIL_FINALIZED_LAG: u64 = 64;
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let paid_one = w.request("withdrawal-tag-01", ETH, 1_100, RECIPIENTS[0]).await;
    let canceled = w.request("withdrawal-tag-02", ETH, 1_200, RECIPIENTS[1]).await;
    let p = w.pipeline_final_by(w.anvil.url(), payoutd_rail_evm::Finality::FinalizedTag).await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    p.cancel_signed(&canceled.id).await.unwrap();
    w.anvil.mine(ANVIL_FINALIZED_LAG).await.unwrap();
    for _ in 0..3 {
        p.tick().await.unwrap();
    }
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 1, "mined, 64 blocks deep");
    assert_eq!(
        w.payout(&paid_one).await.status,
        PayoutStatus::Processing,
        "not paid before its block is finalized"
    );
    assert_eq!(
        w.payout(&canceled).await.status,
        PayoutStatus::Processing,
        "the cancel releases nothing before it is finalized"
    );
    let eth = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == ETH)
        .unwrap();
    assert_eq!(eth.held, payoutd_domain::Amount::from_u128(2_300));
    w.anvil.mine(2).await.unwrap();
    w.tick_until(&p, async || {
        paid(w.payout(&paid_one).await.status)
            && w.payout(&canceled).await.status == PayoutStatus::Failed
    })
    .await;
    let eth = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == ETH)
        .unwrap();
    assert_eq!(eth.held, payoutd_domain::Amount::ZERO);
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 0);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

payoutd_testkit::both_stores!(
    the_same_recipient_in_a_later_batch_waits_for_review,
    on_a_chain_with_a_finalized_tag_money_moves_only_on_finalized_blocks,
    a_reverted_payout_can_be_retried_and_then_failed,
    caps_are_checked_again_at_signing_per_wallet_and_per_destination,
    erc20_payout_settles_the_ledger_and_emits_paid_once,
    a_reverted_transfer_opens_an_incident_and_keeps_the_hold,
    operator_cancel_after_signing_fails_the_payout_only_once_the_cancel_is_final,
    near_duplicates_and_cap_breaches_wait_for_review,
);
