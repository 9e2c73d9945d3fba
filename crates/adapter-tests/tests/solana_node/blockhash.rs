//! Payouts signed against a recent blockhash: paid once at finalized, resent from stored bytes, proven dead only by the chain, the books of fees and rent.

use super::*;

/// The common path: a SOL payout is signed, sent, and paid at `finalized`, moving its amount once.
async fn a_sol_payout_is_paid_once_at_finalized(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    let id = w.request("sol-0001", SOL, 150_000_000, &to).await;
    w.run_until_paid(&[&id]).await;
    assert_eq!(w.lamports(&to).await, 150_000_000);
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| a.status).collect::<Vec<_>>(),
        vec![AttemptStatus::Confirmed]
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    assert!(
        w.store.open_incidents(10).await.unwrap().is_empty(),
        "payoutd's own transfer is reconciled and its fee booked"
    );
}

/// SPEC 8.7: the send times out (the node never saw it) and the chain stands still: however often
/// the pipeline runs, the payout keeps its one signature (re-sent, never re-signed) while the block
/// height is at or below its last valid block height.
async fn a_send_that_timed_out_is_not_signed_again_before_its_last_valid_block_height_passes(
    db: TestDb,
) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("sol-0002", SOL, 700_000_000, &to).await;
    w.pipeline.tick().await.unwrap();
    let first = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(first.len(), 1);
    w.node.stall_blocks().await;
    let stalled_at = w.rail.rpc().block_height(CommitmentConfig::finalized()).await.unwrap();
    assert!(stalled_at <= w.last_valid_of(&id).await);
    for _ in 0..20 {
        w.pipeline.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    }
    let still = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(still.len(), 1, "no second attempt while the first can land");
    assert_eq!(still[0].txs.len(), 1, "no second signature for the first attempt");
    assert_eq!(still[0].txs[0].hash, first[0].txs[0].hash);
    assert!(
        w.proxy.count("sendTransaction") >= 3,
        "the same bytes were re-sent: {}",
        w.proxy.count("sendTransaction")
    );
    assert_eq!(w.status(&id).await, PayoutStatus::Processing);
    w.node.resume_blocks().await;
    w.proxy.clear();
    w.run_until_paid(&[&id]).await;
    assert_eq!(w.lamports(&to).await, 700_000_000, "paid once");
}

/// SPEC 8.15: the first attempt's bytes never reach the node; the payout is paid only after the
/// height passed its last valid block height and a status check after that found nothing; then
/// the next attempt, with a fresh blockhash, pays it once.
async fn a_payout_is_paid_by_the_next_attempt_only_after_the_first_is_proven_dead(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("sol-0003", SOL, 900_000_000, &to).await;
    let last_valid = loop {
        w.pipeline.tick().await.unwrap();
        if !w.store.attempts_of(&id).await.unwrap().is_empty() {
            break w.last_valid_of(&id).await;
        }
    };
    let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
    while w.rail.rpc().block_height(CommitmentConfig::finalized()).await.unwrap() <= last_valid {
        w.pipeline.tick().await.unwrap();
        assert_eq!(
            w.store.attempts_of(&id).await.unwrap().len(),
            1,
            "no next attempt before the height passes"
        );
        assert!(Instant::now() < deadline, "the chain did not pass the last valid block height");
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    }
    // The first attempt's bytes arrive after all (a copy some node kept), between the expiry
    // check and the next attempt's signing, and again after: they cannot land past their height.
    let late_copy = w.store.attempts_of(&id).await.unwrap()[0].txs[0].raw.clone();
    let _refused = w.direct.send_raw(&late_copy).await;
    w.proxy.clear();
    w.run_until_paid(&[&id]).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Dead), (2, AttemptStatus::Confirmed)]
    );
    assert_ne!(attempts[0].txs[0].hash, attempts[1].txs[0].hash);
    let _refused = w.direct.send_raw(&late_copy).await;
    w.wait_finalized_past(w.direct.block_height(CommitmentConfig::processed()).await.unwrap())
        .await;
    assert_eq!(
        w.lamports(&to).await,
        900_000_000,
        "paid once, by the second attempt, at finalized after every late copy"
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The node takes the bytes but the answer is lost: the payout is believed unsent, the status check
/// finds the signature, and it is paid once by its one attempt.
async fn the_same_bytes_landing_after_a_lost_answer_pay_once(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::DropResponse).times(1));
    let id = w.request("sol-0004", SOL, 300_000_000, &to).await;
    w.run_until_paid(&[&id]).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(w.lamports(&to).await, 300_000_000);
}

