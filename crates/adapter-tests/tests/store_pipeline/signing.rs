//! Signing sessions on both stores: contiguous nonces, one session per wallet, claims, the counter that never lowers, next attempts and the caps across wallets.

use super::*;

async fn nonces_are_contiguous_and_a_dropped_session_leaves_no_gap(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let mut payouts = Vec::new();
    for _ in 0..4 {
        payouts.push(w.approved(10, DEST_A).await);
    }
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    assert_eq!(s.next_nonce(), 0);
    let claimed = s.claim_approved(&[usdc()], 3).await.unwrap();
    assert_eq!(ids(&claimed), ids(&payouts[..3]), "oldest first, at most the limit");
    for p in &claimed {
        sign(&mut s, p, &wallet.id, 1_000).await;
    }
    assert_eq!(s.next_nonce(), 3);
    s.commit().await.unwrap();
    let nonces: Vec<u64> =
        futures::future::join_all(payouts[..3].iter().map(|p| w.only_attempt(p)))
            .await
            .iter()
            .map(|a| a.nonce())
            .collect();
    assert_eq!(nonces, vec![0, 1, 2]);
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 3);

    // 8.12: a crash between nonce allocation and commit.
    let mut s = session(&w.lines, &wallet.id).await;
    let claimed = s.claim_approved(&[usdc()], 10).await.unwrap();
    assert_eq!(ids(&claimed), ids(&payouts[3..]));
    sign(&mut s, &claimed[0], &wallet.id, 2_000).await;
    assert_eq!(s.next_nonce(), 4);
    drop(s);
    let mut s = session(&w.lines, &wallet.id).await;
    assert_eq!(s.next_nonce(), 3, "the dropped session's nonce is handed out again: no gap");
    assert!(
        w.store.attempts_of(&payouts[3].id).await.unwrap().is_empty(),
        "no attempt row survived"
    );
    assert_eq!(w.now(&payouts[3]).await.status, PayoutStatus::Approved);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(), 3);
    let claimed = s.claim_approved(&[usdc()], 10).await.unwrap();
    assert_eq!(ids(&claimed), ids(&payouts[3..]), "the payout is claimable again");
    assert_eq!(sign(&mut s, &claimed[0], &wallet.id, 3_000).await.nonce(), 3);
    s.commit().await.unwrap();
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 4);
    assert_eq!(w.db.scalar_raw("SELECT count(*) FROM attempts").await, 4);
}

