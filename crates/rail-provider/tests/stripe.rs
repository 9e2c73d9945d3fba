//! The Stripe rail against the Stripe simulator (real HTTP) through the engine's lifecycle, on both stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, AttemptSlot, AttemptStatus, DepositKey, Destination, DestinationKind, Metadata, PayoutId, PayoutKey, PayoutRequest,
    PayoutStatus, ProviderAccount, Secret,
};
use payoutd_engine::clock::Clock;
use payoutd_engine::{Engine, Pipeline, PipelineConfig, PipelineStore, StandaloneLine};
use payoutd_provider_sim::{Fault, ProviderKind, ProviderSim};
use payoutd_rail_provider::{KEY_WINDOW_MS_DEFAULT, ProviderApi, ProviderRail, ProviderRailConfig, StripeApi, StripeConfig, our_reference};
use payoutd_testkit::TestDb;

const USD: &str = "provider:stripe/USD";
const CONNECTED: &str = "acct_1Nv0FGQ9RKHgCVdK";
/// The client gives up on an answer after this long; the simulator's delayed answers come later.
const CLIENT_TIMEOUT_MS: u64 = 300;
const DELAY_PAST_TIMEOUT_MS: u64 = 1_000;
/// Rounds of the pipeline a test runs at most before it fails.
const ROUNDS_MAX: u32 = 60;
/// Our clock moves this much per round: past `rebroadcast_after_ms`, so each round may retry.
const ROUND_MS: i64 = 1_500;

struct FakeClock(AtomicI64);

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct World {
    sim: ProviderSim,
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    pipeline: Pipeline,
    clock: Arc<FakeClock>,
    merchant: payoutd_domain::MerchantId,
}

fn stripe_config(sim: &ProviderSim) -> StripeConfig {
    StripeConfig {
        base_url: sim.base_url(),
        api_key: Secret::new(sim.api_key()),
        account: "platform".into(),
        currency: "usd".into(),
        request_timeout_ms: CLIENT_TIMEOUT_MS,
    }
}

async fn world(db: TestDb) -> World {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    let store = db.pipeline();
    let clock = Arc::new(FakeClock(AtomicI64::new(1_800_000_000_000)));
    let asset = Asset::new(USD, 2, TokenKind::Provider(DestinationKind::Account)).unwrap();
    let engine = Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let (merchant, _) = engine.create_merchant("stripe", [4u8; 32]).await.unwrap();
    engine.deposit(&merchant, &asset.code, Amount::from_u128(100_000_000), DepositKey::parse("fund-usd").unwrap()).await.unwrap();
    let api = Arc::new(StripeApi::new(stripe_config(&sim)).unwrap());
    let rail = Arc::new(ProviderRail::new(api, clock.clone(), ProviderRailConfig::default()));
    let config = PipelineConfig { rebroadcast_after_ms: 1_000, ..PipelineConfig::default() };
    let pipeline = Pipeline::new(store.clone(), clock.clone(), vec![], config).with_standalone_rail(StandaloneLine { rail, assets: vec![asset] });
    World { sim, store, engine, pipeline, clock, merchant }
}

impl World {
    async fn request(&self, key: &str, amount_cents: u128) -> PayoutId {
        self.request_to(key, amount_cents, CONNECTED).await
    }

    async fn request_to(&self, key: &str, amount_cents: u128, account: &str) -> PayoutId {
        let request = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            payoutd_domain::AssetCode::parse(USD).unwrap().0,
            Amount::from_u128(amount_cents),
            Destination::Account(ProviderAccount::parse(account).unwrap()),
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0.id
    }

    async fn status(&self, id: &PayoutId) -> PayoutStatus {
        self.store.payout_by_id(id).await.unwrap().unwrap().status
    }

    /// Runs the pipeline, moving our clock a round at a time, until the payout is in `status`.
    async fn run_until(&self, id: &PayoutId, status: PayoutStatus) {
        for _ in 0..ROUNDS_MAX {
            self.pipeline.tick().await.unwrap();
            if self.status(id).await == status {
                return;
            }
            self.clock.0.fetch_add(ROUND_MS, Ordering::SeqCst);
        }
        panic!("payout {id} is {:?}, not {status:?}: {:?}", self.status(id).await, self.store.attempts_of(id).await.unwrap());
    }

    /// Moves both clocks, ours and the provider's, past the key window.
    fn pass_the_key_window(&self) {
        let past = KEY_WINDOW_MS_DEFAULT + 60_000;
        self.clock.0.fetch_add(past, Ordering::SeqCst);
        self.sim.advance(u64::try_from(past).unwrap());
    }

    fn creates_sent(&self) -> Vec<String> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.starts_with("/v1/transfers"))
            .map(|r| r.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("idempotency-key")).map(|(_, v)| v.clone()).unwrap_or_default())
            .collect()
    }

    async fn held(&self) -> Amount {
        self.engine.balances(&self.merchant).await.unwrap()[0].held
    }

    async fn assert_paid_once(&self, id: &PayoutId) {
        assert_eq!(self.status(id).await, PayoutStatus::Paid);
        let reference = our_reference(id, 1);
        assert_eq!(self.sim.created_with_reference(&reference), 1, "one transfer at Stripe for the payout");
        let attempts = self.store.attempts_of(id).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert!(matches!(&attempts[0].slot, AttemptSlot::Provider { reference: Some(r), .. } if r.as_str().starts_with("tr_")), "{:?}", attempts[0].slot);
        assert_eq!(self.held().await, Amount::ZERO);
        assert!(self.store.audit_ledger().await.unwrap().is_clean());
    }
}

