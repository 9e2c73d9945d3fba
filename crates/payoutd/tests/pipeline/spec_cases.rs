//! SPEC 8's cases on anvil: duplicate requests, crashes and lost answers around the broadcast, races between workers, replacements, unmatched transfers, the nonce counter.

use super::*;

// 8.1
async fn same_withdrawal_twice_one_payout_one_transfer(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let first = w.request("withdrawal-0001", ETH, 1_000, RECIPIENTS[0]).await;
    let second = w.request("withdrawal-0001", ETH, 1_000, RECIPIENTS[0]).await;
    assert_eq!(first.id, second.id);
    let p = w.pipeline().await;
    w.tick_until(&p, async || paid(w.payout(&first).await.status)).await;
    // More ticks change nothing: no second send.
    for _ in 0..5 {
        p.tick().await.unwrap();
    }
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 1);
    assert_eq!(w.store.attempts_of(&first.id).await.unwrap().len(), 1);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

// 8.2
async fn worker_killed_after_broadcast_recovery_sends_exactly_once(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-0002", ETH, 2_000, RECIPIENTS[1]).await;
    // The "dead" worker: it reaches the node through a proxy that forwards the send and then
    // loses the answer, which is what a kill between broadcast and the database write looks like.
    let proxy = FaultProxy::start(w.anvil.url()).await;
    proxy.set_rule(FaultRule::method("eth_sendRawTransaction", Fault::DropResponse));
    let dead = w.pipeline_via(proxy.url()).await;
    dead.policy_pass().await.unwrap();
    dead.sign_pass().await.unwrap();
    drop(dead);
    assert_eq!(proxy.count("eth_sendRawTransaction"), 1, "the node received the bytes once");
    let attempt = &w.store.attempts_of(&payout.id).await.unwrap()[0];
    assert_eq!(attempt.status, AttemptStatus::Signed, "nothing recorded the broadcast");
    // Recovery by a fresh worker: looks up, re-sends the same bytes, never signs again.
    let recovery = w.pipeline().await;
    recovery.resolve_pass().await.unwrap();
    w.anvil.mine(1).await.unwrap();
    w.tick_until(&recovery, async || paid(w.payout(&payout).await.status)).await;
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1);
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(
        (attempts.len(), attempts[0].txs.len()),
        (1, 1),
        "one attempt, one signed transaction"
    );
}

// 8.3
async fn rpc_throws_after_node_accepted_exactly_one_transfer(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let payout = w.request("withdrawal-0003", USDC, 3_000, RECIPIENTS[2]).await;
    let proxy = FaultProxy::start(w.anvil.url()).await;
    proxy.set_rule(FaultRule::method("eth_sendRawTransaction", Fault::DropResponse).times(3));
    let p = w.pipeline_via(proxy.url()).await;
    w.tick_until(&p, async || paid(w.payout(&payout).await.status)).await;
    assert!(proxy.count("eth_sendRawTransaction") >= 1);
    assert_eq!(w.transfers_to(USDC, RECIPIENTS[2]).await, 1);
    let token_balance = w
        .anvil
        .rpc()
        .erc20_balance(w.token, payoutd_domain::EvmAddress::parse(RECIPIENTS[2]).unwrap())
        .await
        .unwrap();
    assert_eq!(token_balance, payoutd_domain::Amount::from_u128(3_000));
}

// 8.4
async fn two_workers_on_the_same_payouts_sign_each_once(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let mut payouts = Vec::new();
    for i in 0..10 {
        payouts.push(
            w.request(&format!("withdrawal-1{i:03}"), ETH, 100 + i, RECIPIENTS[(i % 3) as usize])
                .await,
        );
    }
    let (a, b) = (Arc::new(w.pipeline().await), Arc::new(w.pipeline().await));
    a.policy_pass().await.unwrap();
    let (ra, rb) = tokio::join!(a.sign_pass(), b.sign_pass());
    assert_eq!(
        ra.unwrap().signed + rb.unwrap().signed,
        10,
        "each payout signed by exactly one worker"
    );
    w.tick_until(&a, async || {
        for p in &payouts {
            if !paid(w.payout(p).await.status) {
                return false;
            }
        }
        true
    })
    .await;
    let mined = w.mined_from_wallet().await;
    assert_eq!(mined.iter().filter(|t| !t.value.is_zero()).count(), 10);
    for p in &payouts {
        assert_eq!(w.store.attempts_of(&p.id).await.unwrap().len(), 1);
    }
}