/// Payouts with metadata near the limit make PostgreSQL's batched commit split the batch into many
/// statements; the batch must still land whole, in nonce order, or not at all.
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_large_signing_batch_is_stored_whole_and_one_refusal_stores_none_of_it(db: TestDb) {
    const BATCH: usize = 40;
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 1_000_000).await;
    let metadata =
        Metadata::from_canonical_json(format!("{{\"note\":\"{}\"}}", "x".repeat(3_000))).unwrap();
    let mut payouts = Vec::new();
    for i in 0..2 * BATCH {
        let key = PayoutKey::parse(&format!("big-batch-{i:04}")).unwrap();
        let request = PayoutRequest::new(
            key,
            usdc(),
            Amount::from_u128(10 + i as u128),
            dest(DEST_A),
            metadata.clone(),
        );
        payouts.push(w.approve(w.engine.create_payout(&w.m, request).await.unwrap().0).await);
    }
    let wallet = w.wallet(WALLET_1).await;

    let mut s = session(&w.lines, &wallet.id).await;
    let claimed = s.claim_approved(&[usdc()], BATCH as u32).await.unwrap();
    assert_eq!(claimed.len(), BATCH);
    let mut signed = Vec::new();
    for p in &claimed {
        signed.push(sign(&mut s, p, &wallet.id, 1_000).await);
    }
    s.commit().await.unwrap();
    for (p, attempt) in claimed.iter().zip(&signed) {
        assert_eq!(
            &w.only_attempt(p).await,
            attempt,
            "stored exactly as signed, raw bytes included"
        );
        let now = w.now(p).await;
        assert_eq!((now.status, now.version), (PayoutStatus::Processing, p.version + 1));
    }
    assert_eq!(
        signed.iter().map(|a| a.nonce()).collect::<Vec<_>>(),
        (0..BATCH as u64).collect::<Vec<_>>()
    );
    assert_eq!(
        w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(),
        BATCH as u64
    );
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, BATCH as u64);

    // A stale copy in the middle of the next batch (a version that is not the stored one, I5).
    let mut s = session(&w.lines, &wallet.id).await;
    let mut claimed = s.claim_approved(&[usdc()], BATCH as u32).await.unwrap();
    assert_eq!(claimed.len(), BATCH);
    claimed[BATCH / 2].version += 7;
    let mut refusal = None;
    for p in &claimed {
        let attempt = Attempt {
            id: AttemptId::new(),
            payout_id: p.id.clone(),
            attempt_no: 1,
            status: AttemptStatus::Signed,
            slot: AttemptSlot::Evm(EvmSlot { wallet_id: wallet.id.clone(), nonce: s.next_nonce() }),
            txs: vec![tx(TxKind::Original, 0x80, (2_000_000_000, 1_000_000_000), 2_000)],
            mined: None,
            last_sent_at_ms: 0,
            created_at_ms: 2_000,
            updated_at_ms: 2_000,
        };
        let mut after = p.clone();
        after.status = PayoutStatus::Processing;
        after.version += 1;
        if let Err(e) = s
            .record_signed(
                p,
                &attempt,
                &NewEvent::for_payout(EventType::PayoutProcessing, &after, 2_000),
            )
            .await
        {
            refusal = Some(e);
            break;
        }
    }
    // SQLite refuses at once, PostgreSQL when the batch is written at commit.
    let refusal = match refusal {
        Some(e) => Err(e),
        None => s.commit().await,
    };
    match refusal {
        Err(StoreError::Invariant(message)) => {
            assert!(message.contains("not approved at version"), "{message}")
        }
        other => panic!("a stale payout in the batch must refuse the session, got {other:?}"),
    }
    for p in &payouts[BATCH..] {
        assert!(
            w.store.attempts_of(&p.id).await.unwrap().is_empty(),
            "no attempt of the refused batch survived"
        );
        assert_eq!(w.now(p).await.status, PayoutStatus::Approved);
    }
    assert_eq!(
        w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(),
        BATCH as u64
    );
    assert_eq!(
        w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce,
        BATCH as u64,
        "no nonce consumed"
    );
    w.assert_ledger_clean().await;
}

async fn concurrent_sessions_on_one_wallet_never_share_a_nonce(db: TestDb) {
    const PAYOUTS: u64 = 40;
    const WORKERS: usize = 8;
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), u128::from(PAYOUTS)).await;
    let mut payouts = Vec::new();
    for _ in 0..PAYOUTS {
        payouts.push(w.approved(1, DEST_A).await);
    }
    let wallet = w.wallet(WALLET_1).await;
    let tasks: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (store, wallet_id) = (w.lines.clone(), wallet.id.clone());
            tokio::spawn(async move {
                let (mut signed, mut skipped) = (0u64, 0u64);
                loop {
                    let Some(mut s) = store.begin_signing(&wallet_id).await.unwrap() else {
                        skipped += 1;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    };
                    let claimed = s.claim_approved(&[usdc()], 3).await.unwrap();
                    if claimed.is_empty() {
                        return (signed, skipped);
                    }
                    for p in &claimed {
                        sign(&mut s, p, &wallet_id, 1_000).await;
                        signed += 1;
                    }
                    s.commit().await.unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let results: Vec<(u64, u64)> =
        futures::future::join_all(tasks).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        results.iter().map(|r| r.0).sum::<u64>(),
        PAYOUTS,
        "every payout signed once across the workers"
    );
    let mut nonces = Vec::new();
    for p in &payouts {
        nonces.push(w.only_attempt(p).await.nonce());
        assert_eq!(w.now(p).await.status, PayoutStatus::Processing);
    }
    nonces.sort_unstable();
    assert_eq!(nonces, (0..PAYOUTS).collect::<Vec<_>>(), "contiguous from 0, no duplicate");
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, PAYOUTS);
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(), PAYOUTS);
    w.assert_ledger_clean().await;
}