/// The common path: one create, answered; the transfer is final at once; paid.
async fn stripe_pays_a_connected_account_once(db: TestDb) {
    let w = world(db).await;
    let id = w.request("stripe-0001", 12_34).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
    assert_eq!(w.creates_sent().len(), 1);
}

/// SPEC 8.8: the first create fails before Stripe did anything, the retry (same stored key and
/// body) times out after Stripe made the transfer: the lookup by our reference finds it. Every
/// create sent the one stored key; one transfer.
async fn stripe_a_call_that_timed_out_is_retried_with_the_same_stored_key(db: TestDb) {
    let w = world(db).await;
    w.sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    let id = w.request("stripe-0002", 50_00).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.status(&id).await, PayoutStatus::Processing);
    assert_eq!(w.sim.created(), 0);
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
    let keys = w.creates_sent();
    assert_eq!(keys.len(), 2, "the retry went out once it was due");
    assert_eq!(keys[0], keys[1], "every create sent the stored key");
    assert_eq!(w.sim.created(), 1);
}

/// SPEC 8.9: the answer is lost and the next look comes after the key window: no create is sent
/// again (Stripe may have forgotten the key); the lookup by our reference finds the transfer.
async fn stripe_past_the_window_the_outcome_is_found_by_lookup_not_created_again(db: TestDb) {
    let w = world(db).await;
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    let id = w.request("stripe-0003", 75_00).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.creates_sent().len(), 1);
    w.pass_the_key_window();
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
    assert_eq!(w.creates_sent().len(), 1, "past the window nothing is created again");
}

/// A 500 after Stripe made the transfer (and Stripe replays that 500 for the same key): the
/// lookup by our reference decides; paid once.
async fn stripe_an_ambiguous_5xx_resolves_by_lookup(db: TestDb) {
    let w = world(db).await;
    w.sim.fault_next_create(Fault::ServerErrorAfterCreate);
    let id = w.request("stripe-0004", 99_00).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.assert_paid_once(&id).await;
}

/// Past the window with nothing at Stripe (every create failed before Stripe did anything): the
/// lookup proves the first attempt never happened; the next attempt, with a new key, pays once.
async fn stripe_past_the_window_with_nothing_created_the_next_attempt_pays(db: TestDb) {
    let w = world(db).await;
    w.sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    let id = w.request("stripe-0005", 10_00).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.sim.created(), 0);
    w.pass_the_key_window();
    w.run_until(&id, PayoutStatus::Paid).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(), vec![(1, AttemptStatus::Dead), (2, AttemptStatus::Confirmed)]);
    assert_eq!(w.sim.created(), 1, "one transfer, by the second attempt");
    assert_eq!(w.sim.created_with_reference(&our_reference(&id, 2)), 1);
    let keys = w.creates_sent();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1], "the next attempt has its own key");
}

/// Stripe refuses the create (a bank account id where a connected account belongs: "No such
/// destination"): nothing was created, so the attempt ends; every attempt is refused alike, and the
/// payout fails with its hold released.
async fn stripe_a_refusal_that_created_nothing_fails_cleanly(db: TestDb) {
    let w = world(db).await;
    let id = w.request_to("stripe-0006", 30_00, "ba_1Nv0FGQ9RKHgCVdK").await;
    w.run_until(&id, PayoutStatus::Failed).await;
    assert_eq!(w.sim.created(), 0);
    assert_eq!(w.held().await, Amount::ZERO, "the hold is released");
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert!(attempts.iter().all(|a| a.status == AttemptStatus::Dead), "{attempts:?}");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A client that makes a fresh key for each retry (the bug this rail cannot have) creates two
/// transfers at the simulator, which sees it; the rail itself, through the same fault, creates one.
async fn a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator(db: TestDb) {
    let w = world(db).await;
    let api = StripeApi::new(stripe_config(&w.sim)).unwrap();
    let payout = {
        let id = w.request("stripe-0007", 20_00).await;
        w.store.payout_by_id(&id).await.unwrap().unwrap()
    };
    let reference = our_reference(&payout.id, 1);
    let body = api.request_for(&payout, &reference).unwrap();
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    assert!(api.create(&uuid::Uuid::new_v4().to_string(), &body).await.is_err(), "the first answer is too late");
    api.create(&uuid::Uuid::new_v4().to_string(), &body).await.unwrap();
    assert_eq!(w.sim.created_with_reference(&reference), 2, "a fresh key per retry pays twice");
}

payoutd_testkit::both_stores!(
    stripe_pays_a_connected_account_once,
    stripe_a_call_that_timed_out_is_retried_with_the_same_stored_key,
    stripe_past_the_window_the_outcome_is_found_by_lookup_not_created_again,
    stripe_an_ambiguous_5xx_resolves_by_lookup,
    stripe_past_the_window_with_nothing_created_the_next_attempt_pays,
    stripe_a_refusal_that_created_nothing_fails_cleanly,
    a_client_with_a_fresh_key_per_retry_creates_two_transfers_at_the_simulator,
);
