//! A create's key and its window: retries with the stored key, lookups past the window, ambiguous answers, refusals that created nothing, the resend horizon an attempt keeps, saved server errors.

use super::*;

/// SPEC 8.8: the first create fails before the provider did anything, the retry (same stored key
/// and body) times out after the provider made the transfer; the lookup finds it. Every create
/// sent the one stored key; one transfer.
pub(super) async fn a_call_that_timed_out_is_retried_with_the_same_stored_key(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    let id = w.request("provider-0002", 5_000_000).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!((w.status(&id).await, w.sim.created()), (PayoutStatus::Processing, 0));
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
    let keys = w.creates_sent();
    assert_eq!(keys.len(), 2, "the retry went out once it was due: {keys:?}");
    assert_eq!(keys[0], keys[1], "every create sent the stored key");
    assert_eq!(w.sim.created(), 1);
}

/// SPEC 8.9: the answer is lost and the next look comes after the key window: no create is sent
/// again (the provider may have forgotten the key); the lookup by our reference finds the transfer.
pub(super) async fn retried_past_the_window_is_resolved_by_lookup_not_created_again(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    let id = w.request("provider-0003", 7_500_000).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.creates_sent().len(), 1);
    w.pass_the_key_window();
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
    assert_eq!(w.creates_sent().len(), 1, "past the window nothing is created again");
}

/// A 5xx after the provider made the transfer (Stripe even replays that 500 for the same key): the
/// lookup by our reference decides; paid once.
pub(super) async fn an_ambiguous_5xx_resolves_by_lookup(db: TestDb, kind: ProviderKind) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ServerErrorAfterCreate);
    let id = w.request("provider-0004", 9_900_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
}

/// The connection is reset after the provider made the transfer: the lookup decides; paid once.
pub(super) async fn a_reset_after_the_create_resolves_by_lookup(db: TestDb, kind: ProviderKind) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ResetAfterCreate);
    let id = w.request("provider-0009", 4_200_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
}

/// Past the window with nothing at the provider (the only create failed before it did anything):
/// the lookup proves the first attempt never happened; the next attempt, with its own key, pays once.
pub(super) async fn past_the_window_with_nothing_created_the_next_attempt_pays(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    let id = w.request("provider-0005", 1_000_000).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.sim.created(), 0);
    w.pass_the_key_window();
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_by_the_second_attempt(&id).await;
    let keys = w.creates_sent();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1], "the next attempt has its own key");
}

/// The first create is made but its answer is lost; the provider's list lags its writes, and the
/// retry (same key) is refused with a 400 by a provider that validates before it looks at the key.
/// That refusal proves nothing: the lookup, once the list shows the transfer, decides. Paid once,
/// by the first attempt. (Before, the retry's refusal was taken as proof, the attempt declared
/// dead and a second transfer made by attempt 2.)
pub(super) async fn a_refused_retry_after_an_ambiguous_create_is_not_proof(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.sim.set_lookup_lag_ms(LOOKUP_LAG_MS);
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    w.sim.fault_next_create(Fault::RefusedBeforeKeyCheck);
    let id = w.request("provider-0012", 6_000_000).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.sim.created(), 1, "the first create was made; its answer was lost");
    w.run_until(&id, PayoutStatus::Paid).await;
    let keys = w.creates_sent();
    assert!(
        keys.len() >= 2 && keys.iter().all(|k| *k == keys[0]),
        "the retries went out with the stored key: {keys:?}"
    );
    w.assert_paid_once(&id).await;
    assert_eq!(w.sim.created(), 1);
}

