//! How provider attempts end and what the books and incidents say: reported failures, states the rail does not know, late landings, caps under two workers, attempts unresolved past their age, transfers payoutd did not make.

use super::*;

/// The provider reports the transfer failed (its own proof that nothing moved): the attempt is
/// dead and the next attempt, with its own key, pays once; the hold never left the merchant.
pub(super) async fn a_provider_reported_failure_starts_the_next_attempt(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    let id = w.request("provider-0007", 2_000_000).await;
    w.pipeline.tick().await.unwrap();
    let first = w.provider_id(&id).await;
    assert!(w.sim.fail(&first, "insufficient funds in the source wallet"));
    w.run_until(&id, PayoutStatus::Paid).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Dead), (2, AttemptStatus::Confirmed)]
    );
    assert_eq!(w.sim.created_with_reference(&our_reference(&id, 2)), 1);
    assert_eq!(w.held().await, Amount::ZERO);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A retry the provider took as new leaves two transfers behind our reference: the recorded one
/// fails, the other goes on and completes. The recorded transfer's failure is no proof of death: the
/// lookup by our reference finds the other, so the payout waits for a person with its hold, no next
/// attempt pays it again, and neither verdict that would end or retry it is taken. (Before, attempt 1
/// was declared dead from the recorded transfer alone and attempt 2 paid a second time.)
pub(super) async fn a_failed_transfer_beside_another_carrying_our_reference_is_no_proof_of_death(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    let id = w.request("provider-0016", 2_000_000).await;
    w.pipeline.tick().await.unwrap();
    let first = w.provider_id(&id).await;
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let reference = our_reference(&id, 1);
    let api = api_of(kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let body = api.request_for(&payout, &reference).unwrap();
    api.create(&uuid::Uuid::new_v4().to_string(), &body).await.unwrap();
    assert!(w.sim.fail(&first, "insufficient funds in the source wallet"));
    w.run_until(&id, PayoutStatus::NeedsAttention).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(attempts.len(), 1, "no next attempt while a transfer carrying ours is alive");
    assert_eq!(w.sim.not_failed_with_reference(&reference), 1, "the second transfer goes on");
    assert_eq!(w.sim.created(), 2, "nothing paid a second time");
    assert_eq!(w.held().await, Amount::from_u128(2_000_000), "the hold stays");
    for verdict in [Verdict::Failed, Verdict::Retry] {
        let refused = w.pipeline.resolve_needs_attention(&id, verdict, "the transfer failed").await;
        assert!(
            matches!(refused, Err(PipelineError::Refused(_))),
            "{verdict:?} while another transfer carries our reference: {refused:?}"
        );
    }
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The same two transfers behind our reference, while the provider's lists lag its creates (a
/// lookup by id sees the recorded transfer fail; the lookup by reference shows neither yet). A
/// listing that does not show the recorded transfer is behind, and its silence about any other is
/// no proof: the attempt stays live with its hold, no attempt 2 is made; once the lists catch up,
/// the other transfer is found and the payout waits for a person. (Before, the empty listing
/// proved attempt 1 dead and attempt 2 paid while the other transfer completed: paid twice.)
pub(super) async fn a_lookup_that_does_not_list_the_failed_transfer_yet_proves_no_death(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    let id = w.request("provider-0017", 2_000_000).await;
    w.pipeline.tick().await.unwrap();
    let first = w.provider_id(&id).await;
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let reference = our_reference(&id, 1);
    w.sim.set_lookup_lag_ms(3_600_000);
    let api = api_of(kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let body = api.request_for(&payout, &reference).unwrap();
    api.create(&uuid::Uuid::new_v4().to_string(), &body).await.unwrap();
    assert!(w.sim.fail(&first, "insufficient funds in the source wallet"));
    for _ in 0..5 {
        w.pipeline.tick().await.unwrap();
    }
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| a.status).collect::<Vec<_>>(),
        vec![AttemptStatus::Broadcast],
        "a listing behind proves nothing: live, no attempt 2"
    );
    assert_eq!(w.sim.created(), 2, "nothing paid a second time");
    w.sim.set_lookup_lag_ms(0);
    w.run_until(&id, PayoutStatus::NeedsAttention).await;
    assert_eq!(w.store.attempts_of(&id).await.unwrap().len(), 1);
    assert_eq!(w.sim.created(), 2);
    assert_eq!(w.held().await, Amount::from_u128(2_000_000), "the hold stays");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Bridge's `error` state ("requires manual review") proves nothing: the payout needs a person,
/// with an incident, and its hold stays.
pub(super) async fn an_unrecognised_provider_state_needs_a_person(db: TestDb, kind: ProviderKind) {
    let w = world(db, kind).await;
    let id = w.request("provider-0008", 2_000_000).await;
    w.pipeline.tick().await.unwrap();
    let first = w.provider_id(&id).await;
    assert!(w.sim.fail(&first, "manual review"));
    w.run_until(&id, PayoutStatus::NeedsAttention).await;
    let incidents = w.store.open_incidents(10).await.unwrap();
    assert_eq!(
        incidents.iter().map(|i| i.kind).collect::<Vec<_>>(),
        vec![IncidentKind::ProviderStateUnrecognised]
    );
    assert!(incidents[0].detail.contains("error"), "{}", incidents[0].detail);
    assert_eq!(
        w.held().await,
        Amount::from_u128(2_000_000),
        "the hold stays until a person decides"
    );
    assert_eq!(w.store.attempts_of(&id).await.unwrap().len(), 1, "no next attempt without proof");
    // A person's verdict rests on the provider's proof: none while the transfer is in `error`.
    for verdict in [Verdict::Failed, Verdict::Retry] {
        let refused =
            w.pipeline.resolve_needs_attention(&id, verdict, "support says it failed").await;
        assert!(
            matches!(refused, Err(PipelineError::Refused(_))),
            "{verdict:?} without the provider's proof: {refused:?}"
        );
    }
    // Bridge's support returns the funds: `refunded` proves nothing moved; retry pays once, by attempt 2.
    assert!(w.sim.bridge_refund(&first));
    let retried = w
        .pipeline
        .resolve_needs_attention(&id, Verdict::Retry, "Bridge refunded the transfer")
        .await
        .unwrap();
    assert_eq!(retried.status, PayoutStatus::Processing);
    w.run_until(&id, PayoutStatus::Paid).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Reverted), (2, AttemptStatus::Confirmed)]
    );
    assert_eq!(
        (w.sim.created(), w.held().await),
        (2, Amount::ZERO),
        "the refunded transfer and the one that paid"
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The first create is made but its answer is lost, and the provider's lists do not show it for
/// longer than the key window: past the window (plus the margin, twice) the attempt is declared
/// dead and attempt 2 pays. When the first transfer finally shows, reconciliation finds a transfer
/// of a dead attempt that moved money: one `duplicate_transfer` incident at once, naming the
/// payout. (Before, the reference was "stored", so the second payment went unseen.)
pub(super) async fn a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    w.sim.set_lookup_lag_ms(u64::try_from(2 * KEY_WINDOW_MS_DEFAULT).unwrap());
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    let id = w.request("provider-0015", 3_300_000).await;
    w.pipeline.tick().await.unwrap();
    w.pass_the_key_window();
    w.run_until(&id, PayoutStatus::Paid).await;
    assert_eq!(w.sim.created(), 2, "the lost first transfer and attempt 2's");
    let duplicates = async || {
        w.store
            .open_incidents(10)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::DuplicateTransfer)
            .collect::<Vec<_>>()
    };
    assert!(duplicates().await.is_empty());
    w.sim.set_lookup_lag_ms(0);
    w.rounds(3).await;
    let found = duplicates().await;
    assert_eq!(found.len(), 1, "one incident for the second payment: {found:?}");
    assert_eq!(found[0].payout_id.as_ref(), Some(&id));
    assert!(found[0].detail.contains(&our_reference(&id, 1)), "{}", found[0].detail);
    let unmatched = w
        .store
        .open_incidents(10)
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.kind == IncidentKind::UnmatchedTransfer)
        .count();
    assert_eq!(unmatched, 0, "both transfers are payoutd's");
}

