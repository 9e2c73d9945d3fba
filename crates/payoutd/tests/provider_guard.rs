//! The Redis send guard on a provider rail (real HTTP to its simulator), on both stores: what it stops, and the verdicts a person gives on what it remembers.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd::redis_guard::RedisGuard;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, DepositKey, Destination, DestinationKind, IncidentKind,
    MerchantId, Metadata, Payout, PayoutKey, PayoutRequest, PayoutStatus, ProviderAccount, Secret,
};
use payoutd_engine::clock::Clock;
use payoutd_engine::{
    Engine, Pipeline, PipelineConfig, PipelineError, PipelineStore, StandaloneLine, Verdict,
};
use payoutd_provider_sim::{ProviderKind, ProviderSim};
use payoutd_rail_provider::{ProviderRail, ProviderRailConfig, StripeApi, StripeConfig};
use payoutd_testkit::TestDb;

const REDIS_URL: &str = "redis://127.0.0.1:6379";
const REQUEST_TIMEOUT_MS: u64 = 2_000;

struct FakeClock(AtomicI64);

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The database loses attempt 1 after its create went out (a failover that lost the last commits):
/// the payout reads `approved` again. With the guard on, no second create is sent: the payout waits
/// for a person with a `lost_attempt` incident. (Before, rails without nonces never asked the
/// guard: the create went out again, and on Solana a second signature would have paid twice.)
async fn the_send_guard_stops_a_second_create_after_the_database_forgot_the_first(db: TestDb) {
    let w = lost_first_create(db).await;
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The create the database lost was taken by the provider: `failed` is refused while the
/// provider shows the transfer standing, and accepted once the provider's own answer for our
/// reference is its reversal: the hold is released. (Before, the guard kept only the reference:
/// the provider could not be asked, every verdict but `paid` was refused and the hold stayed.)
async fn a_lost_provider_attempt_is_failed_on_the_providers_own_answer(db: TestDb) {
    let w = lost_first_create(db).await;
    let standing = w
        .pipeline
        .resolve_needs_attention(&w.payout.id, Verdict::Failed, "support says it bounced")
        .await
        .unwrap_err();
    assert!(
        matches!(standing, PipelineError::Refused(_)),
        "the transfer stands at the provider: {standing}"
    );
    let ids = w.sim.ids_with_reference(&w.reference);
    assert_eq!(ids.len(), 1, "one transfer for the payout");
    assert!(w.sim.fail(&ids[0], "reversed by the platform"));
    let failed = w
        .pipeline
        .resolve_needs_attention(&w.payout.id, Verdict::Failed, "the platform reversed it")
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
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A payout whose attempt 1 the provider took and the database then lost, waiting for a person.
struct LostCreate {
    sim: ProviderSim,
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    merchant: MerchantId,
    pipeline: Pipeline,
    payout: Payout,
    /// Our reference of the lost attempt's transfer.
    reference: String,
}

/// The database loses attempt 1 after its create went out (a failover that lost the last commits):
/// the payout reads `approved` again. With the guard on, no second create is sent: the payout waits
/// for a person with a `lost_attempt` incident.
async fn lost_first_create(db: TestDb) -> LostCreate {
    let w = forgotten_first_create(&db).await;
    let creates = || {
        w.sim
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && !r.path.starts_with("/_sim"))
            .count()
    };
    assert_eq!(creates(), 1);
    w.pipeline.tick().await.unwrap();
    let after = w.store.payout_by_id(&w.payout.id).await.unwrap().unwrap();
    assert_eq!(after.status, PayoutStatus::NeedsAttention, "a person must look");
    assert_eq!(creates(), 1, "no second create");
    let incidents = w.store.open_incidents(10).await.unwrap();
    assert_eq!(
        incidents.iter().map(|i| i.kind).collect::<Vec<_>>(),
        vec![IncidentKind::LostAttempt]
    );
    w
}

/// The failover leaves the payout `approved`, its create out at the provider: the merchant's
/// cancel is refused (the guard remembers attempt 1), the hold stays, and the next pass puts the
/// payout before a person. (Before, the cancel released the hold while the transfer stood: the
/// merchant got the money back and the recipient was paid.)
async fn a_cancel_after_the_database_forgot_the_first_create_is_refused(db: TestDb) {
    let w = forgotten_first_create(&db).await;
    let cancel = w.engine.cancel_payout(&w.merchant, &w.payout.id).await;
    assert!(matches!(cancel, Err(payoutd_engine::IntakeError::AttemptRemembered)), "{cancel:?}");
    let after = w.store.payout_by_id(&w.payout.id).await.unwrap().unwrap();
    assert_eq!(after.status, PayoutStatus::Approved, "the cancel changed nothing");
    let held = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.held)
        .fold(Amount::ZERO, |a, b| a.checked_add(b).unwrap());
    assert_eq!(held, w.payout.amount, "the hold stays");
    w.pipeline.tick().await.unwrap();
    assert_eq!(
        w.store.payout_by_id(&w.payout.id).await.unwrap().unwrap().status,
        PayoutStatus::NeedsAttention
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Attempt 1's create went out, then the database failed over to a copy without the commits that
/// made it: the payout reads `approved` again, and only the send guard remembers the attempt.
async fn forgotten_first_create(db: &TestDb) -> LostCreate {
    let stripe = StripeOver::start().await;
    let (sim, clock, asset, rail) = (stripe.sim, stripe.clock, stripe.asset, stripe.rail);
    let store = db.pipeline();
    let guard = Arc::new(
        RedisGuard::connect(REDIS_URL)
            .await
            .expect("Redis is required for this test (scripts/test starts it)"),
    );
    let engine =
        Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap())
            .with_guard(guard.clone());
    let (merchant, _) = engine.create_merchant("guarded", [4u8; 32]).await.unwrap();
    engine
        .deposit(
            &merchant,
            &asset.code,
            Amount::from_u128(1_000_000),
            DepositKey::parse("fund-guarded").unwrap(),
        )
        .await
        .unwrap();
    let pipeline = Pipeline::new(store.clone(), clock.clone(), PipelineConfig::default())
        .with_standalone_rail(StandaloneLine { rail, assets: vec![asset.clone()] })
        .with_guard(guard);
    let key = PayoutKey::parse(&format!("guarded-{}", uuid::Uuid::new_v4().simple())).unwrap();
    let destination =
        Destination::Account(ProviderAccount::parse("acct_1Nv0FGQ9RKHgCVdK").unwrap());
    let payout = engine
        .create_payout(
            &merchant,
            PayoutRequest::new(
                key,
                asset.code.clone(),
                Amount::from_u128(4_200),
                destination,
                Metadata::empty(),
            ),
        )
        .await
        .unwrap()
        .0;
    // Signed and sent only: the database loses the attempt before anything settled it.
    pipeline.policy_pass().await.unwrap();
    pipeline.sign_pass().await.unwrap();
    assert_eq!(sim.created(), 1);
    let attempt = store.attempts_of(&payout.id).await.unwrap()[0].clone();
    let reference = attempt.txs[0].hash.to_string();
    db.exec_raw(&format!("DELETE FROM attempt_transactions WHERE attempt_id = '{}'", attempt.id))
        .await
        .unwrap();
    db.exec_raw(&format!("DELETE FROM attempts WHERE id = '{}'", attempt.id)).await.unwrap();
    db.exec_raw(&format!("UPDATE payouts SET status = 'approved' WHERE id = '{}'", payout.id))
        .await
        .unwrap();
    LostCreate { sim, store, engine, merchant, pipeline, payout, reference }
}

/// A Stripe rail over the simulator, on a clock the test moves.
struct StripeOver {
    sim: ProviderSim,
    clock: Arc<FakeClock>,
    asset: Asset,
    rail: Arc<ProviderRail>,
}

impl StripeOver {
    async fn start() -> StripeOver {
        let sim = ProviderSim::start(ProviderKind::Stripe).await;
        let clock = Arc::new(FakeClock(AtomicI64::new(i64::try_from(sim.now_ms()).unwrap())));
        let kind = TokenKind::Provider(DestinationKind::Account);
        let asset = Asset::new("provider:stripe/USD", 2, kind).unwrap();
        let api = StripeApi::new(StripeConfig {
            base_url: sim.base_url(),
            api_key: Secret::new(sim.api_key()),
            account: "platform".into(),
            currency: "usd".into(),
            request_timeout_ms: REQUEST_TIMEOUT_MS,
        })
        .unwrap();
        let config = ProviderRailConfig::default();
        let rail = Arc::new(ProviderRail::new(Arc::new(api), clock.clone(), config));
        StripeOver { sim, clock, asset, rail }
    }
}

payoutd_testkit::both_stores!(
    a_cancel_after_the_database_forgot_the_first_create_is_refused,
    the_send_guard_stops_a_second_create_after_the_database_forgot_the_first,
    a_lost_provider_attempt_is_failed_on_the_providers_own_answer,
);
