//! The payout pipeline against a real anvil node (SPEC section 8), on PostgreSQL and SQLite; transfers counted from the node.

use crate::support;

use std::sync::Arc;

use crate::support::{ETH, RECIPIENTS, USDC, World};
use payoutd_domain::{AttemptStatus, PayoutStatus, TxKind};
use payoutd_engine::{Caps, PipelineConfig, Verdict};
use payoutd_rail_evm::{Fees, TxHash, TxParams, sign_native_transfer};
use payoutd_testkit::EvmAttemptExt;
use payoutd_testkit::TestDb;
use payoutd_testkit::{
    AnvilOptions, Fault, FaultProxy, FaultRule, RECEIPT_WAIT_TIMEOUT_MS, wait_for_receipt,
};

fn quick() -> PipelineConfig {
    // The balance check runs on every pass, so what it finds does not depend on how long a test takes.
    PipelineConfig {
        rebroadcast_after_ms: 0,
        replace_after_ms: 3_600_000,
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    }
}

/// Someone else with the hot wallet's key (an operator, a stale deployment) pools 1 wei to RECIPIENTS[2]
/// at `nonce`, bidding far above anything payoutd may pay (its cap in these tests is 1,000 gwei, and
/// after such a block the fee quote itself reaches the cap).
pub(crate) async fn pool_foreign_transfer(w: &World, nonce: u64) {
    let fees =
        Fees { max_fee_per_gas: 5_000_000_000_000, max_priority_fee_per_gas: 5_000_000_000_000 };
    let to = payoutd_domain::EvmAddress::parse(RECIPIENTS[2]).unwrap();
    let foreign = sign_native_transfer(
        &w.key,
        &TxParams { chain_id: 31337, nonce, fees, gas_limit: 21_000 },
        to,
        payoutd_domain::Amount::from_u128(1),
    )
    .unwrap();
    w.anvil.rpc().send_raw(&foreign.raw).await.unwrap();
}

fn paid(status: PayoutStatus) -> bool {
    status == PayoutStatus::Paid
}

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

/// Ticks and mines one block after each tick until `done` (for a node that does not mine by itself).
pub(crate) async fn mine_until(
    w: &World,
    p: &payoutd_engine::Pipeline,
    mut done: impl AsyncFnMut() -> bool,
) {
    for _ in 0..support::TICKS_MAX {
        p.tick().await.unwrap();
        if done().await {
            return;
        }
        w.anvil.mine(1).await.unwrap();
    }
    panic!("the pipeline did not get there in {} ticks", support::TICKS_MAX);
}

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
    a_foreign_nonce_use_proves_death_only_in_a_final_block,
    a_replica_behind_the_final_block_proves_no_death,
    past_the_attempt_limit_a_proven_death_fails_the_payout,
    a_hot_wallet_without_funds_pauses_its_line_until_it_is_funded,
    failing_a_reverted_payout_needs_the_final_revert,
    a_repeated_operator_cancel_answers_with_the_existing_cancel,
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
    a_transaction_dropped_from_the_mempool_is_resent_from_stored_bytes,
    the_processing_event_carries_the_payout_as_stored_after_signing,
    a_receipt_lost_in_a_reorg_sends_the_attempt_back_and_it_lands_once,
    an_unreadable_chain_does_not_push_attempts_to_the_back_of_the_sweep,
    erc20_payout_settles_the_ledger_and_emits_paid_once,
    a_reverted_transfer_opens_an_incident_and_keeps_the_hold,
    operator_cancel_after_signing_fails_the_payout_only_once_the_cancel_is_final,
    near_duplicates_and_cap_breaches_wait_for_review,
);