/// The caps (I8) hold at signing on a provider rail too, under two workers signing at once: of four
/// approved payouts of 3 to 6 units to one destination, with an hourly cap of 10 (per destination,
/// or per provider account), exactly two get an attempt and two wait for a person; a person's
/// approval lets one through past the cap. (Before, every approved payout was created.)
pub(super) async fn destination_caps_hold_at_signing_under_two_workers(
    db: TestDb,
    kind: ProviderKind,
) {
    let caps = Caps {
        per_destination_per_hour: Amount::from_u128(10),
        per_wallet_per_hour: Amount::from_u128(1_000),
    };
    caps_hold_at_signing_under_two_workers(db, kind, caps).await;
}

pub(super) async fn account_caps_hold_at_signing_under_two_workers(db: TestDb, kind: ProviderKind) {
    let caps = Caps {
        per_destination_per_hour: Amount::from_u128(1_000),
        per_wallet_per_hour: Amount::from_u128(10),
    };
    caps_hold_at_signing_under_two_workers(db, kind, caps).await;
}

pub(super) async fn caps_hold_at_signing_under_two_workers(
    db: TestDb,
    kind: ProviderKind,
    caps: Caps,
) {
    let w = world(db, kind).await;
    let config =
        PipelineConfig { caps: [(w.asset.code.clone(), caps)].into(), ..PipelineConfig::default() };
    let worker = || {
        let rail = Arc::new(ProviderRail::new(
            api_of(kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS),
            w.clock.clone(),
            ProviderRailConfig::default(),
        ));
        Pipeline::new(w.store.clone(), w.clock.clone(), config.clone())
            .with_standalone_rail(StandaloneLine { rail, assets: vec![w.asset.clone()] })
    };
    let (first, second) = (worker(), worker());
    let mut ids = Vec::new();
    // Four amounts (not near-duplicates of each other) of which any three break the cap of 10:
    // whatever order the two workers take them in, exactly two fit.
    for amount in 3..=6 {
        ids.push(w.request(&format!("capped-{amount}"), amount).await);
    }
    let (a, b) = tokio::join!(first.tick(), second.tick());
    a.unwrap();
    b.unwrap();
    let mut statuses = Vec::new();
    for id in &ids {
        statuses.push(w.status(id).await);
    }
    let held: Vec<&PayoutId> = ids
        .iter()
        .zip(&statuses)
        .filter(|(_, s)| **s == PayoutStatus::HeldForReview)
        .map(|(id, _)| id)
        .collect();
    assert_eq!(held.len(), 2, "{statuses:?}");
    assert_eq!(w.sim.created(), 2, "two transfers fit under the cap of 10");
    first.approve(held[0]).await.unwrap();
    for _ in 0..ROUNDS_MAX {
        first.tick().await.unwrap();
        if w.status(held[0]).await == PayoutStatus::Paid {
            break;
        }
        w.advance(ROUND_MS);
    }
    assert_eq!(w.status(held[0]).await, PayoutStatus::Paid);
    assert_eq!(w.sim.created(), 3, "a person's approval lets a payout past the cap");
    assert_eq!(w.status(held[1]).await, PayoutStatus::HeldForReview);
}

