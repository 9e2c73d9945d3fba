//! Settlements on both stores: paid, failed and needs-attention ends, their journals and incidents, and sweeps written together.

use super::*;

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn settle_attempt_confirm_pays_and_settles_once(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    assert!(w.store.mark_broadcast(&attempt.id, 1_500).await.unwrap());
    let landed = attempt.txs[0].hash.clone();

    // The payout moved on since the resolver read it: nothing is written, not even the attempt.
    let processing = w.now(&p).await;
    let mut stale = settlement(
        &processing,
        &attempt,
        AttemptStatus::Broadcast,
        AttemptStatus::Confirmed,
        &landed,
        PayoutStatus::Paid,
        None,
    );
    transition_of(&mut stale).from_version -= 1;
    assert!(matches!(w.store.settle_attempt(&stale).await.unwrap(), TransitionOutcome::Stale));
    assert_eq!(
        w.only_attempt(&p).await.status,
        AttemptStatus::Broadcast,
        "the attempt update rolled back"
    );

    let confirm = settlement(
        &processing,
        &attempt,
        AttemptStatus::Broadcast,
        AttemptStatus::Confirmed,
        &landed,
        PayoutStatus::Paid,
        None,
    );
    let TransitionOutcome::Applied(paid) = w.store.settle_attempt(&confirm).await.unwrap() else {
        panic!("the first confirmation applies");
    };
    assert_eq!((paid.status, paid.version), (PayoutStatus::Paid, processing.version + 1));
    assert!(
        matches!(w.store.settle_attempt(&confirm).await.unwrap(), TransitionOutcome::Stale),
        "a second settle is stale"
    );

    assert_eq!(w.only_attempt(&p).await.status, AttemptStatus::Confirmed);
    assert_eq!(
        w.db.scalar_raw(&format!("SELECT count(*) FROM attempts WHERE evidence = '{landed}'"))
            .await,
        1
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(60), Amount::ZERO),
        "held back to 0, the 40 left"
    );
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'settle'").await, 1);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutPaid).await.unwrap(), 1);
    let amount_40 = if w.db.is_postgres() {
        "40".to_owned()
    } else {
        format!("'{}'", Amount::from_u128(40).to_padded())
    };
    let out = format!(
        "SELECT count(*) FROM ledger_entries WHERE account = 'world:payouts' AND direction = 1 AND amount = {amount_40}"
    );
    assert_eq!(w.db.scalar_raw(&out).await, 1, "the money left via world:payouts");
    assert_eq!(
        w.db.scalar_raw("SELECT count(*) FROM ledger_entries WHERE account = 'world:payouts'")
            .await,
        1
    );
    assert!(w.store.live_attempts(10).await.unwrap().is_empty());
    w.assert_ledger_clean().await;
}

