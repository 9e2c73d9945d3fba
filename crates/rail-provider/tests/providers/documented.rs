//! What one provider documents and its rail honours: Circle's denied, stuck and accelerated transfers and its list's pages, Stripe's pinned version and reversals, Bridge's states, receipts and gas.

use super::*;

/// A Stripe transfer someone with the platform's account reversed in full (a deliberate clawback)
/// Circle's terminal states other than COMPLETE, `DENIED` (refused by Circle's compliance
/// screening) and `CANCELLED`, are each proof that nothing moved: the attempt is dead and the next
/// attempt, with its own key, pays once; the hold never left the merchant.
pub(super) async fn a_denied_or_cancelled_circle_transfer_is_proof_and_the_next_attempt_pays_once(
    db: TestDb,
) {
    let w = world(db, ProviderKind::Circle).await;
    for (n, state) in ["DENIED", "CANCELLED"].into_iter().enumerate() {
        // Amounts apart: the same amount to the same destination would wait as a near-duplicate.
        let id = w.request(&format!("provider-005{n}"), 2_000_000 + n as u128 * 1_000).await;
        w.pipeline.tick().await.unwrap();
        let first = w.provider_id(&id).await;
        assert!(w.sim.end_circle_transaction(&first, state));
        w.run_until(&id, PayoutStatus::Paid).await;
        let attempts = w.store.attempts_of(&id).await.unwrap();
        assert_eq!(
            attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
            vec![(1, AttemptStatus::Dead), (2, AttemptStatus::Confirmed)],
            "{state}"
        );
        let dead = attempts[0].clone();
        let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
        let api = api_of(ProviderKind::Circle, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
        let rail = ProviderRail::new(api, w.clock.clone(), ProviderRailConfig::default());
        let proof = rail.status(&dead, &payout).await.unwrap();
        assert!(
            matches!(&proof, StandaloneStatus::Dead { proof, .. } if proof.contains(state)),
            "{state}: {proof:?}"
        );
        assert_eq!(w.sim.created_with_reference(&our_reference(&id, 2)), 1, "{state}");
        assert_eq!(w.held().await, Amount::ZERO, "{state}");
    }
}

/// A Circle transaction `STUCK` on chain is still Circle's to send: the payout stays processing, no
/// next attempt is made, and Circle is asked to accelerate it (its own endpoint, with a key derived
/// from the attempt's, the same at every ask); accelerated, it completes and is paid once. (Before,
/// nothing asked Circle: a transaction stuck for good held the payout until a person came, a day
/// later.)
pub(super) async fn a_stuck_circle_transfer_is_accelerated_and_paid_once(db: TestDb) {
    let w = world(db, ProviderKind::Circle).await;
    w.sim.set_circle_stuck_steps(STUCK_FOR_GOOD_STEPS);
    let id = w.request("provider-0053", 2_000_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    let asks: Vec<String> = w
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/accelerate"))
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["idempotencyKey"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(!asks.is_empty(), "Circle was asked to accelerate");
    assert!(asks.iter().all(|k| *k == asks[0] && uuid::Uuid::parse_str(k).is_ok()), "{asks:?}");
    assert!(
        !w.sim.requests().iter().any(|r| r.path.ends_with("/cancel")),
        "no cancel before the wait"
    );
    let seen_stuck = w
        .sim
        .requests()
        .iter()
        .any(|r| r.response_body.as_deref().is_some_and(|b| b.contains("\"STUCK\"")));
    assert!(seen_stuck, "the payout's transaction was read while STUCK");
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Confirmed)]
    );
    assert_eq!(w.sim.created(), 1);
}

