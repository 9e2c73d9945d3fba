//! A second payment found by reconciliation is booked against the platform, never the merchant, with its incident (a provider's API, real HTTP to its simulator), on both stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, Asset, AssetRegistry, DepositKey, Destination, DestinationKind, IncidentKind, Metadata, PayoutKey, PayoutRequest, PayoutStatus, ProviderAccount, Secret};
use payoutd_engine::clock::Clock;
use payoutd_engine::{Engine, Pipeline, PipelineConfig, StandaloneLine};
use payoutd_provider_sim::{Fault, ProviderKind, ProviderSim};
use payoutd_rail_provider::{KEY_WINDOW_MS_DEFAULT, ProviderRail, ProviderRailConfig, StripeApi, StripeConfig};
use payoutd_testkit::TestDb;

const REQUEST_TIMEOUT_MS: u64 = 300;
/// The first create's answer comes this late: past the client's budget, so the call is ambiguous.
const DELAY_PAST_TIMEOUT_MS: u64 = 1_000;
const ROUND_MS: i64 = 1_500;
const ROUNDS_MAX: u32 = 60;
const AMOUNT_BASE_UNITS: u128 = 3_300;
const FUNDED_BASE_UNITS: u128 = 1_000_000;

struct FakeClock(AtomicI64);

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The provider's list hides attempt 1's transfer past the key window, so attempt 1 is proven dead
/// and attempt 2 pays; then attempt 1's transfer shows up. Reconciliation opens one
/// `duplicate_transfer` incident and, in the same write, books the second payment against
/// `platform:losses`: the merchant is charged once, the ledger audit stays clean. (Before, the
/// incident was opened and nothing was booked: the second payment was in no account.)
async fn a_second_payment_is_booked_against_the_platform_with_its_incident(db: TestDb) {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    let store = db.pipeline();
    let clock = Arc::new(FakeClock(AtomicI64::new(i64::try_from(sim.now_ms()).unwrap())));
    let asset = Asset::new("provider:stripe/USD", 2, TokenKind::Provider(DestinationKind::Account)).unwrap();
    let engine = Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let (merchant, _) = engine.create_merchant("twice", [6u8; 32]).await.unwrap();
    engine.deposit(&merchant, &asset.code, Amount::from_u128(FUNDED_BASE_UNITS), DepositKey::parse("fund-twice").unwrap()).await.unwrap();
    let api = StripeApi::new(StripeConfig {
        base_url: sim.base_url(),
        api_key: Secret::new(sim.api_key()),
        account: "platform".into(),
        currency: "usd".into(),
        request_timeout_ms: REQUEST_TIMEOUT_MS,
    })
    .unwrap();
    let rail = Arc::new(ProviderRail::new(Arc::new(api), clock.clone(), ProviderRailConfig::default()));
    let config = PipelineConfig { rebroadcast_after_ms: 1_000, ..PipelineConfig::default() };
    let pipeline = Pipeline::new(store.clone(), clock.clone(), config).with_standalone_rail(StandaloneLine { rail, assets: vec![asset.clone()] });
    let round = |ms: i64| {
        clock.0.fetch_add(ms, Ordering::SeqCst);
        sim.advance(u64::try_from(ms).unwrap());
    };
    pipeline.tick().await.unwrap(); // reconciliation starts here
    sim.set_lookup_lag_ms(u64::try_from(2 * KEY_WINDOW_MS_DEFAULT).unwrap());
    sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    let key = PayoutKey::parse("twice-0001").unwrap();
    let destination = Destination::Account(ProviderAccount::parse("acct_1Nv0FGQ9RKHgCVdK").unwrap());
    let payout = engine.create_payout(&merchant, PayoutRequest::new(key, asset.code.clone(), Amount::from_u128(AMOUNT_BASE_UNITS), destination, Metadata::empty())).await.unwrap().0;
    pipeline.tick().await.unwrap();
    round(KEY_WINDOW_MS_DEFAULT + 60_000);
    for _ in 0..ROUNDS_MAX {
        pipeline.tick().await.unwrap();
        if store.payout_by_id(&payout.id).await.unwrap().unwrap().status == PayoutStatus::Paid {
            break;
        }
        round(ROUND_MS);
    }
    assert_eq!(sim.created(), 2, "the lost first transfer and attempt 2's");
    sim.set_lookup_lag_ms(0);
    for _ in 0..3 {
        pipeline.tick().await.unwrap();
        round(ROUND_MS);
    }
    let incidents: Vec<_> = store.open_incidents(10).await.unwrap().into_iter().filter(|i| i.kind == IncidentKind::DuplicateTransfer).collect();
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    assert!(incidents[0].detail.contains("booked against the platform"), "{}", incidents[0].detail);
    // Stripe names each transfer: the incident and its journal name attempt 1's transfer by its id.
    let first_reference = store.attempts_of(&payout.id).await.unwrap()[0].txs[0].hash.to_string();
    let first_ids = sim.ids_with_reference(&first_reference);
    assert_eq!(first_ids.len(), 1, "{first_ids:?}");
    assert!(incidents[0].detail.starts_with(&format!("provider:stripe: {}, ", first_ids[0])), "{}", incidents[0].detail);
    let booked_sql = format!(
        "SELECT count(*) FROM ledger_entries e JOIN journals j ON j.id = e.journal_id WHERE j.reference = '{}' AND e.account = 'platform:losses' \
         AND CAST(e.amount AS BIGINT) = {AMOUNT_BASE_UNITS}",
        first_ids[0]
    );
    assert_eq!(db.scalar_raw(&booked_sql).await, 1, "the second payment is the platform's, booked once");
    let usd = engine.balances(&merchant).await.unwrap().into_iter().find(|b| b.asset == asset.code).unwrap();
    assert_eq!(usd.available, Amount::from_u128(FUNDED_BASE_UNITS - AMOUNT_BASE_UNITS), "the merchant paid once");
    assert_eq!(usd.held, Amount::ZERO);
    assert!(store.audit_ledger().await.unwrap().is_clean());
}