/// The first sends never reach the node (a dropped transaction): the resolver re-sends the stored
/// bytes unchanged, they land, and the payout is paid once by its one attempt.
async fn a_dropped_transaction_is_resent_from_stored_bytes_and_lands_once(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse).times(3));
    let id = w.request("sol-0005", SOL, 400_000_000, &to).await;
    w.run_until_paid(&[&id]).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!((attempts.len(), attempts[0].txs.len()), (1, 1), "one attempt, one signature");
    assert!(w.proxy.count("sendTransaction") >= 4);
    assert_eq!(w.lamports(&to).await, 400_000_000);
}

/// Two SPL payouts to a recipient without a token account: the first creates it (paid by the hot
/// wallet), the second finds it; the recipient holds exactly both amounts.
async fn an_spl_payout_to_a_new_recipient_creates_its_token_account_once(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    let first = w.request("usd-0001", USD, 2_500_000, &to).await;
    w.run_until_paid(&[&first]).await;
    let second = w.request("usd-0002", USD, 1_250_000, &to).await;
    w.run_until_paid(&[&second]).await;
    assert_eq!(w.token_balance(&to, &w.usd_mint).await, 3_750_000);
    let hot = w.rail.hot_wallet_address();
    assert_eq!(w.token_balance(&hot, &w.usd_mint).await, HOT_WALLET_USD_BASE_UNITS - 3_750_000);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Someone with the hot wallet's key sends from it outside payoutd: reconciliation opens one
/// `unmatched_transfer` incident naming the signature. payoutd's own payouts, the set-up before
/// reconciliation started and money coming in (an airdrop) open none.
async fn a_foreign_transfer_from_the_hot_wallet_opens_an_incident(db: TestDb) {
    let w = world(db).await;
    let id = w.request("sol-0006", SOL, 100_000_000, &Pubkey::new_unique()).await;
    w.run_until_paid(&[&id]).await;
    airdrop(&w.direct, &w.rail.hot_wallet_address(), 1_000_000_000).await;
    let (blockhash, _) = w.direct.latest_blockhash().await.unwrap();
    let transfer = Transfer {
        token: SolanaToken::Sol,
        destination: Pubkey::new_unique(),
        amount_base_units: 5_000_000,
        compute_unit_price_micro_lamports: 0,
        // A memo naming no payout of this deployment.
        reference: ChainReference::parse_hex(&"0".repeat(32)).unwrap(),
    };
    let foreign = sign_transfer(&w.key, &transfer, blockhash).unwrap();
    w.direct.send_raw(&foreign.raw).await.unwrap();
    wait_confirmed(&w.direct, &foreign.signature).await;
    let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
    let unmatched = async || {
        w.store
            .open_incidents(100)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::UnmatchedTransfer)
            .collect::<Vec<_>>()
    };
    let incidents = loop {
        w.pipeline.tick().await.unwrap();
        let incidents = unmatched().await;
        if !incidents.is_empty() {
            break incidents;
        }
        assert!(Instant::now() < deadline, "no incident for the foreign transfer");
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    };
    for _ in 0..10 {
        w.pipeline.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    }
    let incidents_after = unmatched().await;
    assert_eq!(incidents_after.len(), 1, "one incident, opened once: {incidents_after:?}");
    assert!(
        incidents[0].detail.contains(&foreign.signature.to_string()),
        "{}",
        incidents[0].detail
    );
    // The balance check sees the airdrop arrive and the foreign transfer and its fee leave, all
    // unexplained by the ledger: one difference, one incident.
    let balance = w.balance_incidents().await;
    let unexplained = 1_000_000_000 - 5_000_000 - SIGNATURE_FEE_LAMPORTS;
    assert_eq!(balance.len(), 1, "{balance:?}");
    assert!(
        balance[0].contains(&format!("{unexplained} more than the ledger explains")),
        "{balance:?}"
    );
}