/// A Circle transaction still stuck past the configured wait is asked to be cancelled; Circle
/// refuses to cancel a `STUCK` transaction ("You can cancel a transaction in INITIATED, QUEUED, or
/// SENT"), and a refused or unanswered ask changes nothing: the payout stays live with its one
/// attempt, and no next attempt pays while the transfer may still land.
pub(super) async fn a_refused_cancel_of_a_stuck_circle_transfer_changes_nothing(db: TestDb) {
    let sim = ProviderSim::start(ProviderKind::Circle).await;
    sim.set_circle_stuck_steps(STUCK_FOR_GOOD_STEPS);
    // Accelerated, it would complete: this one is asked to cancel from the start.
    let api = api_of(ProviderKind::Circle, &sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let rail_config = ProviderRailConfig::default().with_stuck_cancel_after_ms(0);
    let w = world_on_rail(db, ProviderKind::Circle, sim, api, rail_config).await;
    let id = w.request("provider-0054", 2_000_000).await;
    w.rounds(12).await;
    let cancels: Vec<Option<u16>> = w
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/cancel"))
        .map(|r| r.status)
        .collect();
    assert!(!cancels.is_empty() && cancels.iter().all(|s| *s == Some(400)), "{cancels:?}");
    assert_eq!(w.status(&id).await, PayoutStatus::Processing);
    assert_eq!(w.store.attempts_of(&id).await.unwrap().len(), 1);
    assert_eq!(w.sim.created(), 1);
}

/// Every request to Stripe names the API version whose shapes the adapter reads, so an account
/// upgraded to a newer default version cannot change what a transfer looks like to payoutd.
/// (Before, no request named one.)
pub(super) async fn every_stripe_request_pins_the_api_version_its_shapes_follow(db: TestDb) {
    let w = world(db, ProviderKind::Stripe).await;
    let id = w.request("provider-0042", 1_200_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    let requests: Vec<_> =
        w.sim.requests().into_iter().filter(|r| !r.path.starts_with("/_sim")).collect();
    assert!(requests.len() >= 2, "a create and a lookup at least: {}", requests.len());
    for r in &requests {
        assert_eq!(
            header(&r.headers, "stripe-version"),
            payoutd_rail_provider::stripe::STRIPE_API_VERSION,
            "{} {}",
            r.method,
            r.path
        );
    }
}

/// before payoutd learned its fate: the payout waits for a person with a `reverted` incident and
/// is never paid again by itself; the reversal is the proof a person's `failed` verdict rests on.
/// (Before, a full reversal was taken as proof of death and attempt 2 paid again.)
pub(super) async fn a_reversed_stripe_transfer_needs_a_person_not_a_second_payment(db: TestDb) {
    let w = world(db, ProviderKind::Stripe).await;
    // Stripe's list shows the transfer only later: payoutd cannot learn its fate before the reversal.
    w.sim.set_lookup_lag_ms(LOOKUP_LAG_MS);
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    let id = w.request("provider-0030", 2_000_000).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.status(&id).await, PayoutStatus::Processing);
    let made = w.sim.ids_with_reference(&our_reference(&id, 1));
    assert_eq!(made.len(), 1, "the create whose answer was lost made the transfer");
    assert!(
        w.sim.fail(&made[0], "clawed back by the platform"),
        "reversed in full at the simulator"
    );
    w.run_until(&id, PayoutStatus::NeedsAttention).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Reverted)]
    );
    let incidents: Vec<IncidentKind> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.kind).collect();
    assert_eq!(incidents, vec![IncidentKind::Reverted]);
    for _ in 0..3 {
        w.pipeline.tick().await.unwrap();
    }
    assert_eq!(w.sim.created(), 1, "no second payment by itself");
    let failed = w
        .pipeline
        .resolve_needs_attention(&id, Verdict::Failed, "we reversed it on purpose")
        .await
        .unwrap();
    assert_eq!(failed.status, PayoutStatus::Failed);
    assert_eq!(
        (w.held().await, w.sim.created()),
        (Amount::ZERO, 1),
        "the hold is released; one transfer, taken back"
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A Stripe transfer reversed in part before payoutd learned its fate: the recipient kept less
/// than the payout, so the payout waits for a person with a `transfer_mismatch` incident and is
/// never paid again by itself (what was kept is no proof that nothing moved).
pub(super) async fn a_stripe_transfer_reversed_in_part_needs_a_person_not_a_second_payment(
    db: TestDb,
) {
    let w = world(db, ProviderKind::Stripe).await;
    w.sim.set_lookup_lag_ms(LOOKUP_LAG_MS);
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    let id = w.request("provider-0054", 2_000_000).await;
    w.pipeline.tick().await.unwrap();
    let made = w.sim.ids_with_reference(&our_reference(&id, 1));
    assert_eq!(made.len(), 1, "the create whose answer was lost made the transfer");
    assert!(w.sim.reverse_stripe_transfer_in_part(&made[0], 500_000), "reversed in part");
    w.run_until(&id, PayoutStatus::NeedsAttention).await;
    let incidents: Vec<IncidentKind> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.kind).collect();
    assert_eq!(incidents, vec![IncidentKind::TransferMismatch]);
    for _ in 0..3 {
        w.pipeline.tick().await.unwrap();
    }
    assert_eq!(w.store.attempts_of(&id).await.unwrap().len(), 1, "no next attempt");
    assert_eq!(w.sim.created(), 1, "no second payment by itself");
    assert_eq!(w.held().await, Amount::from_u128(2_000_000), "the hold stays for the person");
}