async fn settle_attempt_dead_fails_and_releases_only_with_proof(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();

    // I6: no proof, no release.
    for no_proof in ["", "  "] {
        let refused = w
            .settle(
                &attempt,
                AttemptStatus::Signed,
                AttemptStatus::Dead,
                no_proof,
                PayoutStatus::Failed,
                None,
            )
            .await;
        assert!(
            matches!(refused, Err(StoreError::Invariant(_))),
            "dead without proof must be refused: {refused:?}"
        );
    }
    assert_eq!(w.only_attempt(&p).await.status, AttemptStatus::Signed);
    assert_eq!(w.now(&p).await.status, PayoutStatus::Processing);
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(60), Amount::from_u128(40)),
        "the hold stands"
    );

    let proof = "cancel 0xabc confirmed in block 7 at nonce 0";
    let outcome = w
        .settle(
            &attempt,
            AttemptStatus::Signed,
            AttemptStatus::Dead,
            proof,
            PayoutStatus::Failed,
            None,
        )
        .await
        .unwrap();
    let TransitionOutcome::Applied(failed) = outcome else { panic!("a proven death applies") };
    assert_eq!(failed.status, PayoutStatus::Failed);
    assert_eq!(w.only_attempt(&p).await.status, AttemptStatus::Dead);
    let stored = format!(
        "SELECT count(*) FROM attempts WHERE death_proof = '{proof}' AND evidence = '{proof}'"
    );
    assert_eq!(w.db.scalar_raw(&stored).await, 1, "the proof is kept with the attempt");
    assert_eq!(w.balance().await, (Amount::from_u128(100), Amount::ZERO), "released exactly once");
    let again = w
        .settle(
            &attempt,
            AttemptStatus::Signed,
            AttemptStatus::Dead,
            proof,
            PayoutStatus::Failed,
            None,
        )
        .await;
    assert!(matches!(again, Ok(TransitionOutcome::Stale)));
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'release'").await, 1);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutFailed).await.unwrap(), 1);
    w.assert_ledger_clean().await;
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn settle_attempt_reverted_needs_attention_keeps_the_hold_and_opens_an_incident(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(30, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    assert!(w.store.mark_broadcast(&attempt.id, 1_500).await.unwrap());
    let reverted = attempt.txs[0].hash.clone();

    // A stale payout version: the incident is not written either.
    let processing = w.now(&p).await;
    let opened =
        incident(IncidentKind::Reverted, Some(&p), Some(&attempt), "status 0 receipt", 5_000);
    let mut stale = settlement(
        &processing,
        &attempt,
        AttemptStatus::Broadcast,
        AttemptStatus::Reverted,
        &reverted,
        PayoutStatus::NeedsAttention,
        Some(opened.clone()),
    );
    transition_of(&mut stale).from_version += 1;
    assert!(matches!(w.store.settle_attempt(&stale).await.unwrap(), TransitionOutcome::Stale));
    assert!(w.store.open_incidents(10).await.unwrap().is_empty());
    assert_eq!(w.store.count_events(&w.m, EventType::IncidentOpened).await.unwrap(), 0);

    let settle = settlement(
        &processing,
        &attempt,
        AttemptStatus::Broadcast,
        AttemptStatus::Reverted,
        &reverted,
        PayoutStatus::NeedsAttention,
        Some(opened.clone()),
    );
    let TransitionOutcome::Applied(after) = w.store.settle_attempt(&settle).await.unwrap() else {
        panic!("applies")
    };
    assert_eq!(after.status, PayoutStatus::NeedsAttention);
    assert_eq!(w.only_attempt(&p).await.status, AttemptStatus::Reverted);
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(70), Amount::from_u128(30)),
        "ambiguity keeps the hold"
    );
    let open = w.store.open_incidents(10).await.unwrap();
    assert_eq!(open.len(), 1);
    let i = &open[0];
    assert_eq!(
        (&i.id, i.kind, i.payout_id.as_ref(), i.attempt_id.as_ref()),
        (&opened.id, IncidentKind::Reverted, Some(&p.id), Some(&attempt.id))
    );
    assert_eq!(
        (i.detail.as_str(), i.resolution.as_ref(), i.created_at_ms),
        ("status 0 receipt", None, 5_000)
    );
    assert_eq!(w.store.count_events(&w.m, EventType::IncidentOpened).await.unwrap(), 1);
    assert!(w.store.event_exists(&opened.event.id).await.unwrap());

    // A standalone incident (nothing to pin it to) sorts after the older one.
    let unmatched =
        incident(IncidentKind::UnmatchedTransfer, None, None, "0xdef from the hot wallet", 6_000);
    w.store.open_incident(&unmatched).await.unwrap();
    let open: Vec<IncidentId> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(open, vec![opened.id.clone(), unmatched.id.clone()]);
    assert!(
        w.store.resolve_incident(&opened.id, "operator: refunded off-chain", 7_000).await.unwrap()
    );
    assert!(!w.store.resolve_incident(&opened.id, "again", 8_000).await.unwrap(), "resolves once");
    assert!(!w.store.resolve_incident(&IncidentId::new(), "ghost", 8_000).await.unwrap());
    let open: Vec<IncidentId> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(open, vec![unmatched.id.clone()]);
    w.assert_ledger_clean().await;
}