async fn two_sessions_never_claim_the_same_payout(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let mut payouts = Vec::new();
    for _ in 0..5 {
        payouts.push(w.approved(10, DEST_A).await);
    }
    let (w1, w2) = (w.wallet(WALLET_1).await, w.wallet(WALLET_2).await);
    let mut s1 = session(&w.lines, &w1.id).await;
    let first = s1.claim_approved(&[usdc()], 3).await.unwrap();
    assert_eq!(ids(&first), ids(&payouts[..3]));
    let second: Vec<Payout> = if w.db.is_postgres() {
        // Both sessions are open at once; FOR UPDATE SKIP LOCKED passes over s1's rows.
        let mut s2 = session(&w.lines, &w2.id).await;
        let second = s2.claim_approved(&[usdc()], 10).await.unwrap();
        for p in &second {
            sign(&mut s2, p, &w2.id, 1_000).await;
        }
        s2.commit().await.unwrap();
        for p in &first {
            sign(&mut s1, p, &w1.id, 1_000).await;
        }
        s1.commit().await.unwrap();
        second
    } else {
        // SQLite: the second session waits for the first to finish, then sees only what is left.
        let (store, w2_id) = (w.lines.clone(), w2.id.clone());
        let other = tokio::spawn(async move {
            let mut s2 = session(&store, &w2_id).await;
            let second = s2.claim_approved(&[usdc()], 10).await.unwrap();
            for p in &second {
                sign(&mut s2, p, &w2_id, 1_000).await;
            }
            s2.commit().await.unwrap();
            second
        });
        tokio::time::sleep(BLOCKED_PROBE).await;
        assert!(!other.is_finished(), "a second session waits while the first is open");
        for p in &first {
            sign(&mut s1, p, &w1.id, 1_000).await;
        }
        s1.commit().await.unwrap();
        other.await.unwrap()
    };
    assert_eq!(ids(&second), ids(&payouts[3..]), "the second session got exactly the rest");
    for p in &payouts {
        let a = w.only_attempt(p).await;
        let expected = if first.iter().any(|f| f.id == p.id) { &w1.id } else { &w2.id };
        assert_eq!(a.wallet_id(), expected.as_str());
    }
    assert_eq!(w.lines.hot_wallet(&w1.id).await.unwrap().unwrap().next_nonce, 3);
    assert_eq!(w.lines.hot_wallet(&w2.id).await.unwrap().unwrap().next_nonce, 2);
}