/// Fees and the rent of a recipient's new token account leave the hot wallet's SOL: each landed
/// transaction's cost is booked as a `fee` journal (from getTransaction's balances), so the balance
/// check finds the ledger explaining every lamport and token unit the wallet holds.
async fn fees_and_rent_are_booked_and_the_balance_check_finds_the_wallet_explained(db: TestDb) {
    let w = world(db).await;
    let hot = w.rail.hot_wallet_address();
    assert_eq!(
        w.pipeline.balance_check_pass().await.unwrap().balance_mismatches,
        0,
        "the first check books the opening balances"
    );
    let opening = w.lamports(&hot).await;
    let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
    let ids = [
        w.request("fee-sol-1", SOL, 120_000_000, &a).await,
        w.request("fee-usd-1", USD, 3_000_000, &a).await,
        w.request("fee-usd-2", USD, 4_000_000, &b).await,
    ];
    w.run_until_paid(&ids.iter().collect::<Vec<_>>()).await;
    let spent = opening - w.lamports(&hot).await;
    let fees = spent - 120_000_000;
    let rent = w
        .direct
        .client()
        .get_minimum_balance_for_rent_exemption(spl_token_interface::state::Account::LEN)
        .await
        .unwrap();
    assert!(
        fees > 2 * rent,
        "two token accounts were created at the hot wallet's cost: {fees} lamports"
    );
    let books = w.books(SOL).await;
    assert_eq!(
        books.left,
        Amount::from_u128(u128::from(spent)),
        "the SOL payout plus every fee and rent, from the ledger"
    );
    assert_eq!(
        w.books(USD).await.left,
        Amount::from_u128(7_000_000),
        "token payouts only: their fees are paid in SOL"
    );
    w.assert_wallet_explained("fees and rent are booked").await;
    assert!(
        w.store.audit_ledger().await.unwrap().is_clean(),
        "every journal, fees included, sums to zero"
    );
}

/// An endpoint that balances its requests over replicas sends the status search to one far behind,
/// after the attempt's blockhash expired at finalized: its "no such signature" for a transaction
/// that landed and was paid proves nothing, since that node has not reached the finalized slot the
/// expiry is judged at. The status is unknown (an error), never dead; from a node that has the slot
/// it is landed and final. (Before, the finalized height and the statuses were read from whichever
/// node answered, `context.slot` never compared: the paid attempt was declared dead, and its
/// payout would have been paid again by the next attempt.)
async fn a_status_search_by_a_node_behind_the_finalized_slot_proves_nothing(db: TestDb) {
    const REPLICA_BEHIND_SLOTS: u64 = 1_000_000;
    let w = world(db).await;
    let id = w.request("sol-0021", SOL, 150_000_000, &Pubkey::new_unique()).await;
    w.run_until_paid(&[&id]).await;
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let payout = w.payout_of(&id).await;
    w.wait_finalized_past(w.last_valid_of(&id).await).await;
    let behind = Fault::Behind { blocks: REPLICA_BEHIND_SLOTS };
    w.proxy.set_rule(FaultRule::method("getSignatureStatuses", behind));
    let lagging = w.rail.status(&attempt, &payout).await;
    assert!(
        matches!(&lagging, Err(e) if e.0.contains("behind slot")),
        "a node behind the finalized slot proves nothing: {lagging:?}"
    );
    w.proxy.clear();
    let current = w.rail.status(&attempt, &payout).await.unwrap();
    assert!(
        matches!(current, StandaloneStatus::Landed { final_: true, .. }),
        "from a node that has the slot, landed and final: {current:?}"
    );
}

/// A cluster served by several endpoints: the expiry proof is read whole from one endpoint. The
/// first endpoint is a replica far behind (its "no such signature" is not judged at the finalized
/// slot), then one that refuses every connection; each time the proof is read again, whole, from
/// the second endpoint, and the paid attempt is landed and final, never dead. The first endpoint
/// alone proves nothing (an error, never dead).
async fn an_expiry_proof_is_read_whole_from_an_endpoint_that_has_the_slot(db: TestDb) {
    let w = world(db).await;
    let id = w.request("sol-0022", SOL, 160_000_000, &Pubkey::new_unique()).await;
    w.run_until_paid(&[&id]).await;
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let payout = w.payout_of(&id).await;
    w.wait_finalized_past(w.last_valid_of(&id).await).await;
    let AttemptSlot::Solana { fee_payer, .. } = &attempt.slot else { panic!("a Solana attempt") };
    let sol = [Asset::new(SOL, 9, TokenKind::Native).unwrap()];
    let first = FaultProxy::start(w.node.url()).await;
    let rail_over = |urls: Vec<&str>| {
        let mut config = cluster(urls[0]);
        config.rpc_urls = urls.iter().map(|u| SecretUrl::new((*u).to_owned())).collect();
        SolanaRail::new(config, w.key.clone(), fee_payer.clone(), &sol).unwrap()
    };
    for fault in [Fault::Behind { blocks: 1_000_000 }, Fault::Refuse] {
        first.set_rule(FaultRule::all(fault));
        let alone = rail_over(vec![first.url()]).status(&attempt, &payout).await;
        assert!(alone.is_err(), "{fault:?} alone proves nothing: {alone:?}");
        let two = rail_over(vec![first.url(), w.proxy.url()]);
        let status = two.status(&attempt, &payout).await.unwrap();
        assert!(
            matches!(status, StandaloneStatus::Landed { final_: true, .. }),
            "{fault:?} first, then a current endpoint: landed and final, {status:?}"
        );
    }
}

