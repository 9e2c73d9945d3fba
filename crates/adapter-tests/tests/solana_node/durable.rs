//! Payouts signed against a durable nonce: one at a time, cancels that advance the nonce, the nonce value shared through the store.

use super::*;

/// Durable nonce mode: two SOL payouts are signed against the nonce one after the other (never two
/// live transactions on one nonce value), each paid once by its one attempt, and each moves the nonce.
async fn durable_nonce_payouts_are_paid_once_each_one_at_a_time(db: TestDb) {
    let w = world_with(db, Mode::DurableNonce).await;
    let account = w.nonce_account.unwrap();
    let before = w.direct.nonce_value(&account, CommitmentConfig::finalized()).await.unwrap();
    let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
    let first = w.request("durable-0001", SOL, 210_000_000, &a).await;
    let second = w.request("durable-0002", SOL, 220_000_000, &b).await;
    w.run_until_paid(&[&first, &second]).await;
    assert_eq!((w.lamports(&a).await, w.lamports(&b).await), (210_000_000, 220_000_000));
    for id in [&first, &second] {
        let attempts = w.store.attempts_of(id).await.unwrap();
        assert_eq!(attempts.len(), 1, "no attempt died beside another on the same nonce value");
        assert!(matches!(
            &attempts[0].slot,
            AttemptSlot::Solana { expiry: SolanaExpiry::DurableNonce { .. }, .. }
        ));
    }
    assert_ne!(
        w.direct.nonce_value(&account, CommitmentConfig::finalized()).await.unwrap(),
        before
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.assert_wallet_explained("durable payouts' fees are booked").await;
}

/// SPEC 4 (durable nonce): the signed payout never reached the node; an operator cancels: the
/// nonce's advance is stored, sent, and lands; the payout fails with its hold released, and the
/// stored payout bytes can never land afterwards.
async fn an_operator_cancel_advances_the_nonce_and_kills_the_signed_transaction(db: TestDb) {
    let w = world_with(db, Mode::DurableNonce).await;
    w.rail.check_durable_nonce().await.expect("the hot wallet is the nonce's authority");
    // A nonce account of another authority is refused at start.
    let other = SolanaKey::generate();
    airdrop(&w.direct, &other.pubkey(), 1_000_000_000).await;
    let foreign_nonce = create_nonce_account(&w.direct, &other).await;
    let mut config = cluster(w.node.url());
    config.durable_nonce = Some(DurableNonceConfig {
        account: foreign_nonce,
        assets: vec![payoutd_domain::AssetCode::parse(SOL).unwrap().0],
    });
    let sol_only = [Asset::new(SOL, 9, TokenKind::Native).unwrap()];
    let misconfigured = SolanaRail::new(config, w.key.clone(), "hw".into(), &sol_only).unwrap();
    let refused = misconfigured.check_durable_nonce().await.unwrap_err().to_string();
    assert!(refused.contains("authority"), "{refused}");
    cancel_kills_the_signed_transaction(w).await;
}

async fn cancel_kills_the_signed_transaction(w: World) {
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("durable-0003", SOL, 230_000_000, &to).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.status(&id).await, PayoutStatus::Processing);
    let payout_bytes = w.store.attempts_of(&id).await.unwrap()[0].txs[0].raw.clone();
    let cancel = w.pipeline.cancel_signed(&id).await.unwrap();
    assert_eq!(cancel.kind, payoutd_domain::TxKind::Cancel);
    assert_eq!(
        w.pipeline.cancel_signed(&id).await.unwrap().hash,
        cancel.hash,
        "a second cancel sends the stored one again"
    );
    w.proxy.clear();
    w.run_until(&[&id], PayoutStatus::Failed).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!((attempts.len(), attempts[0].status), (1, AttemptStatus::Dead));
    let held = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.held)
        .fold(Amount::ZERO, |a, b| a.checked_add(b).unwrap());
    assert_eq!(held, Amount::ZERO, "the hold is released");
    // The payout's own bytes, sent now, cannot land: the nonce they were signed against is gone.
    let late = w.direct.send_raw(&payout_bytes).await;
    // Judged at finalized once finalization passed the send: a landing would show by then.
    w.wait_finalized_past(w.direct.block_height(CommitmentConfig::processed()).await.unwrap())
        .await;
    assert_eq!(w.lamports(&to).await, 0, "the killed transfer never landed ({late:?})");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.assert_wallet_explained("the landed cancel's fee is booked").await;
}