async fn raise_nonce_floor_never_lowers(db: TestDb) {
    let w = World::new(db).await;
    let address = EvmAddress::parse(&WALLET_1.to_lowercase()).unwrap();
    let wallet = w.lines.ensure_hot_wallet(CHAIN_ID, &address, 5).await.unwrap();
    assert_eq!(wallet.id, HotWallet::id_for(CHAIN_ID, &address));
    assert_eq!((wallet.chain_id, wallet.address, wallet.next_nonce), (CHAIN_ID, address, 5));
    assert_eq!(
        w.db.scalar_raw(&format!("SELECT count(*) FROM hot_wallets WHERE address = '{WALLET_1}'"))
            .await,
        1,
        "stored EIP-55"
    );
    let again = w.lines.ensure_hot_wallet(CHAIN_ID, &address, 0).await.unwrap();
    assert_eq!(again, wallet, "registering again changes nothing, not even the counter");
    // 8.13: a resync that reads a lower (stale, failed) count never lowers the counter.
    assert_eq!(w.lines.raise_nonce_floor(&wallet.id, 3).await.unwrap(), 5);
    assert_eq!(w.lines.raise_nonce_floor(&wallet.id, 9).await.unwrap(), 9);
    assert_eq!(w.lines.raise_nonce_floor(&wallet.id, 0).await.unwrap(), 9);
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 9);
    assert!(w.lines.hot_wallet("hw_31337_missing").await.unwrap().is_none());
    assert!(matches!(
        w.lines.raise_nonce_floor("hw_31337_missing", 1).await,
        Err(StoreError::Invariant(_))
    ));
    assert!(matches!(
        w.lines.begin_signing("hw_31337_missing").await,
        Err(StoreError::Invariant(_))
    ));

    // A floor raised while a session signs waits for it, then keeps the higher of the two.
    w.fund(&w.m, &usdc(), 100).await;
    for _ in 0..3 {
        w.approved(10, DEST_A).await;
    }
    for (floor, expected) in [(10u64, 12u64), (20, 20)] {
        let mut s = session(&w.lines, &wallet.id).await;
        for p in s.claim_approved(&[usdc()], 10).await.unwrap() {
            sign(&mut s, &p, &wallet.id, 1_000).await;
        }
        let (store, id) = (w.lines.clone(), wallet.id.clone());
        let raise = tokio::spawn(async move { store.raise_nonce_floor(&id, floor).await.unwrap() });
        tokio::time::sleep(BLOCKED_PROBE).await;
        assert!(!raise.is_finished(), "the floor waits for the open session");
        s.commit().await.unwrap();
        assert_eq!(raise.await.unwrap(), expected);
        assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, expected);
    }
    assert_eq!(session(&w.lines, &wallet.id).await.next_nonce(), 20);
}

async fn one_live_attempt_per_payout_is_enforced(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(10, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let first = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();

    // A worker with a stale copy of the payout (still approved) tries a second attempt.
    let mut s = session(&w.lines, &wallet.id).await;
    let mut second = first.clone();
    second.id = AttemptId::new();
    second.attempt_no = 2;
    second.slot = AttemptSlot::Evm(EvmSlot {
        wallet_id: first.wallet_id().to_owned(),
        nonce: s.next_nonce(),
    });
    second.txs = vec![tx(TxKind::Original, 0x81, (3_000_000_000, 1_000_000_000), 2_000)];
    let mut after = p.clone();
    after.status = PayoutStatus::Processing;
    // A store may refuse at once (SQLite) or when the batch is written at commit (PostgreSQL).
    let refused = match s
        .record_signed(
            &p,
            &second,
            &NewEvent::for_payout(EventType::PayoutProcessing, &after, 2_000),
        )
        .await
    {
        Ok(()) => s.commit().await,
        Err(e) => {
            drop(s);
            Err(e)
        }
    };
    match refused {
        Err(StoreError::Invariant(message)) => assert!(
            message.contains("attempts_one_live") || message.contains("attempts.payout_id"),
            "refused by the one-live-attempt index: {message}"
        ),
        other => panic!("a second live attempt must be refused, got {other:?}"),
    }
    assert_eq!(w.only_attempt(&p).await, first);
    assert_eq!(
        w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce,
        1,
        "the refused nonce was not consumed"
    );
    assert_eq!(w.now(&p).await.status, PayoutStatus::Processing);
}

async fn hold_for_review_takes_no_nonce_and_claims_only_the_given_assets(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    w.fund(&w.m, &eth(), 100).await;
    let p_usdc = w.approved(10, DEST_A).await;
    let p_eth = w.create(&w.m, &eth(), 10, DEST_A).await;
    let p_eth = w.approve(p_eth).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    assert_eq!(
        ids(&s.claim_approved(&[usdc()], 10).await.unwrap()),
        ids(std::slice::from_ref(&p_usdc))
    );
    assert_eq!(
        ids(&s.claim_approved(&[eth()], 10).await.unwrap()),
        ids(std::slice::from_ref(&p_eth))
    );
    assert!(s.claim_approved(&[], 10).await.unwrap().is_empty());
    let mut held = p_usdc.clone();
    held.status = PayoutStatus::HeldForReview;
    held.version += 1;
    let to_review = PayoutTransition {
        payout_id: p_usdc.id.clone(),
        merchant_id: p_usdc.merchant_id.clone(),
        from: PayoutStatus::Approved,
        from_version: p_usdc.version,
        to: PayoutStatus::HeldForReview,
        journals: vec![],
        event: NewEvent::for_payout(EventType::PayoutHeldForReview, &held, 1_000),
        at_ms: 1_000,
    };
    s.transition(&to_review).await.unwrap();
    assert!(
        matches!(s.transition(&to_review).await, Err(StoreError::Invariant(_))),
        "a second move from a state left is refused"
    );
    assert_eq!(s.next_nonce(), 0, "holding uses no nonce");
    s.commit().await.unwrap();
    assert_eq!(w.now(&p_usdc).await.status, PayoutStatus::HeldForReview);
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 0);
    assert!(
        w.store
            .event_exists(&EventId::derive(EventType::PayoutHeldForReview, p_usdc.id.as_str()))
            .await
            .unwrap()
    );
    assert!(
        !w.store
            .event_exists(&EventId::derive(EventType::PayoutProcessing, p_usdc.id.as_str()))
            .await
            .unwrap()
    );
    assert!(w.store.attempts_of(&p_usdc.id).await.unwrap().is_empty());
    let mut s = session(&w.lines, &wallet.id).await;
    assert_eq!(
        ids(&s.claim_approved(&[usdc(), eth()], 10).await.unwrap()),
        ids(std::slice::from_ref(&p_eth))
    );
    let approved = w.store.payouts_in_status(PayoutStatus::Approved, 10).await.unwrap();
    assert_eq!(ids(&approved), ids(std::slice::from_ref(&p_eth)));
    assert_eq!(
        ids(&w.store.payouts_in_status(PayoutStatus::HeldForReview, 10).await.unwrap()),
        ids(std::slice::from_ref(&p_usdc))
    );
}