/// A create sent just before the key window ends lands at the provider, whose list shows it only
/// seconds later. No lookup made in that time may declare the attempt dead: creates stop a
/// margin (request timeout plus the resolver's lease) before the window ends, and death needs two
/// lookups past the window plus the margin. Paid once. (Before, a create went out a second before
/// the window's end, and the first lookup after the window, not listing the transfer yet, let attempt 2 pay
/// again.)
pub(super) async fn a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    let id = w.request("provider-0013", 8_000_000).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.sim.created(), 0, "the first create failed before the provider did anything");
    let almost = KEY_WINDOW_MS_DEFAULT - 1_000;
    w.advance(almost);
    w.sim.set_lookup_lag_ms(LOOKUP_LAG_MS);
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    w.run_until(&id, PayoutStatus::Paid).await;
    let transfers = w.sim.created_with_reference(&our_reference(&id, 1))
        + w.sim.created_with_reference(&our_reference(&id, 2));
    assert_eq!((w.sim.created(), transfers), (1, 1), "one transfer for the payout");
    assert_eq!(w.held().await, Amount::ZERO);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The provider refuses every create with a 4xx that proves nothing was created: each attempt
/// ends, and past the last the payout fails with its hold released.
pub(super) async fn a_refusal_that_created_nothing_fails_cleanly(db: TestDb, kind: ProviderKind) {
    let w = world_with(db, kind, Setup::Refused).await;
    let id = w.request("provider-0006", 3_000_000).await;
    w.run_until(&id, PayoutStatus::Failed).await;
    assert_eq!(w.sim.created(), 0);
    assert_eq!(w.held().await, Amount::ZERO, "the hold is released");
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert!(
        attempts.len() > 1 && attempts.iter().all(|a| a.status == AttemptStatus::Dead),
        "{attempts:?}"
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The provider's account cannot cover the payout (Stripe `balance_insufficient`, CDP
/// `insufficient_balance`, Circle 155205, a Bridge wallet short of the amount): each first call is
/// refused with nothing made, and past the last attempt the payout fails with its hold released.
/// (Before, the simulators paid from any balance, so this refusal was never exercised.)
pub(super) async fn an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    let paid_in = match kind {
        ProviderKind::Stripe => "usd",
        ProviderKind::Circle => payoutd_provider_sim::CIRCLE_SIM_USDC_TOKEN_ID,
        ProviderKind::Coinbase | ProviderKind::Bridge => "usdc",
    };
    w.sim.top_up(paid_in, -(1i128 << 100)); // far below anything a payout asks
    let id = w.request("provider-0048", 3_000_000).await;
    w.run_until(&id, PayoutStatus::Failed).await;
    assert_eq!(w.sim.created(), 0, "nothing made");
    assert_eq!(w.held().await, Amount::ZERO, "the hold is released");
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert!(attempts.iter().all(|a| a.status == AttemptStatus::Dead), "{attempts:?}");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The adapter names a Circle wallet or a Coinbase account the provider does not hold (a
/// configuration error): Circle answers 156001 with HTTP 404, Coinbase `source_account_not_found`.
/// Nothing was made, so each first call is refused and the payout fails cleanly at once. (Before,
/// the simulators paid out of any id, and a create answered 404 proved nothing: the attempt waited
/// for lookups of a wallet that does not exist until a person came, a day later.)
pub(super) async fn an_account_the_provider_does_not_hold_is_refused_at_once(
    db: TestDb,
    kind: ProviderKind,
) {
    let sim = ProviderSim::start(kind).await;
    let api: Arc<dyn ProviderApi> = match kind {
        ProviderKind::Circle => Arc::new(
            payoutd_rail_provider::CircleApi::new(payoutd_rail_provider::CircleConfig {
                wallet_id: "11111111-1111-4111-8111-111111111111".into(),
                ..crate::support::circle_config(&sim, Setup::Working, CLIENT_TIMEOUT_MS)
            })
            .unwrap(),
        ),
        _ => Arc::new(
            CoinbaseApi::new(CoinbaseConfig {
                base_url: sim.base_url(),
                api_key_id: sim.api_key_id(),
                api_key: payoutd_domain::Secret::new(sim.api_key()),
                account_id: "account_11111111-1111-4111-8111-111111111111".into(),
                source_asset: "usdc".into(),
                network: "base".into(),
                target_asset: "usdc".into(),
                decimals: 6,
                request_timeout_ms: CLIENT_TIMEOUT_MS,
                travel_rule: None,
            })
            .unwrap(),
        ),
    };
    let w = world_on(db, kind, sim, api).await;
    let id = w.request("provider-0057", 1_000_000).await;
    w.run_until(&id, PayoutStatus::Failed).await;
    assert_eq!(w.sim.created(), 0, "nothing made");
    assert_eq!(w.held().await, Amount::ZERO, "the hold is released");
}

/// A Stripe payout to a connected account the platform does not have: Stripe answers the create
/// with `resource_missing` ("No such destination"), an `invalid_request_error` that made nothing,
/// so each first call is refused and the payout fails cleanly with its hold released. (Before, the
/// simulator paid any `acct_` id, so this refusal was never exercised.)
pub(super) async fn a_stripe_payout_to_an_account_the_platform_lacks_fails_cleanly(db: TestDb) {
    let w = world(db, ProviderKind::Stripe).await;
    let request = PayoutRequest::new(
        PayoutKey::parse("provider-0058").unwrap(),
        w.asset.code.clone(),
        Amount::from_u128(1_000),
        Destination::Account(payoutd_domain::ProviderAccount::parse("acct_1NobodyHere").unwrap()),
        Metadata::empty(),
    );
    let id = w.engine.create_payout(&w.merchant, request).await.unwrap().0.id;
    w.run_until(&id, PayoutStatus::Failed).await;
    assert_eq!(w.sim.created(), 0, "nothing made");
    assert_eq!(w.held().await, Amount::ZERO, "the hold is released");
}

/// Past the resend horizon (15 minutes) no create goes out, and a lookup by reference asks the
/// provider only for the transfers created in the attempt's window (CDP's `createdBefore`, Circle's
/// `to`), however long after it runs: at a constant number of transfers a minute its cost does not
/// grow with the time since. (Before, creates went on until the key window's end and a lookup a day
/// later listed the whole day, capped at 2,000 transfers: a busier account could prove no death.)
pub(super) async fn past_the_resend_horizon_creates_stop_and_lookups_read_the_window(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    let id = w.request("provider-0056", 1_000_000).await;
    w.pipeline.tick().await.unwrap();
    let horizon = payoutd_rail_provider::config::RESEND_HORIZON_MS_DEFAULT;
    w.advance(horizon);
    let creates_before = w.creates_sent().len();
    w.rounds(3).await;
    assert_eq!(w.creates_sent().len(), creates_before, "no create past the horizon");
    assert_eq!(w.status(&id).await, PayoutStatus::Processing);
    let bound = match kind {
        ProviderKind::Coinbase => "createdBefore=",
        _ => "&to=",
    };
    let lists: Vec<String> = w
        .sim
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "GET" && (r.path.contains("transfers?") || r.path.contains("transactions?"))
        })
        .filter(|r| {
            r.path.contains("targetAddress")
                || r.path.contains("destinationAddress")
                || r.path.contains(bound)
        })
        .map(|r| r.path)
        .collect();
    assert!(!lists.is_empty(), "looked up by reference");
    assert!(lists.iter().all(|p| p.contains(bound)), "every lookup bounded: {lists:?}");
}

/// An attempt keeps the resend horizon it was made with: a worker restarted with a longer one
/// sends it no create past its own, so its lookups' window still holds every create it could have
/// made. (Before, the horizon was read from the running configuration: raised after the attempt
/// began, a worker went on creating past the window the attempt's lookups read.)
pub(super) async fn an_attempt_keeps_the_resend_horizon_it_was_made_with(db: TestDb) {
    let mut w = world(db, ProviderKind::Coinbase).await;
    w.sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    let id = w.request("provider-0059", 1_000_000).await;
    w.pipeline.tick().await.unwrap();
    let horizon = payoutd_rail_provider::config::RESEND_HORIZON_MS_DEFAULT;
    match &w.store.attempts_of(&id).await.unwrap()[0].slot {
        AttemptSlot::Provider { creates_for_ms, .. } => assert_eq!(*creates_for_ms, Some(horizon)),
        other => panic!("{other:?}"),
    }
    let api = api_of(w.kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let longer = ProviderRailConfig::default().with_resend_horizon_ms(KEY_WINDOW_MS_DEFAULT);
    let rail = Arc::new(ProviderRail::new(api, w.clock.clone(), longer));
    let config = PipelineConfig { rebroadcast_after_ms: 1_000, ..PipelineConfig::default() };
    w.pipeline = Pipeline::new(w.store.clone(), w.clock.clone(), config)
        .with_standalone_rail(StandaloneLine { rail, assets: vec![w.asset.clone()] });
    w.advance(horizon);
    let creates_before = w.creates_sent().len();
    w.rounds(3).await;
    assert_eq!(w.creates_sent().len(), creates_before, "no create past the attempt's own horizon");
}

/// A first create is answered with an error the adapter cannot know, after the provider made the
/// transfer: Circle's HTTP 400 with code -1 ("Something went wrong... unknown error"), or a 400 of
/// an error type Coinbase's spec or Stripe's docs do not list. That proves nothing, so the lookup
/// decides and the payout is paid once, by attempt 1. (Before, any 400 to a first call was taken
/// as a refusal: the attempt ended at once and attempt 2 made a second transfer.)
pub(super) async fn an_unknown_error_on_a_first_create_proves_nothing(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::UnknownErrorAfterCreate);
    let id = w.request("provider-0041", 3_000_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Confirmed)]
    );
    assert_eq!(w.sim.created(), 1, "one transfer");
}

