//! What proves an attempt dead, and what does not: final blocks, replicas behind, the attempt limit, a wallet without funds, reverts, drops and reorgs.

use super::*;

/// A nonce used by someone else proves our attempt dead only once the block that used it is final:
/// a reorg could take an earlier use back, and then the stored bytes could still land (I6).
async fn a_foreign_nonce_use_proves_death_only_in_a_final_block(db: TestDb) {
    const FINALITY: u64 = 3;
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-final-01", ETH, 1_500, RECIPIENTS[1]).await;
    let p = w.pipeline_with(w.anvil.url(), FINALITY).await;
    p.policy_pass().await.unwrap();
    let nonce = w.lines.hot_wallet(&w.wallet.id).await.unwrap().unwrap().next_nonce;
    p.sign_pass().await.unwrap();
    // Outbids our pooled transaction at its nonce: the pool keeps the foreign one.
    pool_foreign_transfer(&w, nonce).await;
    w.anvil.mine(FINALITY - 1).await.unwrap();
    for _ in 0..3 {
        p.tick().await.unwrap();
    }
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(attempts.len(), 1, "not final yet: no attempt 2");
    assert!(attempts[0].status.is_live(), "not final yet: still live, {:?}", attempts[0].status);
    assert_eq!(w.payout(&payout).await.status, PayoutStatus::Processing);
    assert!(w.store.open_incidents(10).await.unwrap().is_empty());

    w.anvil.mine(1).await.unwrap();
    p.resolve_pass().await.unwrap();
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(attempts[0].status, AttemptStatus::Dead, "final: proven dead");
    assert!(attempts[0].mined.is_none(), "none of its transactions was mined");
    mine_until(&w, &p, async || paid(w.payout(&payout).await.status)).await;
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// An endpoint that balances its requests over replicas sends the receipt reads to one 6 blocks
/// behind: its "no receipt" for our transaction, final on the canonical chain, proves nothing. The
/// attempt stays live, no attempt 2 is made, and once the reads reach a node that has the final
/// block the payout is paid once. (Before, the final nonce read from one node and the receipts from
/// the replica declared the attempt dead, "nonce consumed by an unknown transaction", and attempt 2
/// paid the recipient a second time.)
async fn a_replica_behind_the_final_block_proves_no_death(db: TestDb) {
    const FINALITY: u64 = 2;
    const REPLICA_BEHIND_BLOCKS: u64 = 6;
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-lagging-01", ETH, 1_600, RECIPIENTS[2]).await;
    let proxy = FaultProxy::start(w.anvil.url()).await;
    let p = w.pipeline_with(proxy.url(), FINALITY).await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    w.anvil.mine(FINALITY + 1).await.unwrap();
    let behind = Fault::Behind { blocks: REPLICA_BEHIND_BLOCKS };
    proxy.set_rule(FaultRule::method("eth_getTransactionReceipt", behind));
    for _ in 0..3 {
        p.tick().await.unwrap();
    }
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| a.status).collect::<Vec<_>>(),
        vec![AttemptStatus::Broadcast],
        "a replica behind proves nothing: still live, no attempt 2"
    );
    assert!(w.store.open_incidents(10).await.unwrap().is_empty());
    proxy.clear();
    mine_until(&w, &p, async || paid(w.payout(&payout).await.status)).await;
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[2]).await, 1, "paid once");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Past the chain's limit of attempts, a proven death fails the payout and releases the hold.
async fn past_the_attempt_limit_a_proven_death_fails_the_payout(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-limit-01", ETH, 1_700, RECIPIENTS[0]).await;
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    // Each time, someone else outbids the attempt at its nonce.
    for attempt_no in 1..=payoutd_engine::rail::ATTEMPTS_PER_PAYOUT_MAX_DEFAULT {
        let nonce = w.lines.hot_wallet(&w.wallet.id).await.unwrap().unwrap().next_nonce;
        p.sign_pass().await.unwrap();
        pool_foreign_transfer(&w, nonce).await;
        let attempts = w.store.attempts_of(&payout.id).await.unwrap();
        assert_eq!(attempts.len() as u32, attempt_no);
        w.anvil.mine(1).await.unwrap();
        p.resolve_pass().await.unwrap();
    }
    assert_eq!(w.payout(&payout).await.status, PayoutStatus::Failed);
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert!(attempts.iter().all(|a| a.status == AttemptStatus::Dead), "{attempts:?}");
    let eth = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == ETH)
        .unwrap();
    assert_eq!(eth.held, payoutd_domain::Amount::ZERO, "proven dead at the limit: released");
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 0);
    let incidents = w.store.open_incidents(10).await.unwrap();
    let consumed =
        incidents.iter().filter(|i| i.kind.as_str() == "nonce_consumed_by_unknown_tx").count();
    assert_eq!(consumed, 3, "one incident per consumed nonce");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A hot wallet that cannot pay pauses its line and opens one incident; nothing fails; funding it