/// SPEC I3 and 4.5: a proven death and the wait for attempt n+1 are one write; the payout stays
/// `processing` under the same hold; one signing session creates attempt n+1 at the wallet's next
/// nonce, and only the awaited number.
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_proven_death_awaits_the_next_attempt_and_one_session_creates_it(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 100).await;
    let p = w.approved(40, DEST_A).await;
    let wallet = w.wallet(WALLET_1).await;
    let mut s = session(&w.lines, &wallet.id).await;
    let first = sign(&mut s, &p, &wallet.id, 1_000).await;
    s.commit().await.unwrap();
    let processing = w.now(&p).await;
    let death = |from_version: i64| AttemptSettlement {
        attempt_id: first.id.clone(),
        attempt_from: AttemptStatus::Signed,
        attempt_to: AttemptStatus::Dead,
        evidence: "nonce 0 used by a final block; no receipt for any stored hash".into(),
        mined: None,
        payout: PayoutEffect::AwaitNextAttempt(NextAttempt {
            payout_id: p.id.clone(),
            from_version,
            next_attempt_no: 2,
            at_ms: 5_000,
        }),
        incident: None,
        attempt_created_at_ms: 1_000,
    };
    assert!(matches!(
        w.store.settle_attempt(&death(processing.version - 1)).await.unwrap(),
        TransitionOutcome::Stale
    ));
    assert_eq!(
        w.only_attempt(&p).await.status,
        AttemptStatus::Signed,
        "a stale payout rolls the attempt back"
    );
    let TransitionOutcome::Applied(waiting) =
        w.store.settle_attempt(&death(processing.version)).await.unwrap()
    else {
        panic!("applies")
    };
    assert_eq!(
        (waiting.status, waiting.version),
        (PayoutStatus::Processing, processing.version + 1)
    );
    assert!(
        matches!(
            w.store.settle_attempt(&death(waiting.version)).await.unwrap(),
            TransitionOutcome::Stale
        ),
        "the attempt is dead already"
    );
    assert_eq!(
        w.balance().await,
        (Amount::from_u128(60), Amount::from_u128(40)),
        "the hold stands for the next attempt"
    );
    assert!(w.store.live_attempts(10).await.unwrap().is_empty());

    let mut s = session(&w.lines, &wallet.id).await;
    assert!(
        s.claim_approved(&[usdc()], 10).await.unwrap().is_empty(),
        "a processing payout is not approved"
    );
    assert!(s.claim_awaiting_next_attempt(&[eth()], 10).await.unwrap().is_empty(), "per asset");
    let claimed = s.claim_awaiting_next_attempt(&[usdc()], 10).await.unwrap();
    assert_eq!(
        claimed.iter().map(|(q, n)| (q.id.clone(), *n)).collect::<Vec<_>>(),
        vec![(p.id.clone(), 2)]
    );
    let (payout, _) = &claimed[0];
    let next = |attempt_no: u32, nonce: u64| Attempt {
        id: AttemptId::new(),
        payout_id: p.id.clone(),
        attempt_no,
        status: AttemptStatus::Signed,
        slot: AttemptSlot::Evm(EvmSlot { wallet_id: wallet.id.clone(), nonce }),
        txs: vec![tx(
            TxKind::Original,
            0x42 + attempt_no as u8,
            (2_000_000_000, 1_000_000_000),
            6_000,
        )],
        mined: None,
        last_sent_at_ms: 0,
        created_at_ms: 6_000,
        updated_at_ms: 6_000,
    };
    let refused = s.record_next_attempt(payout, &next(3, s.next_nonce())).await;
    assert!(
        matches!(refused, Err(StoreError::Invariant(_))),
        "only the awaited number: {refused:?}"
    );
    drop(s);
    let mut s = session(&w.lines, &wallet.id).await;
    let (payout, _) = s.claim_awaiting_next_attempt(&[usdc()], 10).await.unwrap().remove(0);
    let second = next(2, s.next_nonce());
    s.record_next_attempt(&payout, &second).await.unwrap();
    assert_eq!(s.next_nonce(), 2, "attempt 2 took the next nonce");
    s.commit().await.unwrap();
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 2);
    let attempts = w.store.attempts_of(&p.id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status, a.nonce())).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Dead, 0), (2, AttemptStatus::Signed, 1)]
    );
    let mut s = session(&w.lines, &wallet.id).await;
    assert!(s.claim_awaiting_next_attempt(&[usdc()], 10).await.unwrap().is_empty(), "created once");
    drop(s);
    let now = w.now(&p).await;
    assert_eq!((now.status, now.version), (PayoutStatus::Processing, waiting.version + 1));
    assert_eq!(
        w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(),
        1,
        "no second processing event"
    );
    w.settle(
        &second,
        AttemptStatus::Signed,
        AttemptStatus::Confirmed,
        &second.txs[0].hash,
        PayoutStatus::Paid,
        None,
    )
    .await
    .unwrap();
    assert_eq!(w.balance().await, (Amount::from_u128(60), Amount::ZERO), "paid once, by attempt 2");
    w.assert_ledger_clean().await;
}

