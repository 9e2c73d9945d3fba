//! What the workers read on both stores: reconciliation's cursors and incidents, volumes, every rail's slot, the sweep's order and leases, a payout's history, the detection lease.

use super::*;

/// SPEC 8.10's bookkeeping: the per-wallet cursor starts once and only moves forward from where the
/// mover saw it; an unmatched transfer's incident is opened once per hash, with no merchant event;
/// only stored transaction hashes count as ours.
async fn reconciliation_cursor_incidents_and_known_hashes(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let wallet = w.wallet(WALLET_1).await;
    assert_eq!(w.lines.reconcile_cursor(&wallet.id).await.unwrap(), None, "no pass yet");
    assert_eq!(w.lines.start_reconcile_cursor(&wallet.id, 40).await.unwrap(), 40);
    assert_eq!(
        w.lines.start_reconcile_cursor(&wallet.id, 90).await.unwrap(),
        40,
        "a second start changes nothing"
    );
    assert!(w.lines.advance_reconcile_cursor(&wallet.id, 40, 52).await.unwrap());
    assert!(
        !w.lines.advance_reconcile_cursor(&wallet.id, 40, 60).await.unwrap(),
        "another worker moved it first"
    );
    assert_eq!(w.lines.reconcile_cursor(&wallet.id).await.unwrap(), Some(52));
    assert!(matches!(w.lines.reconcile_cursor("hw_nope").await, Err(StoreError::Invariant(_))));

    let p = w.approved(10, DEST_A).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let ours = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let stranger = hash(0x99);
    let known = w.store.tx_owners(&[stranger.clone(), ours.txs[0].hash.clone()]).await.unwrap();
    assert_eq!(known, vec![(ours.txs[0].hash.clone(), p.id.clone())]);

    let unmatched =
        incident(IncidentKind::UnmatchedTransfer, None, None, "hot wallet sent a stranger", 5_000);
    assert!(w.store.open_incident_once(&unmatched, stranger.as_str()).await.unwrap());
    let again =
        incident(IncidentKind::UnmatchedTransfer, None, None, "hot wallet sent a stranger", 5_001);
    assert!(
        !w.store.open_incident_once(&again, stranger.as_str()).await.unwrap(),
        "one incident per hash"
    );
    let open = w.store.open_incidents(10).await.unwrap();
    assert_eq!(open.iter().filter(|i| i.kind == IncidentKind::UnmatchedTransfer).count(), 1);
    assert_eq!(
        w.db.scalar_raw(
            "SELECT count(*) FROM events WHERE type = 'incident.opened' AND merchant_id IS NULL"
        )
        .await,
        1,
        "one operator event, concerning no merchant"
    );
    assert!(
        w.store.resolve_incident(&unmatched.id, "operator top-up, known", 6_000).await.unwrap()
    );
    assert!(
        !w.store.resolve_incident(&unmatched.id, "again", 6_001).await.unwrap(),
        "resolved once"
    );
    assert_eq!(
        w.db.scalar_raw(
            "SELECT count(*) FROM events WHERE type = 'incident.resolved' AND merchant_id IS NULL"
        )
        .await,
        1
    );
    assert!(
        !w.store.open_incident_once(&again, stranger.as_str()).await.unwrap(),
        "a resolved one is not opened again"
    );
}