/// A lookup that cannot reach an answer must not wait unseen: the create's answer is lost and the
/// provider's list does not show the transfer, so the attempt stays pending; once it is older than
/// `attempt_unresolved_after_ms`, one `attempt_unresolved` incident names it (once, whatever the
/// number of passes), the hold stays, and the payout is still paid once when the list catches up.
pub(super) async fn an_attempt_unresolved_past_its_age_opens_one_incident(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    let config = PipelineConfig {
        rebroadcast_after_ms: 1_000,
        attempt_unresolved_after_ms: 5 * ROUND_MS,
        ..PipelineConfig::default()
    };
    let rail = Arc::new(ProviderRail::new(
        api_of(kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS),
        w.clock.clone(),
        ProviderRailConfig::default(),
    ));
    let pipeline = Pipeline::new(w.store.clone(), w.clock.clone(), config)
        .with_standalone_rail(StandaloneLine { rail, assets: vec![w.asset.clone()] });
    w.sim.set_lookup_lag_ms(120_000);
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    for _ in 0..ROUNDS_MAX {
        w.sim.fault_next_create(Fault::RefusedBeforeKeyCheck); // every retry refused
    }
    let id = w.request("provider-0016", 1_100_000).await;
    let unresolved = async || {
        w.store
            .open_incidents(10)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::AttemptUnresolved)
            .collect::<Vec<_>>()
    };
    let created_at_ms = w.clock.now_ms();
    for _ in 0..ROUNDS_MAX {
        pipeline.tick().await.unwrap();
        if !unresolved().await.is_empty() {
            break;
        }
        w.advance(ROUND_MS);
    }
    assert!(w.clock.now_ms() - created_at_ms >= 5 * ROUND_MS, "not before the age limit");
    // The retries were refused or lost; the list still hides the transfer.
    let found = unresolved().await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].payout_id.as_ref(), Some(&id));
    assert_eq!(w.held().await, Amount::from_u128(1_100_000), "the hold stays");
    w.sim.set_lookup_lag_ms(0);
    for _ in 0..ROUNDS_MAX {
        pipeline.tick().await.unwrap();
        if w.status(&id).await == PayoutStatus::Paid {
            break;
        }
        w.advance(ROUND_MS);
    }
    w.assert_paid_once(&id).await;
    assert_eq!(unresolved().await.len(), 1, "one incident, however many passes saw the attempt");
}