/// I8 across wallets: a session of wallet 2 that pays the same destination reads its volume only
/// after wallet 1's session, which signed towards it, has committed (PostgreSQL: the destination's
/// advisory lock; SQLite: the single writer). Without it both would read 0 and both sign.
async fn racing_sessions_of_two_wallets_read_a_destination_volume_one_after_the_other(db: TestDb) {
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), 2_000).await;
    let (p1, p2) = (w.approved(600, DEST_A).await, w.approved(601, DEST_A).await);
    let (w1, w2) = (w.wallet(WALLET_1).await, w.wallet(WALLET_2).await);
    let mut s1 = session(&w.lines, &w1.id).await;
    let claimed = s1.claim_approved(&[usdc()], 1).await.unwrap();
    assert_eq!(ids(&claimed), ids(std::slice::from_ref(&p1)));
    s1.lock_destinations(&[(usdc(), dest(DEST_A))]).await.unwrap();
    sign(&mut s1, &p1, &w1.id, 1_000).await;

    let (lines, store) = (w.lines.clone(), w.store.clone());
    let w2_id = w2.id.clone();
    let second = tokio::spawn(async move {
        let mut s2 = session(&lines, &w2_id).await;
        let claimed = s2.claim_approved(&[usdc()], 1).await.unwrap();
        s2.lock_destinations(&[(usdc(), dest(DEST_A)), (usdc(), dest(DEST_B))]).await.unwrap();
        let volume = store.destination_volume_since(&usdc(), &dest(DEST_A), 0).await.unwrap();
        drop(s2);
        (claimed, volume)
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "wallet 2 must wait for wallet 1's session towards the same destination"
    );
    s1.commit().await.unwrap();
    let (claimed, volume) = second.await.unwrap();
    assert_eq!(ids(&claimed), ids(std::slice::from_ref(&p2)));
    assert_eq!(
        volume,
        Amount::from_u128(600),
        "the committed signing of wallet 1 is seen: 600 + 601 is over a cap of 1,000"
    );
}