async fn similar_payouts_are_counted_within_the_window(db: TestDb) {
    let w = World::new(db).await;
    let (other, _) = w.engine.create_merchant("globex", [2u8; 32]).await.unwrap();
    for m in [&w.m, &other] {
        w.fund(m, &usdc(), 1_000).await;
        w.fund(m, &eth(), 1_000).await;
    }
    let p1 = w.create(&w.m, &usdc(), 10, DEST_A).await;
    let p2 = w.create(&w.m, &usdc(), 10, &DEST_A.to_lowercase()).await;
    let p3 = w.create(&w.m, &usdc(), 11, DEST_A).await;
    w.create(&w.m, &usdc(), 10, DEST_B).await;
    w.create(&w.m, &eth(), 10, DEST_A).await;
    w.create(&other, &usdc(), 10, DEST_A).await;
    let canceled = w.create(&w.m, &usdc(), 10, DEST_A).await;
    w.engine.cancel_payout(&w.m, &canceled.id).await.unwrap();

    assert_eq!(
        w.store.count_similar_payouts(&p1, 0).await.unwrap(),
        1,
        "only p2: not itself, not canceled, not other params"
    );
    assert_eq!(w.store.count_similar_payouts(&p2, 0).await.unwrap(), 1);
    assert_eq!(w.store.count_similar_payouts(&p3, 0).await.unwrap(), 0);
    assert_eq!(
        w.store.count_similar_payouts(&p1, p2.created_at_ms + 1).await.unwrap(),
        0,
        "outside the window"
    );
    assert_eq!(w.store.payout_by_id(&p2.id).await.unwrap().as_ref(), Some(&p2));
    assert!(w.store.payout_by_id(&payoutd_domain::PayoutId::new()).await.unwrap().is_none());
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn volumes_count_signed_attempts_except_dead_ones(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 1_000).await;
    let (p1, p2, p3, q1) = (
        w.approved(10, DEST_A).await,
        w.approved(20, DEST_A).await,
        w.approved(5, DEST_B).await,
        w.approved(7, DEST_A).await,
    );
    w.approved(1_000 - 42, DEST_A).await; // approved but never signed: not volume
    let (w1, w2) = (w.wallet(WALLET_1).await, w.wallet(WALLET_2).await);
    let mut s = session(&w.lines, &w1.id).await;
    let a1 = sign(&mut s, &p1, &w1.id, 1_000).await;
    let a2 = sign(&mut s, &p2, &w1.id, 2_000).await;
    sign(&mut s, &p3, &w1.id, 2_000).await;
    s.commit().await.unwrap();
    let mut s = session(&w.lines, &w2.id).await;
    sign(&mut s, &q1, &w2.id, 3_000).await;
    s.commit().await.unwrap();

    let to = |text: &str, since: i64| {
        let store = w.store.clone();
        let destination = dest(text);
        async move { store.destination_volume_since(&usdc(), &destination, since).await.unwrap() }
    };
    // What a signing session on the wallet reads for its cap (then rolled back).
    let of = |id: &str, since: i64| {
        let (lines, id, payout) = (w.lines.clone(), id.to_owned(), p1.clone());
        let caps = CapCheck {
            per_destination_per_hour: Amount::MAX,
            per_account_per_hour: Amount::MAX,
            since_ms: since,
            review_event: payoutd_domain::EventId::derive(
                payoutd_domain::EventType::PayoutReviewApproved,
                payout.id.as_str(),
            ),
        };
        async move { session(&lines, &id).await.cap_reading(&payout, &caps).await.unwrap().of_account }
    };
    let n = Amount::from_u128;
    assert_eq!(to(DEST_A, 0).await, n(37), "across wallets");
    assert_eq!(to(DEST_A, 1_500).await, n(27));
    assert_eq!(to(DEST_A, 3_001).await, n(0));
    assert_eq!(to(DEST_B, 0).await, n(5));
    assert_eq!(
        w.store.destination_volume_since(&eth(), &dest(DEST_A), 0).await.unwrap(),
        n(0),
        "per asset"
    );
    assert_eq!(of(&w1.id, 0).await, n(35));
    assert_eq!(of(&w1.id, 1_500).await, n(25));
    assert_eq!(of(&w2.id, 0).await, n(7));

    w.settle(
        &a2,
        AttemptStatus::Signed,
        AttemptStatus::Dead,
        "cancel confirmed",
        PayoutStatus::Failed,
        None,
    )
    .await
    .unwrap();
    w.settle(
        &a1,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &a1.txs[0].hash,
        PayoutStatus::Paid,
        None,
    )
    .await
    .unwrap();
    assert_eq!(to(DEST_A, 0).await, n(17), "a dead attempt sent nothing; a confirmed one did");
    assert_eq!(of(&w1.id, 0).await, n(15));
}