async fn add_attempt_tx_only_on_live_attempts(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(10, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let replacement = tx(TxKind::Replacement, 0x10, (2_500_000_000, 1_250_000_000), 2_000);
    w.store.add_attempt_tx(&attempt.id, &replacement).await.unwrap();
    assert!(w.store.mark_broadcast(&attempt.id, 2_100).await.unwrap());
    let cancel = tx(TxKind::Cancel, 0x20, (3_000_000_000, 1_500_000_000), 3_000);
    w.store.add_attempt_tx(&attempt.id, &cancel).await.unwrap();
    let duplicate = w.store.add_attempt_tx(&attempt.id, &cancel).await;
    assert!(
        matches!(duplicate, Err(StoreError::Invariant(_))),
        "a hash is stored once: {duplicate:?}"
    );
    let stored = w.only_attempt(&p).await;
    assert_eq!(stored.txs, vec![attempt.txs[0].clone(), replacement, cancel.clone()]);

    let proof = format!("cancel {} confirmed", cancel.hash);
    w.settle(
        &stored,
        AttemptStatus::Broadcast,
        AttemptStatus::Dead,
        &proof,
        PayoutStatus::Failed,
        None,
    )
    .await
    .unwrap();
    let late = w
        .store
        .add_attempt_tx(
            &attempt.id,
            &tx(TxKind::Replacement, 0x30, (9_000_000_000, 2_000_000_000), 4_000),
        )
        .await;
    assert!(
        matches!(late, Err(StoreError::Invariant(_))),
        "a dead attempt takes no new transaction: {late:?}"
    );
    let ghost =
        w.store.add_attempt_tx(&AttemptId::new(), &tx(TxKind::Cancel, 0x40, (1, 1), 4_000)).await;
    assert!(matches!(ghost, Err(StoreError::Invariant(_))), "unknown attempt: {ghost:?}");
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM attempt_transactions").await, 3);
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn live_attempts_returns_every_hash(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let (p1, p2, p3) =
        (w.approved(10, DEST_A).await, w.approved(20, DEST_B).await, w.approved(30, DEST_A).await);
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let (a1, a2, a3) = (
        sign(&mut s, &p1, &wallet.id, 1_000).await,
        sign(&mut s, &p2, &wallet.id, 1_000).await,
        sign(&mut s, &p3, &wallet.id, 1_000).await,
    );
    s.commit().await.unwrap();

    // Two replacements in the same millisecond, hashes in the opposite order of their fees;
    // the cancel outbids everything, with fees far above 2^64 to check they round trip exactly.
    let bump_1 = tx(TxKind::Replacement, 0xff, (2_500_000_000, 1_250_000_000), 2_000);
    let bump_2 = tx(TxKind::Replacement, 0x00, (3_125_000_000, 1_562_500_000), 2_000);
    let cancel = tx(TxKind::Cancel, 0x01, (u128::MAX - 1, u128::MAX / 3), 3_000);
    for t in [&bump_1, &bump_2, &cancel] {
        w.store.add_attempt_tx(&a1.id, t).await.unwrap();
    }
    w.store.record_checked(std::slice::from_ref(&a1.id), 9_000).await.unwrap();
    w.store.record_checked(std::slice::from_ref(&a2.id), 8_000).await.unwrap();

    let live = w.store.live_attempts(10).await.unwrap();
    let order: Vec<&AttemptId> = live.iter().map(|(a, _)| &a.id).collect();
    assert_eq!(
        order,
        vec![&a1.id, &a2.id, &a3.id],
        "lowest nonce first: the head of the wallet's line blocks the rest"
    );
    for (a, p) in &live {
        assert_eq!(
            (&p.id, p.status),
            (&a.payout_id, PayoutStatus::Processing),
            "each attempt comes with its payout"
        );
    }
    let mut expected = a1.clone();
    expected.txs.extend([bump_1.clone(), bump_2.clone(), cancel.clone()]);
    assert_eq!(live[0].0, expected, "every hash, bytes and fees, oldest first");
    assert_eq!(live[0].0.latest_tx(), &cancel);
    assert_eq!(live[1].0, a2);
    assert_eq!(w.store.live_attempts(1).await.unwrap().len(), 1, "the limit holds");

    assert!(w.store.mark_broadcast(&a2.id, 4_000).await.unwrap());
    assert!(
        !w.store.mark_broadcast(&a2.id, 4_500).await.unwrap(),
        "signed -> broadcast happens once"
    );
    assert!(w.store.record_sent(&a2.id, 5_000).await.unwrap());
    let a2_now = w.only_attempt(&p2).await;
    assert_eq!(
        (a2_now.status, a2_now.last_sent_at_ms, a2_now.updated_at_ms),
        (AttemptStatus::Broadcast, 5_000, 4_000)
    );

    assert!(w.store.record_mined(&a1.id, 77, &bump_2.hash).await.unwrap());
    assert_eq!(w.only_attempt(&p1).await.mined, Some((77, bump_2.hash.clone())));
    assert!(
        !w.store.record_mined(&a1.id, 78, &a2.txs[0].hash).await.unwrap(),
        "only a hash of the attempt itself"
    );
    assert!(w.store.clear_mined(&a1.id).await.unwrap());
    assert_eq!(w.only_attempt(&p1).await.mined, None, "a reorg clears the receipt");
    assert!(matches!(
        w.store.record_checked(&[a1.id.clone(), AttemptId::new()], 1).await,
        Err(StoreError::Invariant(_))
    ));
    assert!(
        !w.store.record_mined(&AttemptId::new(), 1, &hash(0x01)).await.unwrap(),
        "no such attempt: nothing written"
    );

    w.settle(
        &a3,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &a3.txs[0].hash,
        PayoutStatus::Paid,
        None,
    )
    .await
    .unwrap();
    let live: Vec<AttemptId> =
        w.store.live_attempts(10).await.unwrap().into_iter().map(|(a, _)| a.id).collect();
    assert_eq!(live, vec![a1.id.clone(), a2.id.clone()], "a confirmed attempt is no longer live");
    // Every attempt write is conditional on the attempt being live (I5): an ended one keeps its record.
    assert!(!w.store.record_sent(&a3.id, 9_999).await.unwrap());
    assert!(!w.store.record_mined(&a3.id, 99, &a3.txs[0].hash).await.unwrap());
    assert!(!w.store.clear_mined(&a3.id).await.unwrap());
    let a3_now = w.only_attempt(&p3).await;
    assert_eq!(
        (a3_now.status, a3_now.last_sent_at_ms, a3_now.mined),
        (AttemptStatus::Confirmed, 0, None)
    );
}

/// The settlement records exactly the transaction that was mined and final on the attempt (SPEC 8.6).
async fn a_settlement_records_the_final_mined_hash(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let bump = tx(TxKind::Replacement, 0x07, (3_000_000_000, 1_500_000_000), 2_000);
    w.store.add_attempt_tx(&attempt.id, &bump).await.unwrap();
    let processing = w.now(&p).await;
    let mut confirm = settlement(
        &processing,
        &attempt,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &bump.hash,
        PayoutStatus::Paid,
        None,
    );
    confirm.mined = Some((1_234, bump.hash.clone()));
    assert!(matches!(
        w.store.settle_attempt(&confirm).await.unwrap(),
        TransitionOutcome::Applied(_)
    ));
    let stored = w.only_attempt(&p).await;
    assert_eq!(
        (stored.status, stored.mined),
        (AttemptStatus::Confirmed, Some((1_234, bump.hash.clone())))
    );
    assert_ne!(
        bump.hash, attempt.txs[0].hash,
        "the replacement, not the original, is the one recorded"
    );
}

/// Settlements of a sweep in one transaction: each applies or is stale on its own (a stale one is
/// rolled back alone), and all that apply commit together.
async fn settlements_written_together_apply_or_stay_stale_one_by_one(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let (p1, p2, p3) =
        (w.approved(10, DEST_A).await, w.approved(20, DEST_B).await, w.approved(30, DEST_A).await);
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let (a1, a2, a3) = (
        sign(&mut s, &p1, &wallet.id, 1_000).await,
        sign(&mut s, &p2, &wallet.id, 1_000).await,
        sign(&mut s, &p3, &wallet.id, 1_000).await,
    );
    s.commit().await.unwrap();
    let confirm = |p: &Payout, a: &Attempt| {
        settlement(
            p,
            a,
            AttemptStatus::Signed,
            AttemptStatus::Confirmed,
            &a.txs[0].hash,
            PayoutStatus::Paid,
            None,
        )
    };
    let (n1, n2, n3) = (w.now(&p1).await, w.now(&p2).await, w.now(&p3).await);
    let mut stale = confirm(&n2, &a2);
    transition_of(&mut stale).from_version -= 1;
    let outcomes =
        w.store.settle_attempts(&[confirm(&n1, &a1), stale, confirm(&n3, &a3)]).await.unwrap();
    let applied: Vec<bool> =
        outcomes.iter().map(|o| matches!(o, TransitionOutcome::Applied(_))).collect();
    assert_eq!(applied, vec![true, false, true]);
    assert_eq!(
        w.only_attempt(&p2).await.status,
        AttemptStatus::Signed,
        "the stale one was rolled back alone"
    );
    assert_eq!(
        (w.now(&p1).await.status, w.now(&p2).await.status, w.now(&p3).await.status),
        (PayoutStatus::Paid, PayoutStatus::Processing, PayoutStatus::Paid)
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(40), Amount::from_u128(20)),
        "10 and 30 left; 20 still held"
    );
    assert!(w.store.settle_attempts(&[]).await.unwrap().is_empty());
    w.assert_ledger_clean().await;
}

/// A sweep mixing every kind of end: paid with a mined hash and a fee journal, failed with its proof,
/// needs_attention with an incident, a stale one and a second settlement of a payout already settled
/// in the sweep. Written together, each lands exactly as it would alone (PostgreSQL writes the plain
/// transitions with one statement per table, the rest one by one, in the same transaction).
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_mixed_sweep_written_together_lands_as_each_would_alone(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let (p1, p2, p3, p4) = (
        w.approved(10, DEST_A).await,
        w.approved(20, DEST_B).await,
        w.approved(30, DEST_A).await,
        w.approved(5, DEST_B).await,
    );
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let mut attempts = Vec::new();
    for p in [&p1, &p2, &p3, &p4] {
        attempts.push(sign(&mut s, p, &wallet.id, 1_000).await);
    }
    s.commit().await.unwrap();
    let (n1, n2, n3, n4) = (w.now(&p1).await, w.now(&p2).await, w.now(&p3).await, w.now(&p4).await);
    let landed = attempts[0].txs[0].hash.clone();
    let mut paid = settlement(
        &n1,
        &attempts[0],
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &landed,
        PayoutStatus::Paid,
        None,
    );
    paid.mined = Some((1_234, landed.clone()));
    transition_of(&mut paid).journals.push(Journal::fee(
        &wallet.id,
        &eth(),
        landed.as_str(),
        Amount::from_u128(7),
    ));
    let proof = "cancel 0xabc final in block 9";
    let failed = settlement(
        &n2,
        &attempts[1],
        AttemptStatus::Signed,
        AttemptStatus::Dead,
        proof,
        PayoutStatus::Failed,
        None,
    );
    let opened =
        incident(IncidentKind::Reverted, Some(&n3), Some(&attempts[2]), "status 0 receipt", 5_000);
    let attention = settlement(
        &n3,
        &attempts[2],
        AttemptStatus::Signed,
        AttemptStatus::Reverted,
        "reverted",
        PayoutStatus::NeedsAttention,
        Some(opened.clone()),
    );
    let mut stale = settlement(
        &n4,
        &attempts[3],
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        "x",
        PayoutStatus::Paid,
        None,
    );
    transition_of(&mut stale).from_version -= 1;
    let twice = paid.clone();

    let outcomes = w.store.settle_attempts(&[paid, failed, attention, stale, twice]).await.unwrap();
    let applied: Vec<bool> =
        outcomes.iter().map(|o| matches!(o, TransitionOutcome::Applied(_))).collect();
    assert_eq!(applied, vec![true, true, true, false, false]);
    let TransitionOutcome::Applied(first) = &outcomes[0] else { unreachable!() };
    assert_eq!(
        (first.id.clone(), first.status, first.version),
        (p1.id.clone(), PayoutStatus::Paid, n1.version + 1),
        "the payout as it reads now"
    );
    let statuses = (
        w.now(&p1).await.status,
        w.now(&p2).await.status,
        w.now(&p3).await.status,
        w.now(&p4).await.status,
    );
    assert_eq!(
        statuses,
        (
            PayoutStatus::Paid,
            PayoutStatus::Failed,
            PayoutStatus::NeedsAttention,
            PayoutStatus::Processing
        )
    );
    let a1 = w.only_attempt(&p1).await;
    assert_eq!((a1.status, a1.mined), (AttemptStatus::Confirmed, Some((1_234, landed.clone()))));
    assert_eq!(w.only_attempt(&p2).await.status, AttemptStatus::Dead);
    assert_eq!(
        w.db.scalar_raw(&format!("SELECT count(*) FROM attempts WHERE death_proof = '{proof}'"))
            .await,
        1
    );
    assert_eq!(w.only_attempt(&p3).await.status, AttemptStatus::Reverted);
    assert_eq!(
        w.only_attempt(&p4).await.status,
        AttemptStatus::Signed,
        "the stale one wrote nothing"
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(55), Amount::from_u128(35)),
        "10 paid, 20 released, 30 and 5 still held"
    );
    for (kind, n) in [("settle", 1), ("release", 1), ("fee", 1)] {
        assert_eq!(
            w.db.scalar_raw(&format!("SELECT count(*) FROM journals WHERE kind = '{kind}'")).await,
            n,
            "{kind} journals"
        );
    }
    for (event, n) in [
        (EventType::PayoutPaid, 1),
        (EventType::PayoutFailed, 1),
        (EventType::PayoutNeedsAttention, 1),
        (EventType::IncidentOpened, 1),
    ] {
        assert_eq!(w.store.count_events(&w.m, event).await.unwrap(), n, "{event:?} events");
    }
    let open: Vec<IncidentId> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(open, vec![opened.id.clone()]);
    w.assert_ledger_clean().await;
}