/// Stripe saves a 500 for the key when execution began ("including 500 errors"), and replays it
/// to every retry (`Idempotent-Replayed: true`); Coinbase returns "the exact same response" to a
/// repeated key, its `correlationId` included: the key is spent and no retry can create
/// anything. The attempt is decided by lookups a margin after the replay, not after the 24-hour
/// window: nothing carries its reference, so it is dead and the next attempt pays, once, within
/// the test's 90 s of rounds. (Before, every retry met the same 500 and the payout waited out
/// the key window, still processing at the end of the rounds.)
pub(super) async fn a_saved_server_error_is_decided_by_lookup_not_by_the_key_window(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ServerErrorSaved);
    let id = w.request("provider-0040", 2_500_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_by_the_second_attempt(&id).await;
    let keys = w.creates_sent();
    assert!(keys.len() >= 3, "the first create, a retry met by the replay, attempt 2: {keys:?}");
    assert_eq!(keys.iter().filter(|k| **k == keys[0]).count(), keys.len() - 1);
}

/// The worker that met the replayed saved error is gone (killed, restarted) before the attempt is
/// decided: the replay's time is in the attempt, on the database's clock, so a fresh worker neither
/// calls the provider with the spent key again nor waits out the window; it decides by lookup a
/// margin after the recorded replay and the next attempt pays once. (Before, the spent key was the
/// process's memory: every fresh worker sent the key again to learn it anew, and a fleet whose
/// workers restart more often than the margin never decided.)
pub(super) async fn a_saved_server_error_one_worker_met_is_known_to_every_worker(
    db: TestDb,
    kind: ProviderKind,
) {
    let mut w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ServerErrorSaved);
    let id = w.request("provider-0049", 2_600_000).await;
    let key_spent = |attempts: &[payoutd_domain::Attempt]| match &attempts[0].slot {
        AttemptSlot::Provider { key_spent_at_ms, .. } => *key_spent_at_ms,
        other => panic!("{other:?}"),
    };
    for _ in 0..ROUNDS_MAX {
        w.pipeline.tick().await.unwrap();
        if key_spent(&w.store.attempts_of(&id).await.unwrap()).is_some() {
            break;
        }
        w.advance(ROUND_MS);
    }
    let recorded = key_spent(&w.store.attempts_of(&id).await.unwrap());
    assert!(recorded.is_some(), "the replay is recorded in the attempt");
    let sent_by_the_first_worker = w.creates_sent().len();
    assert_eq!(sent_by_the_first_worker, 2, "the create and the retry met by the replay");
    w.pipeline = w.fresh_pipeline();
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_by_the_second_attempt(&id).await;
    let keys = w.creates_sent();
    assert_eq!(
        keys.iter().filter(|k| **k == keys[0]).count(),
        sent_by_the_first_worker,
        "the fresh worker never sent the spent key: {keys:?}"
    );
    assert_eq!(
        key_spent(&w.store.attempts_of(&id).await.unwrap()),
        recorded,
        "the first replay counts"
    );
}