/// Every rail's slot round-trips through the `attempts` row, and the schema refuses half a slot.
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn attempt_slots_of_every_rail_round_trip(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(10, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let blob = if w.db.is_postgres() { "'\\x02ab'" } else { "X'02ab'" };
    let insert = |no: i32, columns: &str, values: &str| {
        let id = AttemptId::new();
        let attempt = format!(
            "INSERT INTO attempts (id, payout_id, attempt_no, status, death_proof, created_at_ms, updated_at_ms, {columns}) \
             VALUES ('{id}', '{}', {no}, 'dead', 'test', 0, 0, {values})",
            p.id
        );
        let tx = format!(
            "INSERT INTO attempt_transactions (tx_hash, attempt_id, kind, raw, created_at_ms) VALUES ('sig{no}', '{id}', 'original', {blob}, 0)"
        );
        (attempt, tx)
    };
    let rows = [
        insert(1, "rail, hot_wallet_id, nonce", &format!("'evm', '{}', 7", wallet.id)),
        insert(
            2,
            "rail, hot_wallet_id, last_valid_block_height",
            &format!("'solana', '{}', 123456", wallet.id),
        ),
        insert(
            3,
            "rail, hot_wallet_id, nonce_account",
            &format!("'solana', '{}', 'NonceAcct1'", wallet.id),
        ),
        insert(
            4,
            "rail, provider, provider_key, provider_ref, hot_wallet_id, provider_creates_for_ms",
            &format!(
                "'provider', 'circle', 'f3b2c1d0-0000-4000-8000-000000000001', 'tr_9', '{}', 900000",
                wallet.id
            ),
        ),
        insert(5, "rail, provider, provider_key", "'provider', 'stripe', 'key-5'"),
        insert(
            11,
            "rail, hot_wallet_id, nonce_account, nonce_value, signed_at_block_height",
            &format!("'solana', '{}', 'NonceAcct1', 'Value1', 77", wallet.id),
        ),
    ];
    for (attempt, tx) in &rows {
        w.db.exec_raw(attempt).await.unwrap();
        w.db.exec_raw(tx).await.unwrap();
    }
    let slots: Vec<AttemptSlot> =
        w.store.attempts_of(&p.id).await.unwrap().into_iter().map(|a| a.slot).collect();
    assert_eq!(
        slots,
        vec![
            AttemptSlot::Evm(EvmSlot { wallet_id: wallet.id.clone(), nonce: 7 }),
            AttemptSlot::Solana {
                fee_payer: wallet.id.clone(),
                expiry: SolanaExpiry::LastValidBlockHeight(123_456)
            },
            // Stored before the nonce value was kept: the rail reads it from the bytes.
            AttemptSlot::Solana {
                fee_payer: wallet.id.clone(),
                expiry: SolanaExpiry::DurableNonce {
                    account: "NonceAcct1".into(),
                    value: String::new(),
                    signed_at_block_height: 0
                },
            },
            AttemptSlot::Provider {
                provider: "circle".into(),
                idempotency_key: "f3b2c1d0-0000-4000-8000-000000000001".into(),
                reference: Some(TxRef::parse("tr_9").unwrap()),
                wallet: Some(wallet.id.clone()),
                key_spent_at_ms: None,
                creates_for_ms: Some(900_000),
            },
            AttemptSlot::Provider {
                provider: "stripe".into(),
                idempotency_key: "key-5".into(),
                reference: None,
                wallet: None,
                key_spent_at_ms: None,
                creates_for_ms: None,
            },
            AttemptSlot::Solana {
                fee_payer: wallet.id.clone(),
                expiry: SolanaExpiry::DurableNonce {
                    account: "NonceAcct1".into(),
                    value: "Value1".into(),
                    signed_at_block_height: 77
                },
            },
        ]
    );
    // One attempt per durable nonce value, ever: a second on the same value is refused.
    let (twin, _) = insert(
        12,
        "rail, hot_wallet_id, nonce_account, nonce_value, signed_at_block_height",
        &format!("'solana', '{}', 'NonceAcct1', 'Value1', 78", wallet.id),
    );
    assert!(w.db.exec_raw(&twin).await.is_err(), "a second attempt on one nonce value");
    // The dashboard's search finds the payout by the provider's id of its transfer.
    let views = w.db.operator_views();
    assert_eq!(views.payout_by_provider_reference("tr_9").await.unwrap(), Some(p.id.clone()));
    assert_eq!(views.payout_by_provider_reference("tr_10").await.unwrap(), None);
    // One attempt per provider idempotency key, ever (both databases).
    let (same_key, _) = insert(6, "rail, provider, provider_key", "'provider', 'stripe', 'key-5'");
    assert!(w.db.exec_raw(&same_key).await.is_err(), "a provider key names one request");
    if w.db.is_postgres() {
        for (no, columns, values) in [
            (7, "rail, provider", "'provider', 'circle'".to_owned()),
            (
                8,
                "rail, hot_wallet_id, last_valid_block_height, nonce_account",
                format!("'solana', '{}', 1, 'both'", wallet.id),
            ),
            (9, "rail, hot_wallet_id", format!("'solana', '{}'", wallet.id)),
            (10, "rail, hot_wallet_id, nonce", format!("'tron', '{}', 1", wallet.id)),
        ] {
            let (half, _) = insert(no, columns, &values);
            assert!(w.db.exec_raw(&half).await.is_err(), "refused: {values}");
        }
    }
}

/// The sweep's order on both stores: each wallet's line in turn, inside a line the lowest nonce
/// first, an attempt whose payout waits for a person after every other of its line; the limit takes
/// the first places of every line, so a long line cannot crowd out a short one.
async fn the_sweep_serves_each_wallets_line_in_turn_and_waiting_payouts_last(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 1_000).await;
    let (one, two) = (w.wallet(WALLET_1).await, w.wallet(WALLET_2).await);
    // Payouts first: on SQLite a signing session holds the one writer until it commits.
    let mut payouts_1 = Vec::new();
    for amount in [1, 2, 3, 4] {
        payouts_1.push(w.approved(amount, DEST_A).await);
    }
    let (p5, p6) = (w.approved(5, DEST_B).await, w.approved(6, DEST_B).await);
    let mut line_1 = Vec::new();
    let mut s = session(&w.lines, &one.id).await;
    for p in &payouts_1 {
        line_1.push(sign(&mut s, p, &one.id, 1_000).await.id);
    }
    s.commit().await.unwrap();
    let mut line_2 = Vec::new();
    let mut s = session(&w.lines, &two.id).await;
    for p in [&p5, &p6] {
        line_2.push(sign(&mut s, p, &two.id, 1_000).await.id);
    }
    s.commit().await.unwrap();
    let waiting = payouts_1[0].id.clone();
    // The payout of wallet 1's head waits for a person: its attempt goes to the back of its line.
    w.db.exec_raw(&format!("UPDATE payouts SET status = 'needs_attention' WHERE id = '{waiting}'"))
        .await
        .unwrap();
    let order = |v: Vec<(Attempt, Payout)>| v.into_iter().map(|(a, _)| a.id).collect::<Vec<_>>();
    // Ties between lines go by wallet id.
    let expected_3 = if one.id < two.id {
        vec![line_1[1].clone(), line_2[0].clone(), line_1[2].clone()]
    } else {
        vec![line_2[0].clone(), line_1[1].clone(), line_2[1].clone()]
    };
    assert_eq!(
        order(w.store.live_attempts(3).await.unwrap()),
        expected_3,
        "the first place of every line, then the second"
    );
    let all = order(w.store.live_attempts(10).await.unwrap());
    assert_eq!(all.len(), 6);
    assert_eq!(
        all.last(),
        Some(&line_1[0]),
        "the waiting payout's attempt comes after every other"
    );
    let places_of = |line: &Vec<AttemptId>| {
        line.iter().map(|id| all.iter().position(|x| x == id).unwrap()).collect::<Vec<_>>()
    };
    let (p1, p2) = (places_of(&line_1), places_of(&line_2));
    assert!(p1[1] < p1[2] && p1[2] < p1[3], "lowest nonce first inside a line: {p1:?}");
    assert!(p2[0] < p2[1], "lowest nonce first inside a line: {p2:?}");
    assert!(
        p2[1] < p1[3],
        "the short line is served in turn, not after the long one: {p1:?} {p2:?}"
    );
    assert_eq!(
        order(w.store.lease_live_attempts(&[usdc()], 3, 2_000, 10_000).await.unwrap()),
        expected_3,
        "leases take the same order"
    );
}