/// A client that makes a fresh key for each retry (the bug this rail cannot have) creates two
/// transfers at the simulator, which sees it; the rail itself, through the same fault, creates one
/// (`a_call_that_timed_out_is_retried_with_the_same_stored_key`).
pub(super) async fn a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    let api = api_of(kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let id = w.request("provider-0010", 2_000_000).await;
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let reference = our_reference(&payout.id, 1);
    let body = api.request_for(&payout, &reference).unwrap();
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    assert!(
        api.create(&uuid::Uuid::new_v4().to_string(), &body).await.is_err(),
        "the first answer is too late"
    );
    api.create(&uuid::Uuid::new_v4().to_string(), &body).await.unwrap();
    assert_eq!(w.sim.created_with_reference(&reference), 2, "a fresh key per retry pays twice");
}

/// Someone with the API key makes a transfer outside payoutd: reconciliation of the provider
/// account opens one `unmatched_transfer` incident naming it; payoutd's own transfers open none.
pub(super) async fn a_transfer_payoutd_did_not_make_opens_an_incident(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    let id = w.request("provider-0011", 1_000_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    let api = api_of(kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let body = api.request_for(&payout, "by-hand-0001").unwrap();
    api.create(&uuid::Uuid::new_v4().to_string(), &body).await.unwrap();
    let unmatched = async || {
        w.store
            .open_incidents(10)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::UnmatchedTransfer)
            .collect::<Vec<_>>()
    };
    for _ in 0..ROUNDS_MAX {
        if !unmatched().await.is_empty() {
            break;
        }
        w.pipeline.tick().await.unwrap();
        w.advance(ROUND_MS);
    }
    for _ in 0..3 {
        w.pipeline.tick().await.unwrap();
    }
    let incidents = unmatched().await;
    assert_eq!(incidents.len(), 1, "one incident, for the transfer made by hand: {incidents:?}");
    assert!(incidents[0].detail.contains("by-hand-0001"), "{}", incidents[0].detail);
    assert_eq!(
        w.store.open_incidents(10).await.unwrap().len(),
        1,
        "payoutd's own transfer is reconciled"
    );
}
