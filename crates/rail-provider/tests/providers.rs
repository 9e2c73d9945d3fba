//! Each provider rail against its provider's simulator (real HTTP) through the engine's lifecycle, on both stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::{
    Amount, Asset, AssetRegistry, AttemptSlot, AttemptStatus, DepositKey, Destination, EvmAddress,
    IncidentKind, Metadata, PayoutId, PayoutKey, PayoutRequest, PayoutStatus,
};
use payoutd_engine::clock::Clock;
use payoutd_engine::standalone::{StandaloneRail, StandaloneStatus, SubmitOutcome};
use payoutd_engine::store::StoreError;
use payoutd_engine::{
    Caps, DatabaseClock, DatabaseTime, Engine, Pipeline, PipelineConfig, PipelineError,
    PipelineStore, StandaloneLine, Verdict,
};
use payoutd_provider_sim::{Fault, ProviderKind, ProviderSim};
use payoutd_rail_provider::{
    AWAITING_FUNDS_INCIDENT_AFTER_MS_DEFAULT, BridgeApi, BridgeConfig, CoinbaseApi, CoinbaseConfig,
    KEY_WINDOW_MS_DEFAULT, ProviderApi, ProviderRail, ProviderRailConfig, TravelRuleConfig,
    our_reference,
};
use payoutd_testkit::TestDb;

use crate::support::{FakeClock, Setup, api_of, asset_of, destination_of, kind_name};

/// The client gives up on an answer after this long; the simulator's delayed answers come later.
const CLIENT_TIMEOUT_MS: u64 = 600;
const DELAY_PAST_TIMEOUT_MS: u64 = 1_000;
/// The simulated provider's list shows a transfer this long after its creation (provider time):
/// several rounds, so a lookup that trusts the list too early is seen.
const LOOKUP_LAG_MS: u64 = 5_000;
/// Rounds of the pipeline a test runs at most before it fails.
const ROUNDS_MAX: u32 = 60;
/// Both clocks move this much per round: past `rebroadcast_after_ms`, and a provider state step.
const ROUND_MS: i64 = 1_500;
const FUNDED_BASE_UNITS: u128 = 1_000_000_000;
/// CDP list limits small enough for a test to fall behind them: one pass reads 4 transfers at most.
const CDP_TRANSFERS_PER_PAGE_SMALL: u32 = 2;
const CDP_PAGES_PER_CALL_SMALL: u32 = 2;
/// Transfers made by hand on the CDP account while reconciliation is behind: several passes' worth.
const CDP_BY_HAND_COUNT: usize = 11;
/// Where a busy account's other transfers go.
const BUSY_ELSEWHERE: &str = "0x00000000000000000000000000000000000b0b01";
/// Steps a Circle transaction shows STUCK unless accelerated: longer than any test runs.
const STUCK_FOR_GOOD_STEPS: u64 = 1_000_000;
/// Transfers a busy Circle wallet makes to other addresses: past what one lookup reads at two a page.
const CIRCLE_BUSY_COUNT: usize = 85;
/// The CDP account `support::api_of` pays from.
const CDP_ACCOUNT: &str = "account_af2937b0-9846-4fe7-bfe9-ccc22d935114";
/// How far apart (provider time) the transfers made by hand are created.
const CDP_BY_HAND_APART_MS: u64 = 3_000;

struct World {
    kind: ProviderKind,
    sim: ProviderSim,
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    pipeline: Pipeline,
    clock: Arc<FakeClock>,
    merchant: payoutd_domain::MerchantId,
    asset: Asset,
    db: TestDb,
}

async fn world(db: TestDb, kind: ProviderKind) -> World {
    world_with(db, kind, Setup::Working).await
}

async fn world_with(db: TestDb, kind: ProviderKind, setup: Setup) -> World {
    let sim = ProviderSim::start(kind).await;
    let api = api_of(kind, &sim, setup, CLIENT_TIMEOUT_MS);
    world_on(db, kind, sim, api).await
}

/// The world around an adapter the test configured itself.
async fn world_on(
    db: TestDb,
    kind: ProviderKind,
    sim: ProviderSim,
    api: Arc<dyn ProviderApi>,
) -> World {
    world_on_rail(db, kind, sim, api, ProviderRailConfig::default()).await
}

/// The world around an adapter and a rail the test configured itself.
async fn world_on_rail(
    db: TestDb,
    kind: ProviderKind,
    sim: ProviderSim,
    api: Arc<dyn ProviderApi>,
    rail_config: ProviderRailConfig,
) -> World {
    let store = db.pipeline();
    // Our clock starts where the provider's stands (the two agree in production, within skew).
    let clock = Arc::new(FakeClock(AtomicI64::new(i64::try_from(sim.now_ms()).unwrap())));
    let asset = asset_of(kind);
    let engine =
        Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let (merchant, _) = engine.create_merchant(kind_name(kind), [4u8; 32]).await.unwrap();
    engine
        .deposit(
            &merchant,
            &asset.code,
            Amount::from_u128(FUNDED_BASE_UNITS),
            DepositKey::parse("fund-provider").unwrap(),
        )
        .await
        .unwrap();
    let rail = Arc::new(ProviderRail::new(api, clock.clone(), rail_config));
    let config = PipelineConfig { rebroadcast_after_ms: 1_000, ..PipelineConfig::default() };
    let pipeline = Pipeline::new(store.clone(), clock.clone(), config)
        .with_standalone_rail(StandaloneLine { rail, assets: vec![asset.clone()] });
    World { kind, sim, store, engine, pipeline, clock, merchant, asset, db }
}