/// "No such signature" from a node whose history starts after the attempt was signed proves
/// nothing: the attempt is not declared dead until a node with the history answers.
async fn a_status_search_in_a_history_that_starts_after_the_signing_proves_nothing(db: TestDb) {
    let w = world(db).await;
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("sol-0020", SOL, 140_000_000, &Pubkey::new_unique()).await;
    w.pipeline.tick().await.unwrap();
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let payout = w.payout_of(&id).await;
    w.wait_finalized_past(w.last_valid_of(&id).await).await;
    // The node now answers as one restored from a snapshot taken after the signing.
    let pruned_to = w.direct.slot(CommitmentConfig::finalized()).await.unwrap();
    w.proxy.set_rule(FaultRule::method(
        "getFirstAvailableBlock",
        Fault::Answer { result: Box::leak(pruned_to.to_string().into_boxed_str()) },
    ));
    let pruned = w.rail.status(&attempt, &payout).await;
    assert!(
        matches!(&pruned, Err(e) if e.0.contains("history starts")),
        "absence in a pruned history is no proof: {pruned:?}"
    );
    w.proxy.clear();
    let full = w.rail.status(&attempt, &payout).await.unwrap();
    assert!(
        matches!(full, StandaloneStatus::Dead { .. }),
        "with the whole history, the expired attempt is dead: {full:?}"
    );
}

/// A transaction that lands and fails on chain (an SPL payout larger than the hot wallet holds:
/// the merchant's ledger balance covers it, the wallet does not) moved nothing but its fee: the
/// payout waits for a person with a `reverted` incident, and that failure, final, is the proof a
/// `retry` and a `failed` verdict rest on: retry signs attempt 2 (which fails the same way), failed
/// releases the hold, and the books hold both fees. (Before, neither verdict was accepted on
/// Solana: the hold could only stay, or be settled as paid.)
async fn a_transaction_that_failed_on_chain_is_the_proof_for_retry_and_failed_verdicts(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    let usd = payoutd_domain::AssetCode::parse(USD).unwrap().0;
    w.engine
        .deposit(
            &w.merchant,
            &usd,
            Amount::from_u128(MORE_THAN_THE_WALLET_HOLDS),
            DepositKey::parse("fund-usd-more").unwrap(),
        )
        .await
        .unwrap();
    let id = w.request("usd-0030", USD, HOT_WALLET_USD_BASE_UNITS + 1, &to).await;
    w.run_until(&[&id], PayoutStatus::NeedsAttention).await;
    let attempts = async || {
        w.store
            .attempts_of(&id)
            .await
            .unwrap()
            .iter()
            .map(|a| (a.attempt_no, a.status))
            .collect::<Vec<_>>()
    };
    assert_eq!(attempts().await, vec![(1, AttemptStatus::Reverted)]);
    let kinds: Vec<IncidentKind> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.kind).collect();
    assert_eq!(kinds, vec![IncidentKind::Reverted]);
    let retried = w
        .pipeline
        .resolve_needs_attention(&id, Verdict::Retry, "the wallet was topped up")
        .await
        .unwrap();
    assert_eq!(retried.status, PayoutStatus::Processing);
    w.run_until(&[&id], PayoutStatus::NeedsAttention).await;
    assert_eq!(attempts().await, vec![(1, AttemptStatus::Reverted), (2, AttemptStatus::Reverted)]);
    let failed = w
        .pipeline
        .resolve_needs_attention(&id, Verdict::Failed, "the wallet cannot pay this much")
        .await
        .unwrap();
    assert_eq!(failed.status, PayoutStatus::Failed);
    let held = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.held)
        .fold(Amount::ZERO, |a, b| a.checked_add(b).unwrap());
    assert_eq!(held, Amount::ZERO, "the hold is released");
    assert_eq!(w.token_balance(&to, &w.usd_mint).await, 0, "nothing reached the recipient");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.assert_wallet_explained("both failed transactions' fees are booked").await;
}