/// Two wallets' sessions racing over a long queue: a payout another session committed while this
/// session's claim was reading the queue is not claimed again. On PostgreSQL the lock taken by
/// `FOR UPDATE SKIP LOCKED` re-checks the row it locks, so the filter must stand on the locked row
/// itself, not only on the ranked queue it is joined with.
async fn sessions_of_two_wallets_racing_over_a_long_queue_claim_only_approved_payouts(db: TestDb) {
    const PAYOUTS: u64 = 1_500;
    const CLAIM_MAX: u32 = 16;
    let w = World::new(db).await;
    w.fund(&w.m, &usdc(), u128::from(PAYOUTS)).await;
    for _ in 0..PAYOUTS {
        w.approved(1, DEST_A).await;
    }
    let wallets = [w.wallet(WALLET_1).await, w.wallet(WALLET_2).await];
    let tasks: Vec<_> = wallets
        .iter()
        .map(|wallet| {
            let (store, wallet_id) = (w.lines.clone(), wallet.id.clone());
            tokio::spawn(async move {
                let mut signed = 0u64;
                loop {
                    let mut s = session(&store, &wallet_id).await;
                    let claimed = s.claim_approved(&[usdc()], CLAIM_MAX).await.unwrap();
                    if claimed.is_empty() {
                        return signed;
                    }
                    for p in &claimed {
                        assert_eq!(
                            p.status,
                            PayoutStatus::Approved,
                            "claimed {} in status {:?}",
                            p.id,
                            p.status
                        );
                        sign(&mut s, p, &wallet_id, 1_000).await;
                    }
                    s.commit().await.expect("a session commits what it claimed");
                    signed += claimed.len() as u64;
                }
            })
        })
        .collect();
    let signed: u64 = futures::future::join_all(tasks).await.into_iter().map(Result::unwrap).sum();
    assert_eq!(signed, PAYOUTS, "every payout signed once across the two wallets");
    assert_eq!(w.store.count_events(&w.m, EventType::PayoutProcessing).await.unwrap(), PAYOUTS);
    w.assert_ledger_clean().await;
}

payoutd_testkit::both_stores!(
    sessions_of_two_wallets_racing_over_a_long_queue_claim_only_approved_payouts,
    racing_sessions_of_two_wallets_read_a_destination_volume_one_after_the_other,
    a_proven_death_awaits_the_next_attempt_and_one_session_creates_it,
    nonces_are_contiguous_and_a_dropped_session_leaves_no_gap,
    a_large_signing_batch_is_stored_whole_and_one_refusal_stores_none_of_it,
    concurrent_sessions_on_one_wallet_never_share_a_nonce,
    two_sessions_never_claim_the_same_payout,
    raise_nonce_floor_never_lowers,
    one_live_attempt_per_payout_is_enforced,
    hold_for_review_takes_no_nonce_and_claims_only_the_given_assets,
);