/// resumes the line and every payout is paid once.
async fn a_hot_wallet_without_funds_pauses_its_line_until_it_is_funded(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let one_eth = 10u128.pow(18);
    w.anvil
        .set_balance(w.key.address(), payoutd_domain::Amount::from_u128(one_eth / 1_000))
        .await
        .unwrap();
    let first = w.request("withdrawal-broke-01", ETH, one_eth, RECIPIENTS[0]).await;
    let p = w.pipeline().await;
    for _ in 0..3 {
        p.tick().await.unwrap();
    }
    assert_eq!(
        w.payout(&first).await.status,
        PayoutStatus::Processing,
        "refused for funds: not failed"
    );
    let second = w.request("withdrawal-broke-02", ETH, 5, RECIPIENTS[1]).await;
    for _ in 0..3 {
        p.tick().await.unwrap();
    }
    assert_eq!(
        w.payout(&second).await.status,
        PayoutStatus::Approved,
        "the wallet's line is paused: nothing more is signed"
    );
    let incidents = w.store.open_incidents(10).await.unwrap();
    assert_eq!(
        incidents.iter().map(|i| i.kind.as_str()).collect::<Vec<_>>(),
        vec!["hot_wallet_low_balance"],
        "one incident, however many refusals"
    );
    w.anvil
        .set_balance(w.key.address(), payoutd_domain::Amount::from_u128(10 * one_eth))
        .await
        .unwrap();
    w.tick_until(&p, async || {
        paid(w.payout(&first).await.status) && paid(w.payout(&second).await.status)
    })
    .await;
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 1);
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Every operator "failed" verdict rests on the chain's proof: a reverted transaction in a final block.
async fn failing_a_reverted_payout_needs_the_final_revert(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let payout = w.request("withdrawal-revert-2", USDC, 10u128.pow(15) + 1, RECIPIENTS[1]).await;
    let p = w.pipeline().await;
    w.tick_until(&p, async || w.payout(&payout).await.status == PayoutStatus::NeedsAttention).await;
    let attempt = &w.store.attempts_of(&payout.id).await.unwrap()[0];
    let (block, hash) = attempt.mined.clone().expect("the reverted transaction is recorded");
    assert_eq!(hash, attempt.txs[0].hash);
    assert!(block > 0);
    // A pipeline that asks for more depth than the chain has: the revert is not final for it yet.
    let deep = w.pipeline_with(w.anvil.url(), 1_000).await;
    match deep
        .resolve_needs_attention(&payout.id, Verdict::Failed, "reverted: token balance too low")
        .await
    {
        Err(payoutd_engine::PipelineError::Refused(why)) => assert!(why.contains("final"), "{why}"),
        other => panic!("a revert that is not final proves nothing yet: {other:?}"),
    }
    assert_eq!(
        w.payout(&payout).await.status,
        PayoutStatus::NeedsAttention,
        "refused: nothing changed"
    );
    let failed = p
        .resolve_needs_attention(&payout.id, Verdict::Failed, "reverted: token balance too low")
        .await
        .unwrap();
    assert_eq!(failed.status, PayoutStatus::Failed);
    let usdc = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == USDC)
        .unwrap();
    assert_eq!(usdc.held, payoutd_domain::Amount::ZERO, "released with the chain's proof");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Asked twice, an operator cancel answers with the cancel it already stored, not a costlier new one.
async fn a_repeated_operator_cancel_answers_with_the_existing_cancel(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-cancel-2", ETH, 900, RECIPIENTS[0]).await;
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    let first = p.cancel_signed(&payout.id).await.unwrap();
    let second = p.cancel_signed(&payout.id).await.unwrap();
    assert_eq!(second, first, "the same cancel, same bytes and fees");
    let attempt = &w.store.attempts_of(&payout.id).await.unwrap()[0];
    assert_eq!(
        attempt.txs.iter().filter(|t| t.kind == TxKind::Cancel).count(),
        1,
        "one cancel stored"
    );
}

/// The `payout.processing` event a signing session writes carries the payout as the store holds it
/// after signing: its version and its `updated_at_ms`, not the approval's.
async fn the_processing_event_carries_the_payout_as_stored_after_signing(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-event-state", ETH, 700, RECIPIENTS[1]).await;
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    // Approval and signing a few milliseconds apart, so their times differ.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    p.sign_pass().await.unwrap();
    let stored = w.payout(&payout).await;
    assert_eq!(stored.status, PayoutStatus::Processing);
    let field = |name: &str| {
        let read = if w.db.is_postgres() {
            format!("(payload::json->>'{name}')::bigint")
        } else {
            format!("json_extract(payload, '$.{name}')")
        };
        format!(
            "SELECT {read} FROM events WHERE entity_id = '{}' AND type = 'payout.processing'",
            payout.id
        )
    };
    assert_eq!(w.db.scalar_raw(&field("version")).await, stored.version);
    assert_eq!(w.db.scalar_raw(&field("updated_at_ms")).await, stored.updated_at_ms);
}