/// Another customer of the same Bridge developer account pays out too: the rail reads only the
/// configured customer's transfers (`/v0/customers/{id}/transfers`), so that transfer opens no
/// incident, while a transfer made by hand from the configured customer's wallet still does.
/// (Before, every transfer of the developer account was read, and each other customer's was an
/// `unmatched_transfer`.)
pub(super) async fn another_customers_bridge_transfer_is_none_of_this_rails_business(db: TestDb) {
    let w = world(db, ProviderKind::Bridge).await;
    let api = api_of(ProviderKind::Bridge, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    let id = w.request("provider-0045", 1_000_000).await;
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let mut theirs: serde_json::Value =
        serde_json::from_slice(&api.request_for(&payout, "another-customer-0045").unwrap())
            .unwrap();
    w.sim.add_bridge_wallet("cust_someone_else", "wallet_someone_else", "usdc");
    theirs["on_behalf_of"] = serde_json::json!("cust_someone_else");
    theirs["source"]["bridge_wallet_id"] = serde_json::json!("wallet_someone_else");
    let theirs = serde_json::to_vec(&theirs).unwrap();
    api.create(&uuid::Uuid::new_v4().to_string(), &theirs).await.unwrap();
    let by_hand = api.request_for(&payout, "by-hand-0045").unwrap();
    api.create(&uuid::Uuid::new_v4().to_string(), &by_hand).await.unwrap();
    w.run_until(&id, PayoutStatus::Paid).await;
    for _ in 0..3 {
        w.pipeline.tick().await.unwrap();
    }
    let incidents: Vec<String> = w
        .store
        .open_incidents(10)
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.kind == IncidentKind::UnmatchedTransfer)
        .map(|i| i.detail)
        .collect();
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    assert!(incidents[0].contains("by-hand-0045"), "{incidents:?}");
}

/// A Bridge transfer held in `awaiting_funds` (its source never funded) would wait forever with
/// nothing to show for it: past the configured wait an `attempt_unresolved` incident opens, once,
/// naming the wait; the attempt stays live, the hold stays, and nothing is created again. When the
/// funds arrive, the payout is paid once. (Before, `awaiting_funds` was plain processing: no
/// incident until the day-long age limit.)
pub(super) async fn a_bridge_transfer_awaiting_funds_opens_an_incident_past_the_wait(db: TestDb) {
    let w = world(db, ProviderKind::Bridge).await;
    let id = w.request("provider-0040", 1_300_000).await;
    w.pipeline.tick().await.unwrap();
    let transfer = w.provider_id(&id).await;
    assert!(w.sim.bridge_state(&transfer, "awaiting_funds"));
    let unresolved = async || {
        w.store
            .open_incidents(10)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::AttemptUnresolved)
            .collect::<Vec<_>>()
    };
    for _ in 0..3 {
        w.pipeline.tick().await.unwrap();
    }
    assert!(unresolved().await.is_empty(), "not before the wait");
    let past_the_wait = AWAITING_FUNDS_INCIDENT_AFTER_MS_DEFAULT + ROUND_MS;
    w.advance(past_the_wait);
    for _ in 0..3 {
        w.pipeline.tick().await.unwrap();
    }
    let found = unresolved().await;
    assert_eq!(found.len(), 1, "one incident however many passes saw it: {found:?}");
    assert!(found[0].detail.contains("awaiting its source's funds"), "{}", found[0].detail);
    assert_eq!(
        (w.status(&id).await, w.held().await),
        (PayoutStatus::Processing, Amount::from_u128(1_300_000)),
        "still live, still held"
    );
    assert_eq!(
        (w.sim.created(), w.store.attempts_of(&id).await.unwrap().len()),
        (1, 1),
        "nothing made again"
    );
    // The source is funded after all: the transfer goes on and pays once.
    assert!(w.sim.bridge_state(&transfer, "payment_processed"));
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
}