/// The payout is paid once by attempt 1; then the provider makes a second transfer carrying the
/// same reference of ours (here the same request sent again under another key, as a restored
/// backup or a person with the API would). Reconciliation opens one `duplicate_transfer` incident
/// naming the second transfer and books it against the platform. (Before, the listed reference
/// belonged to a stored attempt and the second transfer was taken as explained.)
async fn a_second_transfer_behind_a_paid_attempts_reference_is_found(db: TestDb) {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    let store = db.pipeline();
    let clock = Arc::new(FakeClock(AtomicI64::new(i64::try_from(sim.now_ms()).unwrap())));
    let asset = Asset::new("provider:stripe/USD", 2, TokenKind::Provider(DestinationKind::Account)).unwrap();
    let engine = Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let (merchant, _) = engine.create_merchant("behind", [7u8; 32]).await.unwrap();
    engine.deposit(&merchant, &asset.code, Amount::from_u128(FUNDED_BASE_UNITS), DepositKey::parse("fund-behind").unwrap()).await.unwrap();
    let api = StripeApi::new(StripeConfig {
        base_url: sim.base_url(),
        api_key: Secret::new(sim.api_key()),
        account: "platform".into(),
        currency: "usd".into(),
        request_timeout_ms: REQUEST_TIMEOUT_MS * 2,
    })
    .unwrap();
    let rail = Arc::new(ProviderRail::new(Arc::new(api), clock.clone(), ProviderRailConfig::default()));
    let pipeline = Pipeline::new(store.clone(), clock.clone(), PipelineConfig::default()).with_standalone_rail(StandaloneLine { rail, assets: vec![asset.clone()] });
    let round = |ms: i64| {
        clock.0.fetch_add(ms, Ordering::SeqCst);
        sim.advance(u64::try_from(ms).unwrap());
    };
    pipeline.tick().await.unwrap(); // reconciliation starts here
    let key = PayoutKey::parse("behind-0001").unwrap();
    let destination = Destination::Account(ProviderAccount::parse("acct_1Nv0FGQ9RKHgCVdK").unwrap());
    let payout = engine.create_payout(&merchant, PayoutRequest::new(key, asset.code.clone(), Amount::from_u128(AMOUNT_BASE_UNITS), destination, Metadata::empty())).await.unwrap().0;
    for _ in 0..ROUNDS_MAX {
        pipeline.tick().await.unwrap();
        if store.payout_by_id(&payout.id).await.unwrap().unwrap().status == PayoutStatus::Paid {
            break;
        }
        round(ROUND_MS);
    }
    assert_eq!(store.payout_by_id(&payout.id).await.unwrap().unwrap().status, PayoutStatus::Paid);
    let create = sim.requests().into_iter().find(|r| r.method == "POST" && r.path.starts_with("/v1/transfers")).expect("attempt 1's create");
    let again = reqwest::Client::new()
        .post(format!("{}/v1/transfers", sim.base_url()))
        .bearer_auth(sim.api_key())
        .header("Idempotency-Key", "another-key-for-the-same-request")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(create.body.clone())
        .send()
        .await
        .unwrap();
    assert!(again.status().is_success(), "{}", again.text().await.unwrap());
    assert_eq!(sim.created(), 2, "attempt 1's transfer and the second one behind its reference");
    for _ in 0..4 {
        round(ROUND_MS);
        pipeline.tick().await.unwrap();
    }
    let incidents: Vec<_> = store.open_incidents(10).await.unwrap().into_iter().filter(|i| i.kind == IncidentKind::DuplicateTransfer).collect();
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    assert!(incidents[0].detail.contains("booked against the platform"), "{}", incidents[0].detail);
    let booked_sql = format!(
        "SELECT count(*) FROM ledger_entries e JOIN journals j ON j.id = e.journal_id WHERE j.reference <> '{}' AND e.account = 'platform:losses' \
         AND CAST(e.amount AS BIGINT) = {AMOUNT_BASE_UNITS}",
        store.attempts_of(&payout.id).await.unwrap()[0].txs[0].hash
    );
    assert_eq!(db.scalar_raw(&booked_sql).await, 1, "the second transfer is the platform's, booked once");
    let usd = engine.balances(&merchant).await.unwrap().into_iter().find(|b| b.asset == asset.code).unwrap();
    assert_eq!(usd.available, Amount::from_u128(FUNDED_BASE_UNITS - AMOUNT_BASE_UNITS), "the merchant paid once");
    assert!(store.audit_ledger().await.unwrap().is_clean());
}

payoutd_testkit::both_stores!(
    a_second_payment_is_booked_against_the_platform_with_its_incident,
    a_second_transfer_behind_a_paid_attempts_reference_is_found
);