// 8.5
async fn concurrent_payouts_get_distinct_nonces_and_a_resend_reuses_its_nonce(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let a = w.request("withdrawal-0005a", ETH, 500, RECIPIENTS[0]).await;
    let b = w.request("withdrawal-0005b", ETH, 600, RECIPIENTS[1]).await;
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    let na = w.store.attempts_of(&a.id).await.unwrap()[0].clone();
    let nb = w.store.attempts_of(&b.id).await.unwrap()[0].clone();
    assert_ne!(na.nonce(), nb.nonce());
    // The retry (a re-send on the recovery timer) sends the stored bytes: same nonce, same hash.
    p.resolve_pass().await.unwrap();
    let again = w.store.attempts_of(&a.id).await.unwrap()[0].clone();
    assert_eq!(
        (again.nonce(), again.txs.len(), &again.txs[0].hash),
        (na.nonce(), 1, &na.txs[0].hash)
    );
    w.anvil.mine(1).await.unwrap();
    w.tick_until(&p, async || paid(w.payout(&a).await.status) && paid(w.payout(&b).await.status))
        .await;
    let mut nonces: Vec<u64> = w
        .mined_from_wallet()
        .await
        .iter()
        .filter(|t| !t.value.is_zero())
        .map(|t| t.nonce)
        .collect();
    nonces.sort();
    assert_eq!(nonces, vec![na.nonce().min(nb.nonce()), na.nonce().max(nb.nonce())]);
}

// 8.6
async fn stuck_payout_replaced_with_higher_fee_lands_once_and_records_the_mined_hash(db: TestDb) {
    let config = PipelineConfig {
        rebroadcast_after_ms: 0,
        replace_after_ms: 0,
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    };
    let w = World::new(db, AnvilOptions::no_mining(), config).await;
    let payout = w.request("withdrawal-0006", ETH, 700, RECIPIENTS[2]).await;
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    let report = p.resolve_pass().await.unwrap();
    assert_eq!(report.replacements, 1);
    let attempt = w.store.attempts_of(&payout.id).await.unwrap()[0].clone();
    assert_eq!(attempt.txs.len(), 2);
    let (original, replacement) = (&attempt.txs[0], &attempt.txs[1]);
    assert_eq!(replacement.kind, TxKind::Replacement);
    let (bumped, first) = (replacement.fees.unwrap(), original.fees.unwrap());
    assert!(bumped.max_fee_per_gas > first.max_fee_per_gas);
    assert!(bumped.max_priority_fee_per_gas > first.max_priority_fee_per_gas);
    w.anvil.mine(1).await.unwrap();
    w.tick_until(&p, async || paid(w.payout(&payout).await.status)).await;
    let mined = w.mined_from_wallet().await;
    let landed: Vec<String> =
        mined.iter().filter(|t| !t.value.is_zero()).map(|t| t.hash.to_string()).collect();
    assert_eq!(landed.len(), 1, "one of the two, never both");
    let settled = w.store.attempts_of(&payout.id).await.unwrap()[0].clone();
    assert_eq!(settled.status, AttemptStatus::Confirmed);
    let receipt = w
        .anvil
        .rpc()
        .receipt(landed[0].parse().unwrap())
        .await
        .unwrap()
        .expect("the landed hash has a receipt");
    assert_eq!(
        settled.mined,
        Some((receipt.block_number, payoutd_domain::TxRef::parse(&landed[0]).unwrap())),
        "the row records the hash that was mined and final, and its block"
    );
    assert!(
        settled.txs.iter().any(|t| t.hash.as_str() == landed[0]),
        "the mined hash is one of ours"
    );
    // Both transactions name the same business event, under the deployment's key, and the one
    // that landed carries it on chain.
    let key = w.lines.reference_key().await.unwrap();
    let ours = payoutd_domain::ChainReference::of(&key, &payout.merchant_id, &payout.key);
    for tx in &settled.txs {
        let input = payoutd_rail_evm::decode_raw(&tx.raw).unwrap().input;
        assert_eq!(input, ours.as_bytes().to_vec(), "{:?} carries the reference", tx.kind);
    }
    let on_chain = mined.iter().find(|t| t.hash.to_string() == landed[0]).unwrap();
    assert_eq!(payoutd_domain::ChainReference::at_end_of(&on_chain.input), Some(ours));
}