/// Bridge's `returned` means "funds have returned to Bridge and a refund to the sender is
/// underway": not final. The payout stays processing under its hold with no second transfer;
/// only the refund's end decides: `refund_failed` needs a person (an incident, the hold stays),
/// `refunded` is the proof a retry rests on. (Before, `returned` was taken as proof of death and
/// attempt 2 paid while the refund could still fail.)
pub(super) async fn a_returned_bridge_transfer_is_final_only_once_its_refund_ends(db: TestDb) {
    let w = world(db, ProviderKind::Bridge).await;
    let id = w.request("provider-0041", 1_400_000).await;
    w.pipeline.tick().await.unwrap();
    let transfer = w.provider_id(&id).await;
    assert!(w.sim.bridge_state(&transfer, "returned"));
    w.rounds(5).await;
    assert_eq!(w.status(&id).await, PayoutStatus::Processing, "a refund underway decides nothing");
    assert_eq!(
        (w.sim.created(), w.store.attempts_of(&id).await.unwrap().len()),
        (1, 1),
        "no second transfer while the refund may fail"
    );
    assert!(w.sim.bridge_state(&transfer, "refund_failed"));
    w.run_until(&id, PayoutStatus::NeedsAttention).await;
    let kinds: Vec<IncidentKind> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.kind).collect();
    assert_eq!(kinds, vec![IncidentKind::ProviderStateUnrecognised]);
    assert_eq!(
        w.held().await,
        Amount::from_u128(1_400_000),
        "the hold stays until a person decides"
    );
    let refused = w.pipeline.resolve_needs_attention(&id, Verdict::Retry, "try again").await;
    assert!(
        matches!(refused, Err(PipelineError::Refused(_))),
        "a failed refund proves nothing: {refused:?}"
    );
    assert!(w.sim.bridge_state(&transfer, "refunded"));
    w.pipeline
        .resolve_needs_attention(&id, Verdict::Retry, "Bridge refunded it after all")
        .await
        .unwrap();
    w.run_until(&id, PayoutStatus::Paid).await;
    assert_eq!(
        (w.sim.created(), w.held().await),
        (2, Amount::ZERO),
        "the refunded transfer and the one that paid"
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Bridge takes its gas fee out of the amount: a transfer whose receipt's `final_amount` is less
/// than the payout did not pay what the recipient was promised. The payout needs a person with a
/// `transfer_mismatch` incident and its hold stays. (Before, the amount sent was compared, and the
/// payout was settled as paid in full.)
pub(super) async fn a_bridge_transfer_that_delivers_less_than_the_payout_needs_a_person(
    db: TestDb,
) {
    let w = world(db, ProviderKind::Bridge).await;
    w.sim.set_bridge_gas_fee("0.25");
    let id = w.request("provider-0042", 2_000_000).await;
    w.run_until(&id, PayoutStatus::NeedsAttention).await;
    let kinds: Vec<IncidentKind> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.kind).collect();
    assert_eq!(kinds, vec![IncidentKind::TransferMismatch]);
    assert_eq!(
        w.held().await,
        Amount::from_u128(2_000_000),
        "the hold stays until a person decides"
    );
    assert_eq!(w.sim.created(), 1);
}