/// A sweep in which one journal would draw more than is held writes nothing at all: the ledger is
/// already wrong, and no other settlement of the sweep may hide it.
async fn a_sweep_whose_journal_exceeds_the_hold_writes_nothing(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let (p1, p2) = (w.approved(10, DEST_A).await, w.approved(20, DEST_B).await);
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let (a1, a2) =
        (sign(&mut s, &p1, &wallet.id, 1_000).await, sign(&mut s, &p2, &wallet.id, 1_000).await);
    s.commit().await.unwrap();
    let (n1, n2) = (w.now(&p1).await, w.now(&p2).await);
    let good = settlement(
        &n1,
        &a1,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &a1.txs[0].hash,
        PayoutStatus::Paid,
        None,
    );
    let mut too_much = settlement(
        &n2,
        &a2,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &a2.txs[0].hash,
        PayoutStatus::Paid,
        None,
    );
    transition_of(&mut too_much).journals =
        vec![Journal::settle(&w.m, &usdc(), p2.id.as_str(), Amount::from_u128(31))];
    let refused = w.store.settle_attempts(&[good, too_much]).await;
    assert!(
        matches!(refused, Err(StoreError::Invariant(_))),
        "an overdrawn hold is a broken invariant: {refused:?}"
    );
    assert_eq!(
        (w.now(&p1).await.status, w.now(&p2).await.status),
        (PayoutStatus::Processing, PayoutStatus::Processing)
    );
    assert_eq!(
        (w.only_attempt(&p1).await.status, w.only_attempt(&p2).await.status),
        (AttemptStatus::Signed, AttemptStatus::Signed)
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(70), Amount::from_u128(30)),
        "every hold stands"
    );
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'settle'").await, 0);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutPaid).await.unwrap(), 0);
    w.assert_ledger_clean().await;
}

payoutd_testkit::both_stores!(
    settlements_written_together_apply_or_stay_stale_one_by_one,
    a_mixed_sweep_written_together_lands_as_each_would_alone,
    a_sweep_whose_journal_exceeds_the_hold_writes_nothing,
    a_settlement_records_the_final_mined_hash,
    settle_attempt_confirm_pays_and_settles_once,
    settle_attempt_dead_fails_and_releases_only_with_proof,
    settle_attempt_reverted_needs_attention_keeps_the_hold_and_opens_an_incident,
    add_attempt_tx_only_on_live_attempts,
    live_attempts_returns_every_hash,
);