impl World {
    async fn request(&self, key: &str, amount: u128) -> PayoutId {
        let request = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            self.asset.code.clone(),
            Amount::from_u128(amount),
            destination_of(self.kind),
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0.id
    }

    async fn status(&self, id: &PayoutId) -> PayoutStatus {
        self.store.payout_by_id(id).await.unwrap().unwrap().status
    }

    /// Runs the pipeline, moving both clocks a round at a time, until the payout is in `status`.
    async fn run_until(&self, id: &PayoutId, status: PayoutStatus) {
        for _ in 0..ROUNDS_MAX {
            self.pipeline.tick().await.unwrap();
            if self.status(id).await == status {
                return;
            }
            self.advance(ROUND_MS);
        }
        panic!(
            "payout {id} is {:?}, not {status:?}: {:?}",
            self.status(id).await,
            self.store.attempts_of(id).await.unwrap()
        );
    }

    /// Moves both clocks, ours and the provider's, past the key window.
    /// Our clock and the provider's move `ms` at once.
    fn advance(&self, ms: i64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
        self.sim.advance(u64::try_from(ms).unwrap());
    }

    /// `n` rounds: a tick, then both clocks a round on.
    async fn rounds(&self, n: usize) {
        for _ in 0..n {
            self.pipeline.tick().await.unwrap();
            self.advance(ROUND_MS);
        }
    }

    fn pass_the_key_window(&self) {
        self.advance(KEY_WINDOW_MS_DEFAULT + 60_000);
    }

    /// The idempotency key of every create the simulator received, in order.
    /// A worker that has just started: the same store, the same provider, nothing in memory.
    fn fresh_pipeline(&self) -> Pipeline {
        let api = api_of(self.kind, &self.sim, Setup::Working, CLIENT_TIMEOUT_MS);
        let rail =
            Arc::new(ProviderRail::new(api, self.clock.clone(), ProviderRailConfig::default()));
        let config = PipelineConfig { rebroadcast_after_ms: 1_000, ..PipelineConfig::default() };
        Pipeline::new(self.store.clone(), self.clock.clone(), config)
            .with_standalone_rail(StandaloneLine { rail, assets: vec![self.asset.clone()] })
    }

    fn creates_sent(&self) -> Vec<String> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && !r.path.starts_with("/_sim"))
            .map(|r| match self.kind {
                ProviderKind::Stripe | ProviderKind::Bridge => {
                    header(&r.headers, "idempotency-key")
                }
                ProviderKind::Coinbase => header(&r.headers, "x-idempotency-key"),
                ProviderKind::Circle => serde_json::from_str::<serde_json::Value>(&r.body).unwrap()
                    ["idempotencyKey"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            })
            .collect()
    }

    async fn held(&self) -> Amount {
        self.engine.balances(&self.merchant).await.unwrap()[0].held
    }

    async fn provider_id(&self, id: &PayoutId) -> String {
        match &self.store.attempts_of(id).await.unwrap().last().unwrap().slot {
            AttemptSlot::Provider { reference: Some(r), .. } => r.as_str().to_owned(),
            other => panic!("no provider id recorded: {other:?}"),
        }
    }

    /// Attempt 1 proven dead, attempt 2 paid, by the one transfer the provider made.
    async fn assert_paid_by_the_second_attempt(&self, id: &PayoutId) {
        let attempts = self.store.attempts_of(id).await.unwrap();
        assert_eq!(
            attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
            vec![(1, AttemptStatus::Dead), (2, AttemptStatus::Confirmed)]
        );
        assert_eq!(
            (self.sim.created(), self.sim.created_with_reference(&our_reference(id, 2))),
            (1, 1),
            "one transfer, by the second attempt"
        );
    }

    async fn assert_paid_once(&self, id: &PayoutId) {
        assert_eq!(self.status(id).await, PayoutStatus::Paid);
        assert_eq!(
            self.sim.created_with_reference(&our_reference(id, 1)),
            1,
            "one transfer at the provider for the payout"
        );
        let attempts = self.store.attempts_of(id).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].status, AttemptStatus::Confirmed);
        self.provider_id(id).await; // recorded, also when the answer that carried it was lost
        assert_eq!(self.held().await, Amount::ZERO);
        assert!(self.store.audit_ledger().await.unwrap().is_clean());
    }
}