/// A Bridge wallet as Bridge's guides describe one: it holds `usdb` and pays it out as `usdc`, it
/// answers `initiation_required: true`, and Bridge takes a gas fee out of each amount. Configured
/// so (`source_currency`, `initiation`, a gas fee within `gas_fee_max_base_units`), the payout is
/// paid once, the create carries the initiation, and the balance read is the `usdb` entry.
/// (Before, the create named `usdc` as the source and no initiation, which Bridge refuses, and any
/// gas fee made the payout a `transfer_mismatch`.)
pub(super) async fn a_bridge_wallet_holding_usdb_that_requires_initiation_pays_less_a_tolerated_gas_fee(
    db: TestDb,
) {
    let sim = ProviderSim::start(ProviderKind::Bridge).await;
    sim.add_bridge_wallet(crate::support::BRIDGE_CUSTOMER, crate::support::BRIDGE_WALLET, "usdb");
    assert!(sim.require_bridge_initiation(crate::support::BRIDGE_WALLET));
    sim.set_bridge_gas_fee("0.01");
    let initiation = serde_json::json!({"channel": "other_mobile_payment", "subchannel": "remote",
        "attestations": {"sca": {"outcome": "sca_used"}}});
    let config = BridgeConfig {
        source_currency: "usdb".into(),
        initiation: Some(initiation.clone()),
        ..crate::support::bridge_config(
            sim.base_url(),
            payoutd_domain::Secret::new(sim.api_key()),
            false,
            CLIENT_TIMEOUT_MS,
        )
    };
    let api: Arc<dyn ProviderApi> = Arc::new(BridgeApi::new(config).unwrap());
    let rail_config = ProviderRailConfig::default().with_withheld_max(Amount::from_u128(10_000));
    let w = world_on_rail(db, ProviderKind::Bridge, sim, api.clone(), rail_config).await;
    let id = w.request("provider-0046", 2_000_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
    let creates: Vec<serde_json::Value> = w
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    assert!(!creates.is_empty());
    for create in &creates {
        assert_eq!(create["initiation"], initiation, "{create}");
        assert_eq!(create["source"]["currency"], "usdb");
        assert_eq!(create["destination"]["currency"], "usdc");
    }
    // The merchant paid the whole amount; the ledger says 0.01 of it went to Bridge, not the
    // recipient (before, the gas was booked as delivered).
    let booked = |account: &str, amount: u128| {
        format!(
            "SELECT count(*) FROM ledger_entries e JOIN journals j ON j.id = e.journal_id \
             WHERE j.reference = '{id}' AND e.account = '{account}' AND e.direction = 1 \
             AND CAST(e.amount AS BIGINT) = {amount}"
        )
    };
    assert_eq!(w.db.scalar_raw(&booked("world:withheld", 10_000)).await, 1, "the gas withheld");
    assert_eq!(w.db.scalar_raw(&booked("world:payouts", 2_000_000)).await, 1, "the payout");
    let held = api.balances(std::slice::from_ref(&w.asset)).await.unwrap();
    let opening_base_units = 1_000_000_000 * 1_000_000;
    assert_eq!(held[0], Amount::from_u128(opening_base_units - 2_000_000), "the usdb entry");

    // A gas fee above the most configured is no longer the payout's transfer: a person decides.
    w.sim.set_bridge_gas_fee("0.02");
    let over = w.request("provider-0047", 2_100_000).await;
    w.run_until(&over, PayoutStatus::NeedsAttention).await;
    let kinds: Vec<IncidentKind> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.kind).collect();
    assert_eq!(kinds, vec![IncidentKind::TransferMismatch]);
}

/// Bridge leaves the receipt's `final_amount` out until the gas is known: a `payment_processed`
/// transfer without it is not yet paid (what reached the recipient is not known), and the payout
/// is paid once the receipt shows the full amount. (Before, the amount asked was taken for the
/// amount delivered and the payout settled as paid in full at once.)
pub(super) async fn a_bridge_transfer_is_paid_only_once_its_receipt_shows_what_arrived(db: TestDb) {
    let w = world(db, ProviderKind::Bridge).await;
    let id = w.request("provider-0043", 2_500_000).await;
    w.pipeline.tick().await.unwrap();
    let transfer = w.provider_id(&id).await;
    assert!(w.sim.bridge_receipt_final_amount(&transfer, None));
    w.rounds(6).await;
    assert_eq!(
        w.status(&id).await,
        PayoutStatus::Processing,
        "processed, but what arrived is not known yet"
    );
    assert!(w.sim.bridge_receipt_final_amount(&transfer, Some("2.5")));
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
}

/// The Circle wallet `support::api_of` pays from.
pub(super) const CIRCLE_WALLET: &str = "0f9c0a52-2e84-4c0c-9f0e-4a6c0b6f1b10";

