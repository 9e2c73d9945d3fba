//! The chain as the record of last resort, against a real anvil on PostgreSQL and SQLite: a database that lost its last commits (a failover, a restore) never lets a payout be signed a second time.

use std::sync::Arc;

use crate::pipeline::quick;
use crate::support::{ETH, RECIPIENTS, USDC, World};
use payoutd_domain::{IncidentKind, Payout, PayoutStatus};
use payoutd_engine::{Engine, SystemClock};
use payoutd_testkit::db::{fresh_postgres_on, postgres_at};
use payoutd_testkit::{AnvilOptions, PgServer, TestDb};

/// What a failover to a standby without the last commit does to one signing session that made
/// `payout`'s first attempt at `nonce`: the attempt, its transaction and its event are gone, the
/// payout is approved again at its former version, the wallet's counter is back at `nonce`.
async fn lose_the_signing_commit(w: &World, payout: &Payout, nonce: u64) {
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    let [attempt] = attempts.as_slice() else { panic!("one attempt: {attempts:?}") };
    for sql in [
        format!("DELETE FROM attempt_transactions WHERE attempt_id = '{}'", attempt.id),
        format!("DELETE FROM attempts WHERE id = '{}'", attempt.id),
        format!(
            "DELETE FROM events WHERE type = 'payout.processing' AND entity_id = '{}'",
            payout.id
        ),
        format!(
            "UPDATE payouts SET status = 'approved', version = version - 1 WHERE id = '{}'",
            payout.id
        ),
        format!("UPDATE hot_wallets SET next_nonce = {nonce} WHERE id = '{}'", w.wallet.id),
    ] {
        w.db.exec_raw(&sql).await.unwrap();
    }
}

fn kinds(incidents: &[payoutd_domain::Incident]) -> Vec<IncidentKind> {
    incidents.iter().map(|i| i.kind).collect()
}

/// A token payout signed, sent and mined, whose signing commit the database then loses: the
/// next worker finds the wallet's chain ahead of its records, signs nothing on the chain, reads
/// the unknown transaction back from a final block, recognises the payout by the reference its
/// calldata carries and records it as the payout's attempt; the payout settles paid by that one
/// transfer, and the payout waiting behind it is signed at the next nonce. Before, the worker
/// raised its counter to the chain's nonce and signed the payout again: two transfers.
async fn an_attempt_whose_commit_was_lost_after_it_was_sent_is_relinked_and_paid_once(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let before = w.pipeline().await;
    before.reconcile_pass().await.unwrap(); // the watch starts at the next final block
    let lost = w.request("withdrawal-lost-01", USDC, 4_200, RECIPIENTS[0]).await;
    before.policy_pass().await.unwrap();
    let nonce = w.lines.hot_wallet(&w.wallet.id).await.unwrap().unwrap().next_nonce;
    before.sign_pass().await.unwrap();
    assert_eq!(w.payout(&lost).await.status, PayoutStatus::Processing);
    let sent = w.store.attempts_of(&lost.id).await.unwrap()[0].txs[0].hash.clone();
    drop(before);
    lose_the_signing_commit(&w, &lost, nonce).await;
    let waiting = w.request("withdrawal-lost-02", ETH, 1_000, RECIPIENTS[1]).await;

    let after = w.pipeline().await;
    after.policy_pass().await.unwrap();
    assert_eq!(after.sign_pass().await.unwrap().signed, 0, "records behind the chain: no signing");
    let open = w.store.open_incidents(10).await.unwrap();
    assert_eq!(kinds(&open), vec![IncidentKind::RecordsBehindChain], "{open:?}");
    w.tick_until(&after, async || {
        w.payout(&lost).await.status == PayoutStatus::Paid
            && w.payout(&waiting).await.status == PayoutStatus::Paid
    })
    .await;

    assert_eq!(w.transfers_to(USDC, RECIPIENTS[0]).await, 1, "the lost payout is paid once");
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1);
    let attempts = w.store.attempts_of(&lost.id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].txs[0].hash, sent, "the attempt is the transaction that was sent");
    let waited = w.store.attempts_of(&waiting.id).await.unwrap();
    assert_eq!(waited[0].slot.as_evm().unwrap().nonce, nonce + 1, "signed after the relinked one");
    let open = w.store.open_incidents(10).await.unwrap();
    assert!(open.is_empty(), "the incident is resolved: {open:?}");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Someone with the hot wallet's key pools a transfer at the nonce payoutd would sign at next:
