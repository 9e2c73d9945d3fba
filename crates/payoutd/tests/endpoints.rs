//! A chain served by several RPC endpoints (real anvil behind fault proxies), on PostgreSQL and SQLite: reads fail over, sends reach every endpoint, and a proof never mixes two endpoints' views.

use std::sync::Arc;

use crate::support::{ETH, RECIPIENTS, TICKS_MAX, World, every_pass};
use payoutd_domain::{AttemptStatus, PayoutStatus};
use payoutd_rail_evm::Finality;
use payoutd_testkit::{AnvilOptions, Fault, FaultProxy, FaultRule, TestDb};

/// The first endpoint refuses every connection: every read fails over to the second, the send
/// goes to both (the second takes it), and the payout is paid once with no incident.
async fn a_chain_pays_through_its_second_endpoint_while_the_first_is_down(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), every_pass()).await;
    let down = FaultProxy::start(w.anvil.url()).await;
    let up = FaultProxy::start(w.anvil.url()).await;
    down.set_rule(FaultRule::all(Fault::Refuse));
    let node = w.node_over(&[down.url(), up.url()], Finality::Depth(1));
    let p = w.pipeline_on(Arc::new(node)).await;
    let payout = w.request("withdrawal-endpoints-01", ETH, 1_000, RECIPIENTS[0]).await;
    w.tick_until(&p, async || w.payout(&payout).await.status == PayoutStatus::Paid).await;
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 1, "paid once");
    assert_eq!(up.count("eth_sendRawTransaction"), 1, "the endpoint that is up took the send");
    assert!(w.store.open_incidents(10).await.unwrap().is_empty());
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The same bytes go to every endpoint: the first loses the connection (the outcome unknown
/// there), the second takes them; the send counts as accepted at once, and the transaction lands
/// once, however many pools got it.
async fn a_send_goes_to_every_endpoint_and_one_acceptance_is_enough(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), every_pass()).await;
    let dropping = FaultProxy::start(w.anvil.url()).await;
    let up = FaultProxy::start(w.anvil.url()).await;
    dropping.set_rule(FaultRule::method("eth_sendRawTransaction", Fault::Refuse));
    let node = w.node_over(&[dropping.url(), up.url()], Finality::Depth(1));
    let p = w.pipeline_on(Arc::new(node)).await;
    let payout = w.request("withdrawal-endpoints-02", ETH, 1_100, RECIPIENTS[1]).await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    assert_eq!(dropping.count("eth_sendRawTransaction"), 1);
    assert_eq!(up.count("eth_sendRawTransaction"), 1);
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(attempts[0].status, AttemptStatus::Broadcast, "one endpoint took it: sent");
    // The first endpoint's node takes the same bytes on the next send; the one transaction lands.
    dropping.set_rule(FaultRule::method("eth_sendRawTransaction", Fault::DropResponse));
    w.tick_until(&p, async || w.payout(&payout).await.status == PayoutStatus::Paid).await;
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1, "landed once");
    assert_eq!(w.store.attempts_of(&payout.id).await.unwrap().len(), 1);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The first endpoint is a replica whose receipt reads come from a node 6 blocks behind; the
/// second is up to date. Each proof reads its whole view (head, nonce, receipts) in one request to
/// one endpoint: the replica's answers "behind" and the view is read again, whole, from the other.
/// No death, no attempt 2, paid once. (A view whose nonce and receipts came from different
/// requests sees the nonce used and no receipt: dead, and paid twice; checked by breaking it.)
async fn a_proof_never_mixes_the_views_of_two_endpoints(db: TestDb) {
    const FINALITY: u64 = 2;
    let w = World::new(db, AnvilOptions::no_mining(), every_pass()).await;
    let replica = FaultProxy::start(w.anvil.url()).await;
    let up = FaultProxy::start(w.anvil.url()).await;
    let node = w.node_over(&[replica.url(), up.url()], Finality::Depth(FINALITY));
    let p = w.pipeline_on(Arc::new(node)).await;
    let payout = w.request("withdrawal-endpoints-03", ETH, 1_200, RECIPIENTS[2]).await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    w.anvil.mine(FINALITY + 1).await.unwrap();
    // The replica's receipt reads (alone or in a batch) are answered 6 blocks behind; its other
    // reads are current, so nothing but the view's unity keeps its receipts from the other's nonce.
    replica.set_rule(FaultRule::method("eth_getTransactionReceipt", Fault::Behind { blocks: 6 }));
    let mut ticks = 0;
    while w.payout(&payout).await.status != PayoutStatus::Paid {
        assert!(ticks < TICKS_MAX, "not paid in {TICKS_MAX} ticks");
        p.tick().await.unwrap();
        let attempts = w.store.attempts_of(&payout.id).await.unwrap();
        assert_eq!(attempts.len(), 1, "a replica behind proves nothing: {attempts:?}");
        assert_ne!(attempts[0].status, AttemptStatus::Dead, "its transaction is final");
        w.anvil.mine(1).await.unwrap();
        ticks += 1;
    }
    assert!(replica.count("eth_getTransactionReceipt") > 0, "the replica was asked");
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[2]).await, 1, "paid once");
    assert!(w.store.open_incidents(10).await.unwrap().is_empty());
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

payoutd_testkit::both_stores!(
    a_chain_pays_through_its_second_endpoint_while_the_first_is_down,
    a_send_goes_to_every_endpoint_and_one_acceptance_is_enough,
    a_proof_never_mixes_the_views_of_two_endpoints,
);