/// Two sweeps at once take different attempts: a lease holds until it is checked, released or
/// expired; a sweep takes only the assets its process pays.
async fn sweeps_lease_different_attempts_until_checked_released_or_expired(db: TestDb) {
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
    let ids = |v: Vec<(Attempt, Payout)>| v.into_iter().map(|(a, _)| a.id).collect::<Vec<_>>();
    const LEASE: i64 = 10_000;
    let elsewhere = AssetCode::parse("evm:31337/DAI").unwrap().0;
    assert!(
        w.store.lease_live_attempts(&[elsewhere], 10, 5_000, LEASE).await.unwrap().is_empty(),
        "a worker with no rail for the asset leases none of its attempts (before, it leased and released them every pass, filling its batch)"
    );
    let first = ids(w.store.lease_live_attempts(&[usdc()], 2, 5_000, LEASE).await.unwrap());
    assert_eq!(first, vec![a1.id.clone(), a2.id.clone()], "the head of the line first");
    let second = ids(w.store.lease_live_attempts(&[usdc()], 10, 5_001, LEASE).await.unwrap());
    assert_eq!(second, vec![a3.id.clone()], "a second sweep at once gets only what is free");
    assert!(w.store.lease_live_attempts(&[usdc()], 10, 5_002, LEASE).await.unwrap().is_empty());
    w.store.record_checked(std::slice::from_ref(&a1.id), 6_000).await.unwrap();
    w.store.release_leases(std::slice::from_ref(&a3.id)).await.unwrap();
    let third = ids(w.store.lease_live_attempts(&[usdc()], 10, 6_001, LEASE).await.unwrap());
    assert_eq!(
        third,
        vec![a1.id.clone(), a3.id.clone()],
        "checked and released attempts are free again"
    );
    let after_expiry =
        ids(w.store.lease_live_attempts(&[usdc()], 10, 5_000 + LEASE, LEASE).await.unwrap());
    assert_eq!(
        after_expiry,
        vec![a2.id.clone()],
        "an expired lease (a killed worker's) is free again"
    );
    assert_eq!(
        w.store.live_attempts(10).await.unwrap().len(),
        3,
        "leases hide nothing from plain reads"
    );
}