/// The nonce value in use lives in the store, one attempt per value: a worker whose signed
/// attempt was discarded unstored is not stopped by it, and a second worker cannot sign another
/// payout on the value of a live attempt (which would only die beside it).
async fn workers_share_the_nonce_value_through_the_store_not_their_memory(db: TestDb) {
    let w = world_with(db, Mode::DurableNonce).await;
    let (rail_2, worker_2) = w.second_worker();
    let tick_until_paid = async |worker: &Pipeline, ids: &[&PayoutId]| {
        let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
        loop {
            let mut statuses = Vec::new();
            for id in ids {
                statuses.push(w.status(id).await);
            }
            if statuses.iter().all(|s| *s == PayoutStatus::Paid) {
                return;
            }
            assert!(Instant::now() < deadline, "the worker did not pay: {statuses:?}");
            worker.tick().await.unwrap();
            tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
        }
    };
    // Worker 2 signs a payout whose attempt is then discarded (as when another worker stores one
    // first); nothing is live on the nonce value, and worker 2 alone pays the payout after it.
    let (a, b, c) = (Pubkey::new_unique(), Pubkey::new_unique(), Pubkey::new_unique());
    let first = w.request("durable-0010", SOL, 110_000_000, &a).await;
    let unused = ChainReference::parse_hex(&"0".repeat(32)).unwrap();
    rail_2.prepare(&w.payout_of(&first).await, 1, &unused).await.unwrap();
    tick_until_paid(&worker_2, &[&first]).await;
    // Worker 1 holds the nonce's next value with a live attempt (its sends are lost) ...
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let second = w.request("durable-0011", SOL, 120_000_000, &b).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.store.attempts_of(&second).await.unwrap().len(), 1);
    // ... and worker 2, taking another payout meanwhile, cannot store an attempt on that value.
    let third = w.request("durable-0012", SOL, 130_000_000, &c).await;
    for _ in 0..3 {
        worker_2.tick().await.unwrap();
    }
    assert!(
        w.store.attempts_of(&third).await.unwrap().is_empty(),
        "no second attempt on a live nonce value"
    );
    w.proxy.clear();
    tick_until_paid(&worker_2, &[&second, &third]).await;
    for (id, to, amount) in
        [(&first, &a, 110_000_000), (&second, &b, 120_000_000), (&third, &c, 130_000_000)]
    {
        let attempts = w.store.attempts_of(id).await.unwrap();
        assert_eq!(
            attempts.iter().map(|t| t.status).collect::<Vec<_>>(),
            vec![AttemptStatus::Confirmed],
            "paid by its first attempt"
        );
        assert_eq!(w.lamports(to).await, amount);
    }
}

/// A finalized nonce value that is merely behind the signed one is not a move: once it catches
/// up, that sighting is forgotten, and a real move later is death only when seen again after
/// finalization passed its own first sighting (a lagging signature index gets its full wait).
async fn a_nonce_value_behind_is_forgotten_and_a_later_move_waits_its_own_finalization(db: TestDb) {
    let w = world_with(db, Mode::DurableNonce).await;
    let account = w.nonce_account.unwrap();
    // The nonce account as a node whose finalized state is behind will show it: before the move.
    let params =
        serde_json::json!([account.to_string(), {"encoding": "base64", "commitment": "finalized"}]);
    let behind: &'static str =
        Box::leak(w.node.raw_result("getAccountInfo", params).await.into_boxed_str());
    let moved_to = w.advance_nonce_outside().await;
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("durable-0013", SOL, 130_000_000, &Pubkey::new_unique()).await;
    w.pipeline.tick().await.unwrap();
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let payout = w.payout_of(&id).await;
    let AttemptSlot::Solana { expiry: SolanaExpiry::DurableNonce { value, .. }, .. } =
        &attempt.slot
    else {
        panic!("a durable attempt")
    };
    assert_eq!(value, &moved_to.to_string(), "signed on the confirmed value");
    w.proxy.set_rule(FaultRule::method("getAccountInfo", Fault::Answer { result: behind }));
    assert!(
        matches!(w.rail.status(&attempt, &payout).await.unwrap(), StandaloneStatus::Pending),
        "finalized is behind: a sighting, not a move"
    );
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    assert!(
        matches!(w.rail.status(&attempt, &payout).await.unwrap(), StandaloneStatus::Pending),
        "caught up: live"
    );
    // A real move (nothing of the attempt landed), finalized past the old sighting.
    let killed_to = w.advance_nonce_outside().await;
    w.wait_finalized_past(w.direct.block_height(CommitmentConfig::processed()).await.unwrap())
        .await;
    assert_eq!(
        w.direct.nonce_value(&account, CommitmentConfig::finalized()).await.unwrap(),
        killed_to
    );
    let first_look = w.rail.status(&attempt, &payout).await.unwrap();
    assert!(
        matches!(first_look, StandaloneStatus::Pending),
        "the first sight of a move is not death: {first_look:?}"
    );
    w.wait_finalized_past(w.direct.block_height(CommitmentConfig::processed()).await.unwrap())
        .await;
    let second_look = w.rail.status(&attempt, &payout).await.unwrap();
    assert!(
        matches!(second_look, StandaloneStatus::Dead { .. }),
        "seen again past finalization, with no signature: {second_look:?}"
    );
}

payoutd_testkit::both_stores!(
    durable_nonce_payouts_are_paid_once_each_one_at_a_time,
    an_operator_cancel_advances_the_nonce_and_kills_the_signed_transaction,
    workers_share_the_nonce_value_through_the_store_not_their_memory,
    a_nonce_value_behind_is_forgotten_and_a_later_move_waits_its_own_finalization,
);
