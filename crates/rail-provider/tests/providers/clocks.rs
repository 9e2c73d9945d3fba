//! The key window on skewed clocks: each worker's own clock splits it, the database's clock never does.

use super::*;

/// A worker's own clock: the true time (the test's clock, which the database's follows) off by
/// `skew_ms`.
pub(super) struct SkewedClock {
    truth: Arc<FakeClock>,
    skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        self.truth.now_ms() + self.skew_ms
    }
}

/// The database's clock: the true time.
pub(super) struct DatabaseNow(Arc<FakeClock>);

#[async_trait::async_trait]
impl DatabaseTime for DatabaseNow {
    async fn database_now_ms(&self) -> Result<i64, StoreError> {
        Ok(self.0.now_ms())
    }
}

/// A world whose attempts may be created until a margin before the key window ends (no shorter
/// resend horizon): the window's end is where two skewed clocks meet.
pub(super) async fn world_creating_until_the_window_s_end(db: TestDb, kind: ProviderKind) -> World {
    let sim = ProviderSim::start(kind).await;
    let api = api_of(kind, &sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let config = ProviderRailConfig::default().with_resend_horizon_ms(KEY_WINDOW_MS_DEFAULT);
    world_on_rail(db, kind, sim, api, config).await
}

/// Two workers judge attempt 1, whose only create failed before the provider made anything, with
/// clocks off the true time by twice the rail's margin, one ahead and one behind; `clock_of` makes
/// each worker's clock from its own. The worker ahead looks the attempt up a margin before the
/// window ends and again at its end (true time); the one behind then sends its create. What each
/// said: the second lookup's status and the create's outcome.
pub(super) async fn two_skewed_workers_at_the_window_s_end(
    w: &World,
    clock_of: impl AsyncFn(Arc<dyn Clock>) -> Arc<dyn Clock>,
) -> (StandaloneStatus, SubmitOutcome) {
    w.sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    let id = w.request("provider-clock-01", 1_000_000).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.sim.created(), 0, "the first create made nothing");
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    // Creates allowed until a margin before the window ends (no shorter resend horizon): the
    // window's end is where the two clocks meet.
    let config = ProviderRailConfig::default().with_resend_horizon_ms(KEY_WINDOW_MS_DEFAULT);
    let skew_ms = 2 * config.margin_ms();
    let worker = async |skew_ms| {
        let own: Arc<dyn Clock> = Arc::new(SkewedClock { truth: w.clock.clone(), skew_ms });
        let api = api_of(w.kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
        ProviderRail::new(api, clock_of(own).await, config.clone())
    };
    let (ahead, behind) = (worker(skew_ms).await, worker(-skew_ms).await);
    w.advance(KEY_WINDOW_MS_DEFAULT - config.margin_ms());
    assert_eq!(ahead.status(&attempt, &payout).await.unwrap(), StandaloneStatus::Pending);
    w.advance(config.margin_ms());
    let judged = ahead.status(&attempt, &payout).await.unwrap();
    (judged, behind.submit(&attempt).await)
}

/// Each worker on its own clock, as workers measured the key window before: with the clocks off by
/// more than the margin, the worker ahead proves the attempt dead while the one behind still
/// creates it, and the next attempt would pay a second time. This is the hazard the database's
/// clock closes (next test).
pub(super) async fn with_each_worker_s_own_clock_the_key_window_splits(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world_creating_until_the_window_s_end(db, kind).await;
    let (judged, sent) = two_skewed_workers_at_the_window_s_end(&w, async |own| own).await;
    assert!(matches!(judged, StandaloneStatus::Dead { .. }), "{judged:?}");
    assert!(matches!(sent, SubmitOutcome::Accepted { .. }), "{sent:?}");
    assert_eq!(w.sim.created(), 1, "created after its death was proven");
}

/// The same workers on the database's clock: both read the database's time whatever their own
/// clocks say, and a worker off it by more than the bound is out of step: it proves no death by
/// absence and sends no create. Nothing is created and nothing dies. (Before, each worker used its
/// own clock: the previous test.)
pub(super) async fn workers_on_the_database_s_clock_never_split_the_key_window(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world_creating_until_the_window_s_end(db, kind).await;
    let database = DatabaseNow(w.clock.clone());
    let on_database = async |own: Arc<dyn Clock>| -> Arc<dyn Clock> {
        let clock = DatabaseClock::new(own);
        clock.measure(&database).await.unwrap();
        assert_eq!(clock.now_ms(), w.clock.now_ms(), "the database's time, not the worker's");
        assert!(!clock.in_step(), "off the database's clock beyond the bound");
        let clock: Arc<dyn Clock> = Arc::new(clock);
        clock
    };
    let (judged, sent) = two_skewed_workers_at_the_window_s_end(&w, on_database).await;
    assert_eq!(judged, StandaloneStatus::Pending, "no death proven on a clock out of step");
    assert!(
        matches!(sent, SubmitOutcome::NotAccepted(ref why) if why.contains("clock")),
        "{sent:?}"
    );
    assert_eq!(w.sim.created(), 0);
}