fn header(headers: &[(String, String)], name: &str) -> String {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// The common path: one create, answered; the provider's states progress to completed; paid once.
async fn pays_once(db: TestDb, kind: ProviderKind) {
    let w = world(db, kind).await;
    let id = w.request("provider-0001", 12_340_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
    assert_eq!(w.creates_sent().len(), 1);
}

/// SPEC 8.8: the first create fails before the provider did anything, the retry (same stored key
/// and body) times out after the provider made the transfer; the lookup finds it. Every create
/// sent the one stored key; one transfer.
async fn a_call_that_timed_out_is_retried_with_the_same_stored_key(db: TestDb, kind: ProviderKind) {
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
async fn retried_past_the_window_is_resolved_by_lookup_not_created_again(
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
async fn an_ambiguous_5xx_resolves_by_lookup(db: TestDb, kind: ProviderKind) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ServerErrorAfterCreate);
    let id = w.request("provider-0004", 9_900_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
}

/// The connection is reset after the provider made the transfer: the lookup decides; paid once.
async fn a_reset_after_the_create_resolves_by_lookup(db: TestDb, kind: ProviderKind) {
    let w = world(db, kind).await;
    w.sim.fault_next_create(Fault::ResetAfterCreate);
    let id = w.request("provider-0009", 4_200_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
}

/// Past the window with nothing at the provider (the only create failed before it did anything):
/// the lookup proves the first attempt never happened; the next attempt, with its own key, pays once.
async fn past_the_window_with_nothing_created_the_next_attempt_pays(
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
async fn a_refused_retry_after_an_ambiguous_create_is_not_proof(db: TestDb, kind: ProviderKind) {
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
async fn a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death(
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
async fn a_refusal_that_created_nothing_fails_cleanly(db: TestDb, kind: ProviderKind) {
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
async fn an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly(
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
async fn an_account_the_provider_does_not_hold_is_refused_at_once(db: TestDb, kind: ProviderKind) {
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
async fn a_stripe_payout_to_an_account_the_platform_lacks_fails_cleanly(db: TestDb) {
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
async fn past_the_resend_horizon_creates_stop_and_lookups_read_the_window(
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

/// A worker's own clock: the true time (the test's clock, which the database's follows) off by
/// `skew_ms`.
struct SkewedClock {
    truth: Arc<FakeClock>,
    skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        self.truth.now_ms() + self.skew_ms
    }
}

/// The database's clock: the true time.
struct DatabaseNow(Arc<FakeClock>);

#[async_trait::async_trait]
impl DatabaseTime for DatabaseNow {
    async fn database_now_ms(&self) -> Result<i64, StoreError> {
        Ok(self.0.now_ms())
    }
}

/// A world whose attempts may be created until a margin before the key window ends (no shorter
/// resend horizon): the window's end is where two skewed clocks meet.
async fn world_creating_until_the_window_s_end(db: TestDb, kind: ProviderKind) -> World {
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
async fn two_skewed_workers_at_the_window_s_end(
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
async fn with_each_worker_s_own_clock_the_key_window_splits(db: TestDb, kind: ProviderKind) {
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
async fn workers_on_the_database_s_clock_never_split_the_key_window(
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

/// The provider reports the transfer failed (its own proof that nothing moved): the attempt is
/// dead and the next attempt, with its own key, pays once; the hold never left the merchant.
async fn a_provider_reported_failure_starts_the_next_attempt(db: TestDb, kind: ProviderKind) {
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
async fn a_failed_transfer_beside_another_carrying_our_reference_is_no_proof_of_death(
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
async fn a_lookup_that_does_not_list_the_failed_transfer_yet_proves_no_death(
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
async fn an_unrecognised_provider_state_needs_a_person(db: TestDb, kind: ProviderKind) {
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
async fn a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident(
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
async fn destination_caps_hold_at_signing_under_two_workers(db: TestDb, kind: ProviderKind) {
    let caps = Caps {
        per_destination_per_hour: Amount::from_u128(10),
        per_wallet_per_hour: Amount::from_u128(1_000),
    };
    caps_hold_at_signing_under_two_workers(db, kind, caps).await;
}

async fn account_caps_hold_at_signing_under_two_workers(db: TestDb, kind: ProviderKind) {
    let caps = Caps {
        per_destination_per_hour: Amount::from_u128(1_000),
        per_wallet_per_hour: Amount::from_u128(10),
    };
    caps_hold_at_signing_under_two_workers(db, kind, caps).await;
}

async fn caps_hold_at_signing_under_two_workers(db: TestDb, kind: ProviderKind, caps: Caps) {
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
async fn an_attempt_unresolved_past_its_age_opens_one_incident(db: TestDb, kind: ProviderKind) {
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
async fn a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator(
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
async fn a_transfer_payoutd_did_not_make_opens_an_incident(db: TestDb, kind: ProviderKind) {
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

/// Someone with the API key makes more transfers than one reconciliation pass can read (CDP lists
/// in no promised order, so a pass reads the whole time range or proves nothing about it): the
/// passes still move the cursor forward over the time ranges they read whole, every transfer
/// made by hand opens its incident, and payoutd's own transfer none.
async fn a_coinbase_account_far_behind_is_still_reconciled(db: TestDb) {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let api =
        coinbase_api(&sim).with_list_limits(CDP_TRANSFERS_PER_PAGE_SMALL, CDP_PAGES_PER_CALL_SMALL);
    let w = world_on(db, ProviderKind::Coinbase, sim, Arc::new(api)).await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    let id = w.request("provider-0012", 1_000_000).await;
    let by_hand = coinbase_api(&w.sim);
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    for n in 0..CDP_BY_HAND_COUNT {
        let body = by_hand.request_for(&payout, &format!("by-hand-{n:04}")).unwrap();
        by_hand.create(&uuid::Uuid::new_v4().to_string(), &body).await.unwrap();
        w.advance(CDP_BY_HAND_APART_MS as i64);
    }
    w.run_until(&id, PayoutStatus::Paid).await;
    let unmatched = async || {
        w.store
            .open_incidents(100)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::UnmatchedTransfer)
            .collect::<Vec<_>>()
    };
    let cursor = async || {
        w.store
            .rail_cursor(&format!("provider:coinbase/{CDP_ACCOUNT}"))
            .await
            .unwrap()
            .expect("reconciliation started")
    };
    let mut cursors = vec![cursor().await];
    // Caught up: incidents for all, and the cursor reads from the present again (`<ms>|<id>`).
    for _ in 0..ROUNDS_MAX {
        if unmatched().await.len() >= CDP_BY_HAND_COUNT
            && cursors.last().unwrap().split('|').count() == 2
        {
            break;
        }
        w.pipeline.tick().await.unwrap();
        cursors.push(cursor().await);
    }
    assert_eq!(cursors.last().unwrap().split('|').count(), 2, "the cursor caught up: {cursors:?}");
    // The passes caught up through time windows (`<ms>|<id>|<span ms>|<horizon ms>`), not one read.
    assert!(
        cursors.iter().any(|c| c.split('|').count() == 4),
        "no pass read a window: {cursors:?}"
    );
    let incidents = unmatched().await;
    for n in 0..CDP_BY_HAND_COUNT {
        let reference = format!("by-hand-{n:04}");
        assert_eq!(
            incidents.iter().filter(|i| i.detail.contains(&reference)).count(),
            1,
            "one incident for {reference}: {incidents:?}"
        );
    }
    assert_eq!(
        w.store.open_incidents(100).await.unwrap().len(),
        CDP_BY_HAND_COUNT,
        "payoutd's own transfer is reconciled"
    );
}

/// The create's answer is lost; then the account makes more transfers to other addresses than one
/// lookup reads (4 here, 2,000 with CDP's own limits). The lookup by our reference asks CDP only for
/// transfers to the payout's destination (`targetAddress`), so it reads them whole and finds the
/// transfer. (Before, it listed every transfer of the account since the attempt and gave up past
/// its pages: an account making more than 2,000 transfers a day could never prove an attempt
/// dead, nor find its transfer this way.)
async fn a_coinbase_lookup_by_reference_reads_only_the_destinations_transfers(db: TestDb) {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let api: Arc<dyn ProviderApi> = Arc::new(
        coinbase_api(&sim).with_list_limits(CDP_TRANSFERS_PER_PAGE_SMALL, CDP_PAGES_PER_CALL_SMALL),
    );
    let w = world_on(db, ProviderKind::Coinbase, sim, api.clone()).await;
    let id = w.request("provider-0043", 1_000_000).await;
    found_past_a_busy_account(&w, api, &id, CDP_BY_HAND_COUNT).await;
    let lookups: Vec<_> = w
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/platform/v2/transfers?"))
        .filter(|r| r.path.contains("targetAddress="))
        .collect();
    assert!(!lookups.is_empty(), "the lookup names the destination");
}

/// As for Coinbase: with Circle answering two transactions a page, a lookup reads 80 at most; the
/// wallet makes more transfers to other addresses than that after ours, whose answer was lost. The
/// lookup asks only for transactions to the payout's destination (`destinationAddress`) and finds
/// ours. (Before, it read every transaction of the wallet since the attempt and gave up.)
async fn a_circle_lookup_by_reference_reads_only_the_destinations_transfers(db: TestDb) {
    let w = world(db, ProviderKind::Circle).await;
    w.sim.set_circle_page_cap(2);
    let api = api_of(ProviderKind::Circle, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let id = w.request("provider-0044", 1_000_000).await;
    found_past_a_busy_account(&w, api, &id, CIRCLE_BUSY_COUNT).await;
}

/// A provider may keep an address in another case than the one payoutd sent (neither Coinbase
/// nor Circle documents how its address filter compares): a lookup narrowed by the destination
/// that finds nothing reads the account's whole listing before anything is taken as absent. Here
/// the stored request names the destination in upper case, the transfer was made with it in
/// lower case. (Before this rule, the narrowed lookup alone answered: no transfer, on which a
/// proof of death could rest.)
async fn a_narrowed_lookup_that_finds_nothing_is_no_absence(db: TestDb, kind: ProviderKind) {
    let w = world(db, kind).await;
    let api = api_of(kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let id = w.request("provider-0055", 1_000_000).await;
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let since_ms = w.clock.now_ms();
    let sent = api.request_for(&payout, "ours-0055").unwrap();
    api.create(&uuid::Uuid::new_v4().to_string(), &sent).await.unwrap();
    let text = String::from_utf8(sent).unwrap();
    let address = format!("{}", destination_of(kind));
    let upper = format!("0x{}", address.trim_start_matches("0x").to_uppercase());
    assert!(text.contains(&address), "the request names {address}: {text}");
    let stored = text.replace(&address, &upper).into_bytes();
    let found = api
        .find_by_reference("ours-0055", &stored, crate::support::created_from(since_ms))
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "found in the whole listing");
}

/// The account first makes `busy` transfers to another address, then payout `id`'s create makes
/// its transfer and the answer is lost: the attempt's status, read by one lookup by our reference,
/// must read its answer whole and find the transfer.
async fn found_past_a_busy_account(
    w: &World,
    api: Arc<dyn ProviderApi>,
    id: &PayoutId,
    busy: usize,
) {
    let payout = w.store.payout_by_id(id).await.unwrap().unwrap();
    let mut elsewhere = payout.clone();
    elsewhere.destination = Destination::Evm(EvmAddress::parse(BUSY_ELSEWHERE).unwrap());
    for n in 0..busy {
        let body = api.request_for(&elsewhere, &format!("busy-{n:04}")).unwrap();
        api.create(&uuid::Uuid::new_v4().to_string(), &body).await.unwrap();
    }
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.sim.created(), busy + 1, "ours made too; its answer lost");
    let attempt = w.store.attempts_of(id).await.unwrap().remove(0);
    let rail = ProviderRail::new(api, w.clock.clone(), ProviderRailConfig::default());
    let status = rail.status(&attempt, &payout).await.expect("one lookup reads its answer whole");
    assert!(matches!(status, StandaloneStatus::Landed { .. }), "{status:?}");
}

/// The Coinbase adapter for `sim`, as `support::api_of` configures it, before any limit is changed.
fn coinbase_api(sim: &ProviderSim) -> CoinbaseApi {
    CoinbaseApi::new(coinbase_config(sim)).unwrap()
}

fn coinbase_config(sim: &ProviderSim) -> CoinbaseConfig {
    CoinbaseConfig {
        base_url: sim.base_url(),
        api_key_id: sim.api_key_id(),
        api_key: payoutd_domain::Secret::new(sim.api_key()),
        account_id: CDP_ACCOUNT.into(),
        source_asset: "usdc".into(),
        network: "base".into(),
        target_asset: "usdc".into(),
        decimals: 6,
        request_timeout_ms: CLIENT_TIMEOUT_MS,
        travel_rule: None,
    }
}

/// 1,000 USDC in base units: the simulator's travel rule threshold, and the adapter's here.
const TRAVEL_RULE_FROM_BASE_UNITS: u128 = 1_000_000_000;

/// A world whose Coinbase adapter sends travel rule data from `TRAVEL_RULE_FROM_BASE_UNITS`.
async fn coinbase_world_with_travel_rule(db: TestDb) -> World {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let api = CoinbaseApi::new(CoinbaseConfig {
        travel_rule: Some(TravelRuleConfig {
            from_base_units: TRAVEL_RULE_FROM_BASE_UNITS,
            originator: serde_json::json!({"name": "Example Payouts Ltd", "address": {"line1": "1 Main St", "city": "Dublin", "countryCode": "IE"}}),
            is_intermediary: false,
        }),
        ..coinbase_config(&sim)
    })
    .unwrap();
    let w = world_on(db, ProviderKind::Coinbase, sim, Arc::new(api)).await;
    let more = Amount::from_u128(2 * TRAVEL_RULE_FROM_BASE_UNITS);
    w.engine
        .deposit(&w.merchant, &w.asset.code, more, DepositKey::parse("fund-travel-rule").unwrap())
        .await
        .unwrap();
    w
}

/// A Coinbase payout at the travel rule threshold carries CDP's `travelRule` object: the
/// configured originator and the beneficiary the merchant gave in the payout's metadata; CDP
/// (the simulator, strict as its specification) takes it and the payout is paid once; a smaller
/// payout carries none. (Before, no travel rule data was ever sent: CDP answered
/// `travel_rules_field_missing` and every such payout failed.)
async fn a_coinbase_payout_at_the_travel_rule_threshold_carries_its_parties(db: TestDb) {
    let w = coinbase_world_with_travel_rule(db).await;
    let beneficiary = serde_json::json!({"travel_rule": {"beneficiary": {"name": "Ada Lovelace", "walletType": "self_custody",
        "address": {"line1": "12 St James's Sq", "city": "London", "countryCode": "GB"}}}});
    let metadata = Metadata::from_canonical_json(beneficiary.to_string()).unwrap();
    let request = PayoutRequest::new(
        PayoutKey::parse("provider-0050").unwrap(),
        w.asset.code.clone(),
        Amount::from_u128(TRAVEL_RULE_FROM_BASE_UNITS),
        destination_of(w.kind),
        metadata,
    );
    let id = w.engine.create_payout(&w.merchant, request).await.unwrap().0.id;
    let small = w.request("provider-0051", 2_000_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.run_until(&small, PayoutStatus::Paid).await;
    let bodies: Vec<serde_json::Value> = w
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    let large_amount =
        |b: &&serde_json::Value| b["amount"].as_str().is_some_and(|a| a.starts_with("1000"));
    let rule = bodies
        .iter()
        .find(large_amount)
        .map(|b| b["travelRule"].clone())
        .expect("the large payout was sent");
    assert_eq!(rule["originator"]["name"], "Example Payouts Ltd");
    assert_eq!(rule["beneficiary"]["name"], "Ada Lovelace");
    assert_eq!(rule["beneficiary"]["walletType"], "self_custody");
    let small_bodies: Vec<&serde_json::Value> = bodies
        .iter()
        .filter(|b| b["amount"].as_str().is_some_and(|a| a.starts_with('2')))
        .collect();
    assert!(
        !small_bodies.is_empty() && small_bodies.iter().all(|b| b.get("travelRule").is_none()),
        "below the threshold none is sent: {small_bodies:?}"
    );
    assert_eq!(w.sim.created(), 2);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A CDP API key of the EC P-256 kind, in the SEC1 form the CDP portal shows, signs ES256 tokens
/// the simulator (which checks them as CDP's SDKs make them, `aud` optional) accepts: a payout is
/// paid once. (Before, the simulator took EdDSA tokens only, so the ES256 path was never run
/// against a server.)
async fn a_coinbase_payout_signed_with_an_es256_key_is_paid_once(db: TestDb) {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let (api_key_id, secret) = sim.coinbase_ec_api_key();
    let api = CoinbaseApi::new(CoinbaseConfig {
        api_key_id,
        api_key: payoutd_domain::Secret::new(secret),
        ..coinbase_config(&sim)
    })
    .unwrap();
    let w = world_on(db, ProviderKind::Coinbase, sim, Arc::new(api)).await;
    let id = w.request("provider-0053", 3_000_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    // Every call of CDP's needs a valid token: a refused one is a 401 and nothing would be paid.
    w.assert_paid_once(&id).await;
}

/// A payout that needs travel rule data and has no beneficiary in its metadata is refused before
/// any call (nothing can have been created): it fails with its hold released and a reason that
/// names what is missing.
async fn a_coinbase_payout_needing_the_travel_rule_without_a_beneficiary_fails_before_any_call(
    db: TestDb,
) {
    let w = coinbase_world_with_travel_rule(db).await;
    let id = w.request("provider-0052", TRAVEL_RULE_FROM_BASE_UNITS + 1).await;
    w.run_until(&id, PayoutStatus::Failed).await;
    assert_eq!(
        w.sim.requests().into_iter().filter(|r| r.method == "POST").count(),
        0,
        "no create was sent"
    );
    assert_eq!(w.held().await, Amount::ZERO, "the hold is released");
    assert!(w.store.attempts_of(&id).await.unwrap().is_empty(), "nothing was prepared to send");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A Stripe transfer someone with the platform's account reversed in full (a deliberate clawback)
/// Circle's terminal states other than COMPLETE, `DENIED` (refused by Circle's compliance
/// screening) and `CANCELLED`, are each proof that nothing moved: the attempt is dead and the next
/// attempt, with its own key, pays once; the hold never left the merchant.
async fn a_denied_or_cancelled_circle_transfer_is_proof_and_the_next_attempt_pays_once(db: TestDb) {
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
async fn a_stuck_circle_transfer_is_accelerated_and_paid_once(db: TestDb) {
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
async fn a_refused_cancel_of_a_stuck_circle_transfer_changes_nothing(db: TestDb) {
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

/// A first create is answered with an error the adapter cannot know, after the provider made the
/// transfer: Circle's HTTP 400 with code -1 ("Something went wrong... unknown error"), or a 400 of
/// an error type Coinbase's spec or Stripe's docs do not list. That proves nothing, so the lookup
/// decides and the payout is paid once, by attempt 1. (Before, any 400 to a first call was taken
/// as a refusal: the attempt ended at once and attempt 2 made a second transfer.)
async fn an_unknown_error_on_a_first_create_proves_nothing(db: TestDb, kind: ProviderKind) {
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

/// Every request to Stripe names the API version whose shapes the adapter reads, so an account
/// upgraded to a newer default version cannot change what a transfer looks like to payoutd.
/// (Before, no request named one.)
async fn every_stripe_request_pins_the_api_version_its_shapes_follow(db: TestDb) {
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

/// Stripe saves a 500 for the key when execution began ("including 500 errors"), and replays it
/// to every retry (`Idempotent-Replayed: true`); Coinbase returns "the exact same response" to a
/// repeated key, its `correlationId` included: the key is spent and no retry can create
/// anything. The attempt is decided by lookups a margin after the replay, not after the 24-hour
/// window: nothing carries its reference, so it is dead and the next attempt pays, once, within
/// the test's 90 s of rounds. (Before, every retry met the same 500 and the payout waited out
/// the key window, still processing at the end of the rounds.)
async fn a_saved_server_error_is_decided_by_lookup_not_by_the_key_window(
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
async fn a_saved_server_error_one_worker_met_is_known_to_every_worker(
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

/// before payoutd learned its fate: the payout waits for a person with a `reverted` incident and
/// is never paid again by itself; the reversal is the proof a person's `failed` verdict rests on.
/// (Before, a full reversal was taken as proof of death and attempt 2 paid again.)
async fn a_reversed_stripe_transfer_needs_a_person_not_a_second_payment(db: TestDb) {
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
async fn a_stripe_transfer_reversed_in_part_needs_a_person_not_a_second_payment(db: TestDb) {
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
async fn another_customers_bridge_transfer_is_none_of_this_rails_business(db: TestDb) {
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
async fn a_bridge_transfer_awaiting_funds_opens_an_incident_past_the_wait(db: TestDb) {
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
async fn a_returned_bridge_transfer_is_final_only_once_its_refund_ends(db: TestDb) {
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
async fn a_bridge_transfer_that_delivers_less_than_the_payout_needs_a_person(db: TestDb) {
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
async fn a_bridge_wallet_holding_usdb_that_requires_initiation_pays_less_a_tolerated_gas_fee(
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
async fn a_bridge_transfer_is_paid_only_once_its_receipt_shows_what_arrived(db: TestDb) {
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
const CIRCLE_WALLET: &str = "0f9c0a52-2e84-4c0c-9f0e-4a6c0b6f1b10";

/// Circle may answer fewer transactions than the page size asked for ("the collection limit will
/// be used"): a lookup by reference reads on until an empty page, so a transfer past a short first
/// page is found. (Before, a page shorter than 50 ended the scan: the transfer was "absent", and
/// past the key window its attempt would have died and the payout been paid again.)
async fn a_circle_lookup_reads_past_short_pages(db: TestDb) {
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
async fn a_circle_list_that_pages_backwards_proves_no_absence(db: TestDb) {
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
async fn a_circle_lookup_finds_a_transfer_in_a_token_the_wallet_does_not_monitor(db: TestDb) {
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
async fn a_top_up_into_the_circle_wallet_is_not_an_unmatched_transfer(db: TestDb) {
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

mod circle_only {
    use super::*;
    payoutd_testkit::both_stores!(
        a_denied_or_cancelled_circle_transfer_is_proof_and_the_next_attempt_pays_once,
        a_stuck_circle_transfer_is_accelerated_and_paid_once,
        a_refused_cancel_of_a_stuck_circle_transfer_changes_nothing,
        a_circle_lookup_by_reference_reads_only_the_destinations_transfers,
        a_circle_lookup_reads_past_short_pages,
        a_circle_list_that_pages_backwards_proves_no_absence,
        a_circle_lookup_finds_a_transfer_in_a_token_the_wallet_does_not_monitor,
        a_top_up_into_the_circle_wallet_is_not_an_unmatched_transfer,
    );
}

mod bridge_only {
    use super::*;
    payoutd_testkit::both_stores!(
        another_customers_bridge_transfer_is_none_of_this_rails_business,
        a_bridge_transfer_awaiting_funds_opens_an_incident_past_the_wait,
        a_returned_bridge_transfer_is_final_only_once_its_refund_ends,
        a_bridge_transfer_that_delivers_less_than_the_payout_needs_a_person,
        a_bridge_transfer_is_paid_only_once_its_receipt_shows_what_arrived,
        a_bridge_wallet_holding_usdb_that_requires_initiation_pays_less_a_tolerated_gas_fee,
    );
}

mod stripe_only {
    use super::*;
    payoutd_testkit::both_stores!(
        a_reversed_stripe_transfer_needs_a_person_not_a_second_payment,
        a_stripe_transfer_reversed_in_part_needs_a_person_not_a_second_payment,
        every_stripe_request_pins_the_api_version_its_shapes_follow,
        a_stripe_payout_to_an_account_the_platform_lacks_fails_cleanly,
    );
}

mod unknown_errors {
    use super::*;
    async fn circle(db: TestDb) {
        an_unknown_error_on_a_first_create_proves_nothing(db, ProviderKind::Circle).await;
    }
    async fn coinbase(db: TestDb) {
        an_unknown_error_on_a_first_create_proves_nothing(db, ProviderKind::Coinbase).await;
    }
    async fn stripe(db: TestDb) {
        an_unknown_error_on_a_first_create_proves_nothing(db, ProviderKind::Stripe).await;
    }
    payoutd_testkit::both_stores!(circle, coinbase, stripe);
}

mod narrowed_lookups {
    use super::*;
    async fn coinbase(db: TestDb) {
        a_narrowed_lookup_that_finds_nothing_is_no_absence(db, ProviderKind::Coinbase).await;
    }
    async fn circle(db: TestDb) {
        a_narrowed_lookup_that_finds_nothing_is_no_absence(db, ProviderKind::Circle).await;
    }
    payoutd_testkit::both_stores!(coinbase, circle);
}

mod unknown_accounts {
    use super::*;
    async fn coinbase(db: TestDb) {
        an_account_the_provider_does_not_hold_is_refused_at_once(db, ProviderKind::Coinbase).await;
    }
    async fn circle(db: TestDb) {
        an_account_the_provider_does_not_hold_is_refused_at_once(db, ProviderKind::Circle).await;
    }
    payoutd_testkit::both_stores!(coinbase, circle);
}

/// An attempt keeps the resend horizon it was made with: a worker restarted with a longer one
/// sends it no create past its own, so its lookups' window still holds every create it could have
/// made. (Before, the horizon was read from the running configuration: raised after the attempt
/// began, a worker went on creating past the window the attempt's lookups read.)
async fn an_attempt_keeps_the_resend_horizon_it_was_made_with(db: TestDb) {
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

mod resend_horizon {
    use super::*;
    async fn kept_by_the_attempt(db: TestDb) {
        an_attempt_keeps_the_resend_horizon_it_was_made_with(db).await;
    }
    async fn coinbase(db: TestDb) {
        past_the_resend_horizon_creates_stop_and_lookups_read_the_window(
            db,
            ProviderKind::Coinbase,
        )
        .await;
    }
    async fn circle(db: TestDb) {
        past_the_resend_horizon_creates_stop_and_lookups_read_the_window(db, ProviderKind::Circle)
            .await;
    }
    payoutd_testkit::both_stores!(coinbase, circle, kept_by_the_attempt);
}

mod saved_errors {
    use super::*;
    async fn stripe(db: TestDb) {
        a_saved_server_error_is_decided_by_lookup_not_by_the_key_window(db, ProviderKind::Stripe)
            .await;
    }
    async fn coinbase(db: TestDb) {
        a_saved_server_error_is_decided_by_lookup_not_by_the_key_window(db, ProviderKind::Coinbase)
            .await;
    }
    async fn stripe_fresh_worker(db: TestDb) {
        a_saved_server_error_one_worker_met_is_known_to_every_worker(db, ProviderKind::Stripe)
            .await;
    }
    async fn coinbase_fresh_worker(db: TestDb) {
        a_saved_server_error_one_worker_met_is_known_to_every_worker(db, ProviderKind::Coinbase)
            .await;
    }
    payoutd_testkit::both_stores!(stripe, coinbase, stripe_fresh_worker, coinbase_fresh_worker);
}

/// Every scenario that applies to one provider, on both stores.
macro_rules! provider_tests {
    ($module:ident, $kind:expr, [$($scenario:ident),* $(,)?]) => {
        mod $module {
            use super::*;
            $(
                async fn $scenario(db: TestDb) {
                    super::$scenario(db, $kind).await
                }
            )*
            payoutd_testkit::both_stores!($($scenario),*);
        }
    };
}

provider_tests!(
    stripe,
    ProviderKind::Stripe,
    [
        pays_once,
        with_each_worker_s_own_clock_the_key_window_splits,
        workers_on_the_database_s_clock_never_split_the_key_window,
        destination_caps_hold_at_signing_under_two_workers,
        account_caps_hold_at_signing_under_two_workers,
        a_call_that_timed_out_is_retried_with_the_same_stored_key,
        retried_past_the_window_is_resolved_by_lookup_not_created_again,
        an_ambiguous_5xx_resolves_by_lookup,
        a_reset_after_the_create_resolves_by_lookup,
        past_the_window_with_nothing_created_the_next_attempt_pays,
        a_refusal_that_created_nothing_fails_cleanly,
        an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly,
        a_refused_retry_after_an_ambiguous_create_is_not_proof,
        a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death,
        a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident,
        an_attempt_unresolved_past_its_age_opens_one_incident,
        a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator,
        a_transfer_payoutd_did_not_make_opens_an_incident,
    ]
);

provider_tests!(
    coinbase,
    ProviderKind::Coinbase,
    [
        pays_once,
        with_each_worker_s_own_clock_the_key_window_splits,
        workers_on_the_database_s_clock_never_split_the_key_window,
        a_failed_transfer_beside_another_carrying_our_reference_is_no_proof_of_death,
        a_lookup_that_does_not_list_the_failed_transfer_yet_proves_no_death,
        a_call_that_timed_out_is_retried_with_the_same_stored_key,
        retried_past_the_window_is_resolved_by_lookup_not_created_again,
        an_ambiguous_5xx_resolves_by_lookup,
        a_reset_after_the_create_resolves_by_lookup,
        past_the_window_with_nothing_created_the_next_attempt_pays,
        a_refusal_that_created_nothing_fails_cleanly,
        an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly,
        a_refused_retry_after_an_ambiguous_create_is_not_proof,
        a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death,
        a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident,
        an_attempt_unresolved_past_its_age_opens_one_incident,
        a_provider_reported_failure_starts_the_next_attempt,
        a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator,
        a_transfer_payoutd_did_not_make_opens_an_incident,
    ]
);

mod coinbase_far_behind {
    use super::*;
    payoutd_testkit::both_stores!(
        a_coinbase_account_far_behind_is_still_reconciled,
        a_coinbase_lookup_by_reference_reads_only_the_destinations_transfers,
    );
}

mod coinbase_only {
    use super::*;
    payoutd_testkit::both_stores!(
        a_coinbase_payout_at_the_travel_rule_threshold_carries_its_parties,
        a_coinbase_payout_needing_the_travel_rule_without_a_beneficiary_fails_before_any_call,
        a_coinbase_payout_signed_with_an_es256_key_is_paid_once,
    );
}

provider_tests!(
    bridge,
    ProviderKind::Bridge,
    [
        pays_once,
        a_call_that_timed_out_is_retried_with_the_same_stored_key,
        retried_past_the_window_is_resolved_by_lookup_not_created_again,
        an_ambiguous_5xx_resolves_by_lookup,
        a_reset_after_the_create_resolves_by_lookup,
        past_the_window_with_nothing_created_the_next_attempt_pays,
        a_refusal_that_created_nothing_fails_cleanly,
        an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly,
        a_refused_retry_after_an_ambiguous_create_is_not_proof,
        a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death,
        a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident,
        an_attempt_unresolved_past_its_age_opens_one_incident,
        an_unrecognised_provider_state_needs_a_person,
        a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator,
        a_transfer_payoutd_did_not_make_opens_an_incident,
    ]
);

provider_tests!(
    circle,
    ProviderKind::Circle,
    [
        pays_once,
        a_failed_transfer_beside_another_carrying_our_reference_is_no_proof_of_death,
        a_lookup_that_does_not_list_the_failed_transfer_yet_proves_no_death,
        a_call_that_timed_out_is_retried_with_the_same_stored_key,
        retried_past_the_window_is_resolved_by_lookup_not_created_again,
        an_ambiguous_5xx_resolves_by_lookup,
        a_reset_after_the_create_resolves_by_lookup,
        past_the_window_with_nothing_created_the_next_attempt_pays,
        a_refusal_that_created_nothing_fails_cleanly,
        an_account_short_of_funds_is_refused_at_once_and_the_payout_fails_cleanly,
        a_refused_retry_after_an_ambiguous_create_is_not_proof,
        a_create_at_the_end_of_the_window_cannot_race_the_proof_of_death,
        a_dead_attempt_that_lands_later_opens_a_duplicate_transfer_incident,
        an_attempt_unresolved_past_its_age_opens_one_incident,
        a_provider_reported_failure_starts_the_next_attempt,
        a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator,
        a_transfer_payoutd_did_not_make_opens_an_incident,
    ]
);