/// A payout's page reads its events, each ended attempt's evidence (a dead attempt's proof) and the
/// operator actions on it, and nothing of another payout.
async fn a_payouts_history_holds_its_events_the_proof_of_death_and_operator_actions(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let other = w.approved(10, DEST_B).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let attempt = sign(&mut s, &p, &wallet.id, 1_000).await;
    sign(&mut s, &other, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let proof = "cancel 0xabc confirmed in block 7 at nonce 0";
    w.settle(
        &attempt,
        AttemptStatus::Signed,
        AttemptStatus::Dead,
        proof,
        PayoutStatus::Failed,
        None,
    )
    .await
    .unwrap();
    let views = w.db.operator_views();
    let action = payoutd_engine::OperatorAction {
        at_ms: 6_000,
        actor: "session:abc".into(),
        action: "resolve".into(),
        subject: p.id.to_string(),
        detail: "verdict failed".into(),
    };
    views.record_operator_action(&action).await.unwrap();
    let history = views.payout_history(&p.id, 1).await.unwrap();
    let types: Vec<&str> = history.events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types,
        vec!["payout.created", "payout.approved", "payout.processing", "payout.failed"]
    );
    assert_eq!(history.evidence, vec![(1, proof.to_owned())]);
    assert_eq!(history.actions, vec![action]);
    let untouched = views.payout_history(&other.id, 1).await.unwrap();
    assert_eq!(
        (untouched.evidence.len(), untouched.actions.len(), untouched.events.len()),
        (0, 0, 3)
    );
}

/// A scope's detection lease is held by one worker until it ends it or it expires; ending an
/// expired lease does not end the lease another worker took since.
async fn a_detection_lease_is_held_by_one_worker_until_released_or_expired(db: TestDb) {
    let store = db.pipeline();
    let (now, lease) = (1_000_i64, 30_000_i64);
    assert!(store.lease_detection("evm:1", now, now + lease).await.unwrap());
    assert!(!store.lease_detection("evm:1", now + 1, now + 1 + lease).await.unwrap(), "held");
    assert!(store.lease_detection("evm:2", now + 1, now + 1 + lease).await.unwrap(), "per scope");
    store.release_detection("evm:1", now + lease).await.unwrap();
    assert!(store.lease_detection("evm:1", now + 2, now + 2 + lease).await.unwrap(), "released");

    // The holder is killed: its lease expires and another worker takes the scope; the killed
    // worker's late release leaves the new lease in place.
    let expired = now + 2 + lease;
    assert!(store.lease_detection("evm:1", expired, expired + lease).await.unwrap(), "expired");
    store.release_detection("evm:1", expired).await.unwrap();
    assert!(!store.lease_detection("evm:1", expired + 1, expired + 1 + lease).await.unwrap());
}

payoutd_testkit::both_stores!(
    a_detection_lease_is_held_by_one_worker_until_released_or_expired,
    a_payouts_history_holds_its_events_the_proof_of_death_and_operator_actions,
    sweeps_lease_different_attempts_until_checked_released_or_expired,
    the_sweep_serves_each_wallets_line_in_turn_and_waiting_payouts_last,
    attempt_slots_of_every_rail_round_trip,
    reconciliation_cursor_incidents_and_known_hashes,
    similar_payouts_are_counted_within_the_window,
    volumes_count_signed_attempts_except_dead_ones,
);