// 8.12
async fn crash_between_nonce_allocation_and_commit_leaves_no_gap(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let payout = w.request("withdrawal-0012", ETH, 1_200, RECIPIENTS[0]).await;
    let p = w.pipeline().await;
    p.policy_pass().await.unwrap();
    let before = w.lines.hot_wallet(&w.wallet.id).await.unwrap().unwrap().next_nonce;
    {
        // A worker that allocated a nonce, signed, recorded its attempt (bytes and all) in the
        // session, and died before COMMIT.
        let mut session = w.lines.begin_signing(&w.wallet.id).await.unwrap().unwrap();
        let claimed = session.claim_approved(&[w.asset(ETH)], 10).await.unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(session.next_nonce(), before);
        let node = w.anvil.rpc();
        let fees = node.suggest_fees().await.unwrap();
        let to = payoutd_domain::EvmAddress::parse(RECIPIENTS[0]).unwrap();
        let params = TxParams { chain_id: 31337, nonce: before, fees, gas_limit: 21_000 };
        let signed =
            sign_native_transfer(&w.key, &params, to, payoutd_domain::Amount::from_u128(1_200))
                .unwrap();
        let attempt = payoutd_domain::Attempt {
            id: payoutd_domain::AttemptId::new(),
            payout_id: payout.id.clone(),
            attempt_no: 1,
            status: AttemptStatus::Signed,
            slot: payoutd_domain::AttemptSlot::Evm(payoutd_domain::EvmSlot {
                wallet_id: w.wallet.id.clone(),
                nonce: before,
            }),
            txs: vec![payoutd_domain::AttemptTx {
                hash: payoutd_domain::TxRef::parse(&signed.hash.to_string()).unwrap(),
                kind: TxKind::Original,
                raw: signed.raw.clone(),
                fees: Some(payoutd_domain::FeeBid {
                    max_fee_per_gas: fees.max_fee_per_gas,
                    max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
                }),
                created_at_ms: 1,
            }],
            mined: None,
            last_sent_at_ms: 0,
            created_at_ms: 1,
            updated_at_ms: 1,
        };
        let mut after = claimed[0].clone();
        after.status = PayoutStatus::Processing;
        after.version += 1;
        let event = payoutd_engine::store::NewEvent::for_payout(
            payoutd_domain::EventType::PayoutProcessing,
            &after,
            1,
        );
        session.record_signed(&claimed[0], &attempt, &event).await.unwrap();
        assert_eq!(session.next_nonce(), before + 1, "the session allocated the nonce");
        drop(session); // the crash: no COMMIT
    }
    assert_eq!(
        w.lines.hot_wallet(&w.wallet.id).await.unwrap().unwrap().next_nonce,
        before,
        "no nonce consumed"
    );
    assert!(w.store.attempts_of(&payout.id).await.unwrap().is_empty(), "no attempt left behind");
    w.tick_until(&p, async || paid(w.payout(&payout).await.status)).await;
    let attempt = &w.store.attempts_of(&payout.id).await.unwrap()[0];
    assert_eq!(attempt.nonce(), before, "the same nonce, not a later one: no gap");
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 1);
}

// 8.10
async fn an_outgoing_transfer_with_no_matching_payout_raises_an_incident_within_one_pass(
    db: TestDb,
) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let payout = w.request("withdrawal-0010", ETH, 1_000, RECIPIENTS[0]).await;
    let p = w.pipeline().await;
    p.reconcile_pass().await.unwrap(); // the first pass starts the watch at the next final block
    w.tick_until(&p, async || paid(w.payout(&payout).await.status)).await;
    p.reconcile_pass().await.unwrap();
    assert!(
        w.store.open_incidents(10).await.unwrap().is_empty(),
        "payoutd's own transfer is explained by its stored hash"
    );

    // Someone with the hot wallet's key sends from it, outside payoutd (anvil mines it at once).
    let rpc = w.anvil.rpc();
    let params = TxParams {
        chain_id: 31337,
        nonce: rpc.mined_nonce(w.key.address()).await.unwrap(),
        fees: rpc.suggest_fees().await.unwrap(),
        gas_limit: 21_000,
    };
    let to = payoutd_domain::EvmAddress::parse(RECIPIENTS[2]).unwrap();
    let foreign =
        sign_native_transfer(&w.key, &params, to, payoutd_domain::Amount::from_u128(7)).unwrap();
    rpc.send_raw(&foreign.raw).await.unwrap();
    // Automining answers the send before the block exists: wait for the receipt.
    wait_for_receipt(rpc, foreign.hash, RECEIPT_WAIT_TIMEOUT_MS).await.unwrap();

    let report = p.reconcile_pass().await.unwrap();
    assert_eq!(report.unmatched_transfers, 1, "within one pass");
    let incidents = w.store.open_incidents(10).await.unwrap();
    assert_eq!(incidents.len(), 1);
    assert_eq!(incidents[0].kind.as_str(), "unmatched_transfer");
    assert!(incidents[0].detail.contains(&foreign.hash.to_string()), "{}", incidents[0].detail);
    assert_eq!(incidents[0].payout_id, None);
    // Later passes, and a second worker, add nothing; the balance check sees the same spend from
    // its side: the wallet holds less than the ledger explains.
    assert_eq!(p.reconcile_pass().await.unwrap().unmatched_transfers, 0);
    assert_eq!(w.pipeline().await.tick().await.unwrap().unmatched_transfers, 0);
    let mut kinds: Vec<&str> =
        w.store.open_incidents(10).await.unwrap().iter().map(|i| i.kind.as_str()).collect();
    kinds.sort();
    assert_eq!(kinds, vec!["balance_mismatch", "unmatched_transfer"]);
    assert_eq!(w.payout(&payout).await.status, PayoutStatus::Paid, "the paid payout is untouched");
}