// 8.16
async fn a_transaction_dropped_from_the_mempool_is_resent_from_stored_bytes(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-0016", ETH, 1_600, RECIPIENTS[2]).await;
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    let attempt = w.store.attempts_of(&payout.id).await.unwrap()[0].clone();
    let hash = TxHash::parse(attempt.txs[0].hash.as_str()).unwrap();
    assert!(w.anvil.drop_transaction(hash).await.unwrap(), "anvil dropped it");
    assert_eq!(w.anvil.txpool_status().await.unwrap().pending, 0);
    let report = p.resolve_pass().await.unwrap();
    assert_eq!(report.rebroadcasts, 1);
    assert_eq!(
        w.anvil.txpool_status().await.unwrap().pending,
        1,
        "the stored bytes are back in the pool"
    );
    w.anvil.mine(1).await.unwrap();
    w.tick_until(&p, async || paid(w.payout(&payout).await.status)).await;
    let mined = w.mined_from_wallet().await;
    let landed: Vec<_> = mined.iter().filter(|t| !t.value.is_zero()).collect();
    assert_eq!(landed.len(), 1);
    assert_eq!(
        landed[0].hash.to_string(),
        attempt.txs[0].hash.to_string(),
        "the same bytes, not new ones"
    );
}

/// A receipt seen below the finality threshold that a reorg removes sends the attempt back to waiting;
/// the stored bytes are re-sent and the payout is paid once, at finality.
async fn a_receipt_lost_in_a_reorg_sends_the_attempt_back_and_it_lands_once(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-reorg-1", ETH, 3_300, RECIPIENTS[0]).await;
    let p = w.pipeline_with(w.anvil.url(), 3).await;
    let snapshot: String = w.anvil.rpc().call("evm_snapshot", serde_json::json!([])).await.unwrap();
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    w.anvil.mine(1).await.unwrap();
    p.resolve_pass().await.unwrap();
    let seen = w.store.attempts_of(&payout.id).await.unwrap()[0].clone();
    assert!(seen.mined.is_some(), "receipt recorded below the threshold");
    assert_eq!(
        w.payout(&payout).await.status,
        PayoutStatus::Processing,
        "1 of 3 confirmations: not paid yet"
    );
    let reverted: bool =
        w.anvil.rpc().call("evm_revert", serde_json::json!([snapshot])).await.unwrap();
    assert!(reverted, "the block is gone");
    p.resolve_pass().await.unwrap();
    let back = w.store.attempts_of(&payout.id).await.unwrap()[0].clone();
    assert_eq!(
        (back.mined.clone(), back.status),
        (None, AttemptStatus::Broadcast),
        "back to waiting, not failed"
    );
    w.anvil.mine(3).await.unwrap();
    w.tick_until(&p, async || paid(w.payout(&payout).await.status)).await;
    let landed: Vec<_> =
        w.mined_from_wallet().await.into_iter().filter(|t| !t.value.is_zero()).collect();
    assert_eq!(landed.len(), 1);
    assert_eq!(landed[0].hash.to_string(), seen.txs[0].hash.to_string(), "the same stored bytes");
}

/// Found by the chaos run: a sweep that could not read the chain marked its attempts checked, so a lost
/// send at a wallet's next nonce went to the back of the queue and starved everything behind it (the
/// sweep now also takes the lowest nonces first).
async fn an_unreadable_chain_does_not_push_attempts_to_the_back_of_the_sweep(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-starve-1", ETH, 5_100, RECIPIENTS[1]).await;
    let proxy = FaultProxy::start(w.anvil.url()).await;
    let p = w.pipeline_via(proxy.url()).await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    proxy.set_rule(FaultRule::method("eth_getTransactionCount", Fault::Refuse));
    p.resolve_pass().await.unwrap();
    let checked = w.db.scalar_raw("SELECT last_checked_at_ms FROM attempts").await;
    assert_eq!(checked, 0, "nothing was learned, so the attempt keeps its place at the front");
    proxy.clear();
    w.anvil.mine(1).await.unwrap();
    w.tick_until(&p, async || paid(w.payout(&payout).await.status)).await;
    assert!(w.db.scalar_raw("SELECT last_checked_at_ms FROM attempts").await > 0);
}

payoutd_testkit::both_stores!(
    a_foreign_nonce_use_proves_death_only_in_a_final_block,
    a_replica_behind_the_final_block_proves_no_death,
    past_the_attempt_limit_a_proven_death_fails_the_payout,
    a_hot_wallet_without_funds_pauses_its_line_until_it_is_funded,
    failing_a_reverted_payout_needs_the_final_revert,
    a_repeated_operator_cancel_answers_with_the_existing_cancel,
    a_transaction_dropped_from_the_mempool_is_resent_from_stored_bytes,
    the_processing_event_carries_the_payout_as_stored_after_signing,
    a_receipt_lost_in_a_reorg_sends_the_attempt_back_and_it_lands_once,
    an_unreadable_chain_does_not_push_attempts_to_the_back_of_the_sweep,
);