/// Circle may answer fewer transactions than the page size asked for ("the collection limit will
/// be used"): a lookup by reference reads on until an empty page, so a transfer past a short first
/// page is found. (Before, a page shorter than 50 ended the scan: the transfer was "absent", and
/// past the key window its attempt would have died and the payout been paid again.)
pub(super) async fn a_circle_lookup_reads_past_short_pages(db: TestDb) {
    let w = world(db, ProviderKind::Circle).await;
    let api = api_of(ProviderKind::Circle, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    w.sim.set_circle_page_cap(2);
    let id = w.request("provider-0031", 1_000_000).await;
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let since_ms = w.clock.now_ms();
    for n in 0..3 {
        api.create(
            &uuid::Uuid::new_v4().to_string(),
            &api.request_for(&payout, &format!("by-hand-{n}")).unwrap(),
        )
        .await
        .unwrap();
    }
    let ours = api.request_for(&payout, "ours-0031").unwrap();
    api.create(&uuid::Uuid::new_v4().to_string(), &ours).await.unwrap();
    let found = api
        .find_by_reference("ours-0031", &ours, crate::support::created_from(since_ms))
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "found past two short pages");
}

/// Circle does not say which way `pageAfter` reads under `order=ASC`. Where it reads on in the
/// list's natural order (newest first), ascending pages run backwards and meet transactions already
/// read: the lookup then proves nothing (an error, never "absent"), and a transfer it does find is
/// still found. (Before, the backwards read ran on to an empty page and a wallet's lookup of a
/// reference no transaction carries reported it absent after reading a fraction of the list: past
/// the key window, a proof of death.)
pub(super) async fn a_circle_list_that_pages_backwards_proves_no_absence(db: TestDb) {
    let w = world(db, ProviderKind::Circle).await;
    let api = api_of(ProviderKind::Circle, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    w.sim.set_circle_page_cap(2);
    w.sim.set_circle_page_after_in_natural_order();
    let id = w.request("provider-0050", 1_000_000).await;
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let since_ms = w.clock.now_ms();
    for n in 0..5 {
        let other = api.request_for(&payout, &format!("by-hand-50-{n}")).unwrap();
        api.create(&uuid::Uuid::new_v4().to_string(), &other).await.unwrap();
        w.sim.advance(1_000); // distinct creation times
    }
    let nobody = api.request_for(&payout, "nobody-0050").unwrap();
    let looked =
        api.find_by_reference("nobody-0050", &nobody, crate::support::created_from(since_ms)).await;
    assert!(matches!(looked, Err(payoutd_rail_provider::CallError::Ambiguous(_))), "{looked:?}");
}

/// A transfer in a token the wallet does not monitor is listed only with `includeAll=true`; the
/// lookup by reference asks for it. (Before, such a transfer was "absent".)
pub(super) async fn a_circle_lookup_finds_a_transfer_in_a_token_the_wallet_does_not_monitor(
    db: TestDb,
) {
    let w = world(db, ProviderKind::Circle).await;
    let api = api_of(ProviderKind::Circle, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let id = w.request("provider-0032", 1_000_000).await;
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let since_ms = w.clock.now_ms();
    w.sim.set_circle_unmonitored(true);
    let ours = api.request_for(&payout, "ours-0032").unwrap();
    api.create(&uuid::Uuid::new_v4().to_string(), &ours).await.unwrap();
    assert_eq!(
        api.find_by_reference("ours-0032", &ours, crate::support::created_from(since_ms))
            .await
            .unwrap()
            .len(),
        1
    );
}

/// A top-up into the Circle wallet is an INBOUND transaction: reconciliation of transfers out
/// passes over it without an incident, and still finds a transfer out made by hand after it.
/// (Before, a top-up, listed with an empty `refId`, stopped reconciliation for good.)
pub(super) async fn a_top_up_into_the_circle_wallet_is_not_an_unmatched_transfer(db: TestDb) {
    let w = world(db, ProviderKind::Circle).await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    w.sim.circle_inbound(CIRCLE_WALLET, "250.00");
    let id = w.request("provider-0033", 1_000_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    let api = api_of(ProviderKind::Circle, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    api.create(
        &uuid::Uuid::new_v4().to_string(),
        &api.request_for(&payout, "by-hand-0033").unwrap(),
    )
    .await
    .unwrap();
    for _ in 0..3 {
        w.pipeline.tick().await.unwrap();
    }
    let incidents: Vec<(IncidentKind, String)> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| (i.kind, i.detail)).collect();
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    assert_eq!(incidents[0].0, IncidentKind::UnmatchedTransfer);
    assert!(
        incidents[0].1.contains("by-hand-0033"),
        "the transfer out made by hand, not the top-up: {}",
        incidents[0].1
    );
}