/// nothing is signed on the chain while it is pooled (it could be a lost attempt of ours), nor
/// after it is mined until it is final and read back; it names no payout, so it is reported as
/// an unmatched_transfer, and the payout is signed at the nonce after it and paid once.
async fn a_pooled_transfer_the_records_do_not_hold_stops_signing_until_it_is_read_back(db: TestDb) {
    const FINALITY: u64 = 3;
    let w = World::new(db, AnvilOptions::no_mining(), quick()).await;
    let p = w.pipeline_with(w.anvil.url(), FINALITY).await;
    p.reconcile_pass().await.unwrap();
    let payout = w.request("withdrawal-behind-01", ETH, 1_500, RECIPIENTS[1]).await;
    p.policy_pass().await.unwrap();
    let nonce = w.lines.hot_wallet(&w.wallet.id).await.unwrap().unwrap().next_nonce;
    crate::pipeline::pool_foreign_transfer(&w, nonce).await;
    for _ in 0..3 {
        p.tick().await.unwrap();
    }
    assert!(w.store.attempts_of(&payout.id).await.unwrap().is_empty(), "pooled: nothing signed");
    w.anvil.mine(FINALITY - 1).await.unwrap();
    p.tick().await.unwrap();
    assert!(w.store.attempts_of(&payout.id).await.unwrap().is_empty(), "not final: nothing signed");
    w.anvil.mine(1).await.unwrap();
    crate::pipeline::mine_until(&w, &p, async || {
        w.payout(&payout).await.status == PayoutStatus::Paid
    })
    .await;
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(attempts.len(), 1, "no attempt died for the foreign transfer's nonce");
    assert_eq!(attempts[0].slot.as_evm().unwrap().nonce, nonce + 1);
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1);
    let open = w.store.open_incidents(10).await.unwrap();
    assert!(kinds(&open).contains(&IncidentKind::UnmatchedTransfer), "{open:?}");
    assert!(!kinds(&open).contains(&IncidentKind::RecordsBehindChain), "caught up: {open:?}");
}

/// The world again on `db`, a restored copy of its database: the same node, merchant and wallet.
fn restored(w: World, db: TestDb) -> World {
    let store = db.pipeline();
    let engine = Engine::new(store.clone(), Arc::new(SystemClock), w.assets.clone());
    World { store, lines: db.evm_lines(), engine, db, ..w }
}

/// A real PostgreSQL server backed up with `pg_basebackup` mid-run, then lost (stopped at once);
/// the backup started as the database payoutd runs on, as a restore does. After the backup one
/// payout's attempt was signed and mined, and another payout was created and paid: the restore has
/// neither. The lost attempt is relinked from the chain; the lost creation comes back when its
/// client retries with its key, as a new payout, and is recognised by the reference the mined
/// transfer carries: every payout paid exactly once, counted on the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_from_a_base_backup_taken_mid_run_pays_every_payout_once() {
    let server = PgServer::start_new();
    let w =
        World::new(fresh_postgres_on(&server.admin_url()).await, AnvilOptions::default(), quick())
            .await;
    let p = w.pipeline().await;
    p.reconcile_pass().await.unwrap();
    let before = w.request("withdrawal-restore-01", ETH, 1_100, RECIPIENTS[0]).await;
    w.tick_until(&p, async || w.payout(&before).await.status == PayoutStatus::Paid).await;
    let signed_after = w.request("withdrawal-restore-02", USDC, 2_200, RECIPIENTS[1]).await;
    p.policy_pass().await.unwrap();

    let backup = server.base_backup();
    p.sign_pass().await.unwrap();
    let created_after = w.request("withdrawal-restore-03", ETH, 3_300, RECIPIENTS[2]).await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    for payout in [&signed_after, &created_after] {
        assert_eq!(w.payout(payout).await.status, PayoutStatus::Processing, "sent before the loss");
    }
    drop(p);
    server.stop_at_once();
    backup.start();
    let name = w.db.url().rsplit_once('/').expect("a database URL names its database").1.to_owned();
    let on_backup = backup.admin_url().rsplit_once('/').expect("an admin URL").0.to_owned();
    let w = restored(w, postgres_at(&format!("{on_backup}/{name}")).await);
    assert_eq!(w.payout(&signed_after).await.status, PayoutStatus::Approved, "its attempt is lost");
    assert!(w.store.payout_by_id(&created_after.id).await.unwrap().is_none(), "its creation too");

    // The client retries the lost creation with its key: a new payout for the same business event.
    let retried = w.request("withdrawal-restore-03", ETH, 3_300, RECIPIENTS[2]).await;
    assert_ne!(retried.id, created_after.id);
    let p = w.pipeline().await;
    w.tick_until(&p, async || {
        w.payout(&signed_after).await.status == PayoutStatus::Paid
            && w.payout(&retried).await.status == PayoutStatus::Paid
    })
    .await;
    for (asset, to) in [(ETH, RECIPIENTS[0]), (USDC, RECIPIENTS[1]), (ETH, RECIPIENTS[2])] {
        assert_eq!(w.transfers_to(asset, to).await, 1, "{to} is paid once");
    }
    let open = w.store.open_incidents(10).await.unwrap();
    assert!(kinds(&open).iter().all(|k| *k != IncidentKind::RecordsBehindChain), "{open:?}");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

payoutd_testkit::both_stores!(
    an_attempt_whose_commit_was_lost_after_it_was_sent_is_relinked_and_paid_once,
    a_pooled_transfer_the_records_do_not_hold_stops_signing_until_it_is_read_back,
);