// 8.13
async fn a_read_error_while_resyncing_never_lowers_the_nonce_counter(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let wallet = w.lines.ensure_hot_wallet(w.wallet.chain_id, &w.wallet.address, 0).await.unwrap();
    w.lines.raise_nonce_floor(&wallet.id, 40).await.unwrap();
    let proxy = FaultProxy::start(w.anvil.url()).await;
    proxy.set_rule(FaultRule::method("eth_getTransactionCount", Fault::Refuse));
    let _p = w.pipeline_via(proxy.url()).await; // sync_wallets reads the nonce through the failing proxy
    assert_eq!(
        w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce,
        40,
        "an error is not zero"
    );
    proxy.clear();
    let _p = w.pipeline_via(proxy.url()).await; // the chain says 1 (the token deployment): still never lower
    assert_eq!(w.lines.hot_wallet(&wallet.id).await.unwrap().unwrap().next_nonce, 40);
    assert_eq!(
        w.lines.raise_nonce_floor(&wallet.id, 41).await.unwrap(),
        41,
        "forward moves are allowed"
    );
}

// 8.14
async fn replacement_underpriced_is_not_taken_as_already_ours(db: TestDb) {
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let payout = w.request("withdrawal-0014", ETH, 1_400, RECIPIENTS[1]).await;
    // The wallet's pending nonce is read from an endpoint whose pool has not seen the foreign
    // transfer below (a load-balanced node behind the others): the records look whole, and the
    // send is what meets the foreign transaction.
    let proxy = FaultProxy::start(w.anvil.url()).await;
    proxy.set_rule(FaultRule::method(
        "eth_getTransactionCount",
        Fault::Answer { result: "\"0x1\"" },
    ));
    let p = w.pipeline_via(proxy.url()).await;
    p.policy_pass().await.unwrap();
    // Someone else (an operator with the key, a stale deployment) pools a transaction at our next nonce, outbidding us.
    let nonce = w.lines.hot_wallet(&w.wallet.id).await.unwrap().unwrap().next_nonce;
    assert_eq!(nonce, 1, "the token's deployment used nonce 0");
    pool_foreign_transfer(&w, nonce).await;
    let report = p.sign_pass().await.unwrap();
    proxy.clear();
    assert_eq!(
        (report.signed, report.sent),
        (1, 0),
        "underpriced: not sent, and not counted as sent"
    );
    let attempt = w.store.attempts_of(&payout.id).await.unwrap()[0].clone();
    assert_eq!(
        attempt.status,
        AttemptStatus::Signed,
        "not marked broadcast on someone else's transaction"
    );
    let b = w.engine.balances(&w.merchant).await.unwrap();
    let eth = b.iter().find(|b| b.asset.as_str() == ETH).unwrap();
    assert_eq!(
        eth.held,
        payoutd_domain::Amount::from_u128(1_400),
        "ambiguity is never re-credited (I6)"
    );
    // The foreign transfer is mined (and final at depth 1): our attempt is proven dead, an incident
    // says why, and attempt 2 at the next nonce pays the payout once.
    mine_until(&w, &p, async || paid(w.payout(&payout).await.status)).await;
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Dead), (2, AttemptStatus::Confirmed)]
    );
    assert_eq!((attempts[0].nonce(), attempts[1].nonce()), (nonce, nonce + 1));
    let incidents = w.store.open_incidents(10).await.unwrap();
    let mut kinds: Vec<&str> = incidents.iter().map(|i| i.kind.as_str()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        vec!["balance_mismatch", "nonce_consumed_by_unknown_tx", "unmatched_transfer"],
        "our dead attempt, and the foreign transfer seen by reconciliation (I7) and by the balance check"
    );
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1, "paid exactly once");
    let eth = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == ETH)
        .unwrap();
    assert_eq!(eth.held, payoutd_domain::Amount::ZERO);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

payoutd_testkit::both_stores!(
    an_outgoing_transfer_with_no_matching_payout_raises_an_incident_within_one_pass,
    same_withdrawal_twice_one_payout_one_transfer,
    worker_killed_after_broadcast_recovery_sends_exactly_once,
    rpc_throws_after_node_accepted_exactly_one_transfer,
    two_workers_on_the_same_payouts_sign_each_once,
    concurrent_payouts_get_distinct_nonces_and_a_resend_reuses_its_nonce,
    stuck_payout_replaced_with_higher_fee_lands_once_and_records_the_mined_hash,
    crash_between_nonce_allocation_and_commit_leaves_no_gap,
    a_read_error_while_resyncing_never_lowers_the_nonce_counter,
    replacement_underpriced_is_not_taken_as_already_ours,
);