/// A failover to a copy without `attempt`'s signing commit: the attempt is gone, its payout
/// approved again at its former version.
async fn lose_the_signing_commit(w: &World, attempt: &payoutd_domain::Attempt) {
    let id = &attempt.payout_id;
    for sql in [
        format!("DELETE FROM attempt_transactions WHERE attempt_id = '{}'", attempt.id),
        format!("DELETE FROM attempts WHERE id = '{}'", attempt.id),
        format!("DELETE FROM events WHERE type = 'payout.processing' AND entity_id = '{id}'"),
        format!("UPDATE payouts SET status = 'approved', version = version - 1 WHERE id = '{id}'"),
    ] {
        w.db.exec_raw(&sql).await.unwrap();
    }
    assert_eq!(w.status(id).await, PayoutStatus::Approved);
}

/// The same loss, with signing passes running at once, as a worker's do: the account's records are
/// behind it (a transfer out that no stored attempt holds, read at `confirmed`), so nothing is
/// signed on the rail and a `records_behind_chain` incident opens, until reconciliation has read
/// the transfer back once final and relinked it. The payout is paid once; the incident is
/// resolved. (Before, the next signing pass signed the payout again: two transfers.)
async fn a_lost_transfer_stops_signing_until_reconciliation_reads_it_back(db: TestDb) {
    let w = world(db).await;
    w.pipeline.reconcile_pass().await.unwrap(); // the watch starts here
    let to = Pubkey::new_unique();
    let id = w.request("sol-lost-0002", SOL, 100_000_000, &to).await;
    w.pipeline.policy_pass().await.unwrap();
    w.pipeline.sign_pass().await.unwrap();
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let sent = attempt.txs[0].hash.clone();
    wait_confirmed(&w.direct, &sent.as_str().parse().unwrap()).await;
    lose_the_signing_commit(&w, &attempt).await;

    w.pipeline.sign_pass().await.unwrap();
    assert!(w.store.attempts_of(&id).await.unwrap().is_empty(), "nothing signed again");
    assert_eq!(w.status(&id).await, PayoutStatus::Approved);
    let open = w.store.open_incidents(10).await.unwrap();
    assert!(open.iter().any(|i| i.kind == IncidentKind::RecordsBehindChain), "{open:?}");

    w.run_until_paid(&[&id]).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(attempts.iter().map(|a| &a.txs[0].hash).collect::<Vec<_>>(), vec![&sent]);
    let paid = w.direct.balance(&to, CommitmentConfig::finalized()).await.unwrap();
    assert_eq!(paid, 100_000_000, "paid once");
    w.pipeline.sign_pass().await.unwrap();
    let open = w.store.open_incidents(10).await.unwrap();
    assert!(open.iter().all(|i| i.kind != IncidentKind::RecordsBehindChain), "{open:?}");
    w.assert_wallet_explained("the relinked transfer and its fee left the hot wallet's account")
        .await;
}

/// A SOL payout signed, sent and final on chain, whose signing commit the database then loses,
/// with no send guard to remember it: reconciliation reads the transfer back from the hot wallet's
/// final signatures, finds the payout's business event in its memo, and stores the transfer as the
/// payout's attempt. The payout settles paid by that one transfer and is never signed again, and
/// the wallet is explained. (Before, the transfer stayed an `unmatched_transfer` and the payout,
/// approved again, was signed a second time.)
async fn a_transfer_whose_attempt_the_database_lost_is_relinked_by_its_memo(db: TestDb) {
    let w = world(db).await;
    w.pipeline.reconcile_pass().await.unwrap(); // the watch starts here
    let to = Pubkey::new_unique();
    let id = w.request("sol-lost-0001", SOL, 100_000_000, &to).await;
    w.pipeline.policy_pass().await.unwrap();
    w.pipeline.sign_pass().await.unwrap();
    let attempts = w.store.attempts_of(&id).await.unwrap();
    let [attempt] = attempts.as_slice() else { panic!("one attempt: {attempts:?}") };
    let sent = attempt.txs[0].hash.clone();
    let signature = sent.as_str().parse().unwrap();
    wait_confirmed(&w.direct, &signature).await;
    lose_the_signing_commit(&w, attempt).await;

    // Reconciliation runs before any signing pass, once the transfer is final.
    let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
    while w.pipeline.reconcile_pass().await.unwrap().relinked == 0 {
        assert!(Instant::now() < deadline, "the lost transfer was never relinked");
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    }
    let relinked = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(relinked.len(), 1);
    assert_eq!(relinked[0].txs.iter().map(|t| &t.hash).collect::<Vec<_>>(), vec![&sent]);
    assert_eq!(w.status(&id).await, PayoutStatus::Processing, "not approved: never signed again");
    w.run_until_paid(&[&id]).await;
    assert_eq!(w.store.attempts_of(&id).await.unwrap().len(), 1, "one attempt, the relinked one");
    let paid = w.direct.balance(&to, CommitmentConfig::finalized()).await.unwrap();
    assert_eq!(paid, 100_000_000, "paid once");
    let open = w.store.open_incidents(10).await.unwrap();
    assert!(open.iter().all(|i| i.kind != IncidentKind::UnmatchedTransfer), "{open:?}");
    w.assert_wallet_explained("the relinked transfer and its fee left the hot wallet's account")
        .await;
}

/// The memo naming the business event, measured on the node: a SOL transfer with it and the same
/// transfer without it, sent by hand, each read back at `confirmed`. The memo's compute units stay
/// within its allowance and the transfer's within its limit, and the node returns the memo as
/// `carried_reference` reads it. The figures are printed for the README.
async fn a_reference_memo_costs_less_than_its_compute_unit_allowance(db: TestDb) {
    let w = world(db).await;
    let reference = ChainReference::parse_hex("0123456789abcdef0123456789abcdef").unwrap();
    let transfer = Transfer {
        token: SolanaToken::Sol,
        destination: Pubkey::new_unique(),
        amount_base_units: 5_000_000,
        compute_unit_price_micro_lamports: 0,
        reference,
    };
    let with_memo = transfer_instructions(&w.key.pubkey(), &transfer).unwrap();
    let without_memo = &with_memo[..with_memo.len() - 1];
    let mut units = Vec::new();
    let mut carried = Vec::new();
    for instructions in [&with_memo[..], without_memo] {
        let (blockhash, _) = w.direct.latest_blockhash().await.unwrap();
        let signed = payoutd_rail_solana::sign(&w.key, instructions, blockhash).unwrap();
        w.direct.send_raw(&signed.raw).await.unwrap();
        wait_confirmed(&w.direct, &signed.signature).await;
        let landed =
            w.direct.transaction(&signed.signature, CommitmentConfig::confirmed()).await.unwrap();
        let meta = landed.transaction.meta.expect("a landed transaction has its meta");
        let consumed: Option<u64> = meta.compute_units_consumed.into();
        units.push(consumed.expect("the node reports compute units"));
        let tx = landed.transaction.transaction.decode().unwrap();
        carried.push(carried_reference(&tx.message));
    }
    let memo_units = units[0] - units[1];
    println!(
        "compute units: SOL transfer with memo {}, without {}, memo {memo_units} (allowance {MEMO_COMPUTE_UNITS}, limit {SOL_TRANSFER_COMPUTE_UNITS})",
        units[0], units[1]
    );
    assert!(memo_units > 0 && memo_units <= u64::from(MEMO_COMPUTE_UNITS), "{units:?}");
    assert!(units[0] <= u64::from(SOL_TRANSFER_COMPUTE_UNITS), "{units:?}");
    assert_eq!(carried, vec![Some(reference), None], "the node returns the memo");
}

payoutd_testkit::both_stores!(
    a_lost_transfer_stops_signing_until_reconciliation_reads_it_back,
    a_reference_memo_costs_less_than_its_compute_unit_allowance,
    a_transfer_whose_attempt_the_database_lost_is_relinked_by_its_memo,
    a_status_search_by_a_node_behind_the_finalized_slot_proves_nothing,
    an_expiry_proof_is_read_whole_from_an_endpoint_that_has_the_slot,
    fees_and_rent_are_booked_and_the_balance_check_finds_the_wallet_explained,
    a_foreign_transfer_from_the_hot_wallet_opens_an_incident,
    a_sol_payout_is_paid_once_at_finalized,
    a_send_that_timed_out_is_not_signed_again_before_its_last_valid_block_height_passes,
    a_payout_is_paid_by_the_next_attempt_only_after_the_first_is_proven_dead,
    the_same_bytes_landing_after_a_lost_answer_pay_once,
    a_dropped_transaction_is_resent_from_stored_bytes_and_lands_once,
    an_spl_payout_to_a_new_recipient_creates_its_token_account_once,
    a_status_search_in_a_history_that_starts_after_the_signing_proves_nothing,
    a_transaction_that_failed_on_chain_is_the_proof_for_retry_and_failed_verdicts,
);
