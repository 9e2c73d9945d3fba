//! A second payment found by reconciliation is booked against the platform, never the merchant, with its incident (a provider's API, real HTTP to its simulator), on both stores.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, DepositKey, Destination, DestinationKind, EvmAddress, Incident,
    IncidentKind, MerchantId, Metadata, Payout, PayoutKey, PayoutRequest, PayoutStatus,
    ProviderAccount, Secret,
};
use payoutd_engine::clock::Clock;
use payoutd_engine::{Engine, Pipeline, PipelineConfig, PipelineStore, StandaloneLine};
use payoutd_provider_sim::{Fault, ProviderKind, ProviderSim, SimOptions};
use payoutd_rail_provider::{
    BridgeApi, BridgeConfig, CoinbaseApi, CoinbaseConfig, KEY_WINDOW_MS_DEFAULT, ProviderApi,
    ProviderRail, ProviderRailConfig, StripeApi, StripeConfig,
};
use payoutd_testkit::TestDb;

const REQUEST_TIMEOUT_MS: u64 = 300;
/// The first create's answer comes this late: past the client's budget, so the call is ambiguous.
const DELAY_PAST_TIMEOUT_MS: u64 = 1_000;
const ROUND_MS: i64 = 1_500;
const ROUNDS_MAX: u32 = 60;
const AMOUNT_BASE_UNITS: u128 = 3_300;
const FUNDED_BASE_UNITS: u128 = 1_000_000;
/// How long a made transfer stays out of lookups and lists in the lookup test.
const LOOKUP_LAG_MS: u64 = 5_000;
/// payoutd re-sends an unanswered create after this long; in the lookup test, only after the lag.
const REBROADCAST_AFTER_MS: i64 = 1_000;
const REBROADCAST_PAST_THE_LAG_MS: i64 = 60_000;
/// Coinbase's simulator completes a transfer this long after it is made: long enough for several
/// reconciliation passes to see a second transfer still `processing`.
const COINBASE_COMPLETES_AFTER_MS: u64 = 20_000;
const COINBASE_RECIPIENT: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";

struct FakeClock(AtomicI64);

impl Clock for FakeClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A funded merchant paying through Stripe's simulator, one pipeline, the clocks side by side.
struct World {
    sim: ProviderSim,
    store: Arc<dyn PipelineStore>,
    clock: Arc<FakeClock>,
    asset: Asset,
    destination: Destination,
    engine: Engine,
    merchant: MerchantId,
    pipeline: Pipeline,
}

impl World {
    async fn new(
        db: &TestDb,
        name: &str,
        request_timeout_ms: u64,
        rebroadcast_after_ms: i64,
    ) -> World {
        let sim = ProviderSim::start(ProviderKind::Stripe).await;
        let api = StripeApi::new(StripeConfig {
            base_url: sim.base_url(),
            api_key: Secret::new(sim.api_key()),
            account: "platform".into(),
            currency: "usd".into(),
            request_timeout_ms,
        })
        .unwrap();
        let asset =
            Asset::new("provider:stripe/USD", 2, TokenKind::Provider(DestinationKind::Account))
                .unwrap();
        let destination =
            Destination::Account(ProviderAccount::parse("acct_1Nv0FGQ9RKHgCVdK").unwrap());
        World::with_api(db, name, sim, Arc::new(api), (asset, destination), rebroadcast_after_ms)
            .await
    }

    /// Coinbase CDP's simulator, whose transfers stay `processing` for `COINBASE_COMPLETES_AFTER_MS`.
    async fn coinbase(db: &TestDb, name: &str) -> World {
        let options = SimOptions { step_ms: COINBASE_COMPLETES_AFTER_MS, ..SimOptions::default() };
        let sim = ProviderSim::start_with(ProviderKind::Coinbase, options).await;
        let api = CoinbaseApi::new(CoinbaseConfig {
            base_url: sim.base_url(),
            api_key_id: sim.api_key_id(),
            api_key: Secret::new(sim.api_key()),
            account_id: "account_af2937b0-9846-4fe7-bfe9-ccc22d935114".into(),
            source_asset: "usdc".into(),
            network: "base".into(),
            target_asset: "usdc".into(),
            decimals: 6,
            request_timeout_ms: REQUEST_TIMEOUT_MS * 2,
            travel_rule: None,
        })
        .unwrap();
        let asset =
            Asset::new("provider:coinbase/USDC", 6, TokenKind::Provider(DestinationKind::Evm))
                .unwrap();
        let destination = Destination::Evm(EvmAddress::parse(COINBASE_RECIPIENT).unwrap());
        World::with_api(db, name, sim, Arc::new(api), (asset, destination), REBROADCAST_AFTER_MS)
            .await
    }

    /// Bridge's simulator, paying USDC on Ethereum from a Bridge wallet.
    async fn bridge(db: &TestDb, name: &str) -> World {
        let sim = ProviderSim::start(ProviderKind::Bridge).await;
        sim.add_bridge_wallet("cust_payoutd", "wallet_payoutd", "usdc");
        let api = BridgeApi::new(BridgeConfig {
            base_url: sim.base_url(),
            api_key: Secret::new(sim.api_key()),
            customer_id: "cust_payoutd".into(),
            bridge_wallet_id: "wallet_payoutd".into(),
            payment_rail: "ethereum".into(),
            source_currency: "usdc".into(),
            currency: "usdc".into(),
            initiation: None,
            decimals: 6,
            request_timeout_ms: REQUEST_TIMEOUT_MS * 2,
        })
        .unwrap();
        let asset =
            Asset::new("provider:bridge/USDC", 6, TokenKind::Provider(DestinationKind::Evm))
                .unwrap();
        let destination = Destination::Evm(EvmAddress::parse(COINBASE_RECIPIENT).unwrap());
        World::with_api(db, name, sim, Arc::new(api), (asset, destination), REBROADCAST_AFTER_MS)
            .await
    }

    async fn with_api(
        db: &TestDb,
        name: &str,
        sim: ProviderSim,
        api: Arc<dyn ProviderApi>,
        paying: (Asset, Destination),
        rebroadcast_after_ms: i64,
    ) -> World {
        let (asset, destination) = paying;
        let store = db.pipeline();
        let clock = Arc::new(FakeClock(AtomicI64::new(i64::try_from(sim.now_ms()).unwrap())));
        let engine = Engine::new(
            store.clone(),
            clock.clone(),
            AssetRegistry::new(vec![asset.clone()]).unwrap(),
        );
        let (merchant, _) = engine.create_merchant(name, [6u8; 32]).await.unwrap();
        let funding = DepositKey::parse(&format!("fund-{name}")).unwrap();
        engine
            .deposit(&merchant, &asset.code, Amount::from_u128(FUNDED_BASE_UNITS), funding)
            .await
            .unwrap();
        let rail = Arc::new(ProviderRail::new(api, clock.clone(), ProviderRailConfig::default()));
        let config = PipelineConfig { rebroadcast_after_ms, ..PipelineConfig::default() };
        let pipeline = Pipeline::new(store.clone(), clock.clone(), config)
            .with_standalone_rail(StandaloneLine { rail, assets: vec![asset.clone()] });
        World { sim, store, clock, asset, destination, engine, merchant, pipeline }
    }

    fn round(&self, ms: i64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
        self.sim.advance(u64::try_from(ms).unwrap());
    }

    async fn payout(&self, key: &str) -> Payout {
        let key = PayoutKey::parse(key).unwrap();
        let request = PayoutRequest::new(
            key,
            self.asset.code.clone(),
            Amount::from_u128(AMOUNT_BASE_UNITS),
            self.destination,
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0
    }

    async fn status(&self, payout: &Payout) -> PayoutStatus {
        self.store.payout_by_id(&payout.id).await.unwrap().unwrap().status
    }

    /// Ticks until the payout is `status` (or the rounds run out).
    async fn tick_until(&self, payout: &Payout, status: PayoutStatus) {
        for _ in 0..ROUNDS_MAX {
            self.pipeline.tick().await.unwrap();
            if self.status(payout).await == status {
                return;
            }
            self.round(ROUND_MS);
        }
    }

    /// The first create payoutd sent to `path`, sent again under another key with the provider's
    /// own `headers` (as a restored backup or a person with the API would): a second transfer
    /// carrying the same reference of ours.
    async fn resend_first_create(&self, path: &str, headers: &[(&str, String)]) {
        let create = self
            .sim
            .requests()
            .into_iter()
            .find(|r| r.method == "POST" && r.path == path)
            .expect("a create");
        let mut again =
            reqwest::Client::new().post(format!("{}{path}", self.sim.base_url())).body(create.body);
        for (name, value) in headers {
            again = again.header(*name, value);
        }
        let again = again.send().await.unwrap();
        assert!(again.status().is_success(), "{}", again.text().await.unwrap());
    }

    /// Stripe: the first create, again under another key.
    async fn resend_first_create_under_another_key(&self) {
        let headers = [
            ("Authorization", format!("Bearer {}", self.sim.api_key())),
            ("Idempotency-Key", "another-key-for-the-same-request".to_owned()),
            ("Content-Type", "application/x-www-form-urlencoded".to_owned()),
        ];
        self.resend_first_create("/v1/transfers", &headers).await;
    }

    /// Bridge: the first create, again under another key.
    async fn resend_first_bridge_create_under_another_key(&self) {
        let headers = [
            ("Api-Key", self.sim.api_key()),
            ("Idempotency-Key", "another-key-for-the-same-request".to_owned()),
            ("Content-Type", "application/json".to_owned()),
        ];
        self.resend_first_create("/v0/transfers", &headers).await;
    }

    /// Coinbase: the first create, again under another key.
    async fn resend_first_coinbase_create_under_another_key(&self) {
        const PATH: &str = "/platform/v2/transfers";
        let headers = [
            ("Authorization", format!("Bearer {}", self.sim.coinbase_token("POST", PATH))),
            ("X-Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324".to_owned()),
            ("Content-Type", "application/json".to_owned()),
        ];
        self.resend_first_create(PATH, &headers).await;
    }

    /// The transfer carrying attempt 1's reference that is not the one attempt 1 recorded.
    async fn second_transfer(&self, payout: &Payout) -> String {
        let own = self
            .store
            .attempts_of(&payout.id)
            .await
            .unwrap()
            .remove(0)
            .slot
            .transfer_id()
            .expect("attempt 1's transfer")
            .to_string();
        self.first_attempts_transfers(payout)
            .await
            .into_iter()
            .find(|id| *id != own)
            .expect("a second transfer")
    }

    /// Journals booked against the platform under `transfer_id`.
    async fn booked_against_the_platform(&self, db: &TestDb, transfer_id: &str) -> i64 {
        let sql = format!(
            "SELECT count(*) FROM ledger_entries e JOIN journals j ON j.id = e.journal_id WHERE j.reference = '{transfer_id}' AND e.account = 'platform:losses'"
        );
        db.scalar_raw(&sql).await
    }

    async fn passes(&self, n: u32) {
        for _ in 0..n {
            self.round(ROUND_MS);
            self.pipeline.tick().await.unwrap();
        }
    }

    async fn duplicates(&self) -> Vec<Incident> {
        self.store
            .open_incidents(10)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::DuplicateTransfer)
            .collect()
    }

    /// Stripe's ids of the transfers carrying attempt 1's reference.
    async fn first_attempts_transfers(&self, payout: &Payout) -> Vec<String> {
        let reference =
            self.store.attempts_of(&payout.id).await.unwrap()[0].txs[0].hash.to_string();
        self.sim.ids_with_reference(&reference)
    }

    /// Booked once against the platform under `transfer_id`, the merchant charged once, the books clean.
    async fn booked_once_against_the_platform(&self, db: &TestDb, transfer_id: &str) {
        let booked_sql = format!(
            "SELECT count(*) FROM ledger_entries e JOIN journals j ON j.id = e.journal_id WHERE j.reference = '{transfer_id}' \
             AND e.account = 'platform:losses' AND CAST(e.amount AS BIGINT) = {AMOUNT_BASE_UNITS}"
        );
        assert_eq!(
            db.scalar_raw(&booked_sql).await,
            1,
            "the second payment is the platform's, booked once"
        );
        let usd = self
            .engine
            .balances(&self.merchant)
            .await
            .unwrap()
            .into_iter()
            .find(|b| b.asset == self.asset.code)
            .unwrap();
        assert_eq!(
            usd.available,
            Amount::from_u128(FUNDED_BASE_UNITS - AMOUNT_BASE_UNITS),
            "the merchant paid once"
        );
        assert!(self.store.audit_ledger().await.unwrap().is_clean());
    }
}

/// The provider's list hides attempt 1's transfer past the key window, so attempt 1 is proven dead
/// and attempt 2 pays; then attempt 1's transfer shows up. Reconciliation opens one
/// `duplicate_transfer` incident and, in the same write, books the second payment against
/// `platform:losses`: the merchant is charged once, the ledger audit stays clean. (Before, the
/// incident was opened and nothing was booked: the second payment was in no account.)
async fn a_second_payment_is_booked_against_the_platform_with_its_incident(db: TestDb) {
    let w = World::new(&db, "twice", REQUEST_TIMEOUT_MS, REBROADCAST_AFTER_MS).await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    w.sim.set_lookup_lag_ms(u64::try_from(2 * KEY_WINDOW_MS_DEFAULT).unwrap());
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    let payout = w.payout("twice-0001").await;
    w.pipeline.tick().await.unwrap();
    w.round(KEY_WINDOW_MS_DEFAULT + 60_000);
    w.tick_until(&payout, PayoutStatus::Paid).await;
    assert_eq!(w.sim.created(), 2, "the lost first transfer and attempt 2's");
    w.sim.set_lookup_lag_ms(0);
    for _ in 0..3 {
        w.pipeline.tick().await.unwrap();
        w.round(ROUND_MS);
    }
    let incidents = w.duplicates().await;
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    assert!(incidents[0].detail.contains("booked against the platform"), "{}", incidents[0].detail);
    // Stripe names each transfer: the incident and its journal name attempt 1's transfer by its id.
    let first_ids = w.first_attempts_transfers(&payout).await;
    assert_eq!(first_ids.len(), 1, "{first_ids:?}");
    assert!(
        incidents[0].detail.starts_with(&format!("provider:stripe: {}, ", first_ids[0])),
        "{}",
        incidents[0].detail
    );
    w.booked_once_against_the_platform(&db, &first_ids[0]).await;
    let usd = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset == w.asset.code)
        .unwrap();
    assert_eq!(usd.held, Amount::ZERO);
}

/// The payout is paid once by attempt 1; then the provider makes a second transfer carrying the
/// same reference of ours. Reconciliation opens one `duplicate_transfer` incident naming the
/// second transfer and books it against the platform. (Before, the listed reference belonged to
/// a stored attempt and the second transfer was taken as explained: 0 incidents.)
async fn a_second_transfer_behind_a_paid_attempts_reference_is_found(db: TestDb) {
    let w = World::new(&db, "behind", REQUEST_TIMEOUT_MS * 2, REBROADCAST_AFTER_MS).await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    let payout = w.payout("behind-0001").await;
    w.tick_until(&payout, PayoutStatus::Paid).await;
    assert_eq!(w.status(&payout).await, PayoutStatus::Paid);
    w.resend_first_create_under_another_key().await;
    assert_eq!(w.sim.created(), 2, "attempt 1's transfer and the second one behind its reference");
    for _ in 0..4 {
        w.round(ROUND_MS);
        w.pipeline.tick().await.unwrap();
    }
    let incidents = w.duplicates().await;
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    let ids = w.first_attempts_transfers(&payout).await;
    let attempt = w.store.attempts_of(&payout.id).await.unwrap().remove(0);
    let own = attempt.slot.transfer_id().expect("attempt 1 recorded its transfer").to_string();
    let second = ids.iter().find(|id| **id != own).expect("a second transfer");
    assert!(
        incidents[0].detail.starts_with(&format!("provider:stripe: {second}, ")),
        "{}",
        incidents[0].detail
    );
    w.booked_once_against_the_platform(&db, second).await;
}

/// Attempt 1's create is made but its answer lost, and before payoutd looks it up a second
/// transfer carrying the same reference appears. The lookup finds two: it records the first the
/// provider lists as the attempt's own and the payout waits for a person; reconciliation reports
/// the other, and only the other, as a second payment. (Before, the lookup recorded our own
/// reference as the provider's id, so neither transfer was the attempt's and both were reported.)
async fn two_transfers_behind_one_reference_found_by_lookup_report_one(db: TestDb) {
    let (w, payout) = two_transfers_behind_a_lost_answer(&db, "lookup").await;
    w.tick_until(&payout, PayoutStatus::NeedsAttention).await;
    assert_eq!(
        w.status(&payout).await,
        PayoutStatus::NeedsAttention,
        "two transfers carry one reference: a person decides"
    );
    for _ in 0..4 {
        w.round(ROUND_MS);
        w.pipeline.tick().await.unwrap();
    }
    let attempt = w.store.attempts_of(&payout.id).await.unwrap().remove(0);
    let ids = w.first_attempts_transfers(&payout).await;
    let own = attempt.slot.transfer_id().expect("the lookup recorded one transfer").to_string();
    assert!(ids.contains(&own), "the recorded id is one of Stripe's transfers ({own}, {ids:?})");
    let incidents = w.duplicates().await;
    assert_eq!(
        incidents.len(),
        1,
        "only the transfer not recorded is a second payment: {incidents:?}"
    );
    let second = ids.iter().find(|id| **id != own).expect("a second transfer");
    assert!(
        incidents[0].detail.starts_with(&format!("provider:stripe: {second}, ")),
        "{}",
        incidents[0].detail
    );
}

/// Attempt 1's create is made but its answer lost, a second transfer carrying the same reference
/// appears, and reconciliation lists both before the resolver looks the attempt up. Reconciliation
/// records the first it lists as the attempt's own and reports the other, once, as a second
/// payment; the resolver then reads the recorded transfer by id and the payout is paid. (Before,
/// reconciliation skipped transfers behind an attempt that had recorded no id, its cursor moved
/// past them, and the second payment was never reported: 0 incidents.)
async fn two_transfers_listed_before_the_lookup_report_one(db: TestDb) {
    let (w, payout) = two_transfers_behind_a_lost_answer(&db, "listed").await;
    w.round(i64::try_from(LOOKUP_LAG_MS).unwrap() + ROUND_MS);
    w.pipeline.reconcile_pass().await.unwrap();
    let incidents = w.duplicates().await;
    assert_eq!(
        incidents.len(),
        1,
        "reconciliation reports the second transfer when it first lists it: {incidents:?}"
    );
    let attempt = w.store.attempts_of(&payout.id).await.unwrap().remove(0);
    let own = attempt
        .slot
        .transfer_id()
        .expect("reconciliation recorded one transfer as the attempt's")
        .to_string();
    let ids = w.first_attempts_transfers(&payout).await;
    assert!(ids.contains(&own), "the recorded id is one of Stripe's transfers ({own}, {ids:?})");
    let second = ids.iter().find(|id| **id != own).expect("a second transfer");
    assert!(
        incidents[0].detail.starts_with(&format!("provider:stripe: {second}, ")),
        "{}",
        incidents[0].detail
    );
    w.tick_until(&payout, PayoutStatus::Paid).await;
    assert_eq!(
        w.status(&payout).await,
        PayoutStatus::Paid,
        "the recorded transfer paid the payout"
    );
    assert_eq!(w.duplicates().await.len(), 1, "reported once");
    w.booked_once_against_the_platform(&db, second).await;
}

/// Attempt 1's create is made but its answer lost, then a second transfer carrying the same
/// reference appears. Lookups and lists see a transfer only `LOOKUP_LAG_MS` after it is made, and
/// payoutd does not re-send the key meanwhile.
async fn two_transfers_behind_a_lost_answer(db: &TestDb, name: &str) -> (World, Payout) {
    let w = World::new(db, name, REQUEST_TIMEOUT_MS * 2, REBROADCAST_PAST_THE_LAG_MS).await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    w.sim.set_lookup_lag_ms(LOOKUP_LAG_MS);
    w.sim.fault_next_create(Fault::ResetAfterCreate);
    let payout = w.payout(&format!("{name}-0001")).await;
    w.pipeline.tick().await.unwrap();
    w.resend_first_create_under_another_key().await;
    // Both transfers show from now on, together: the lag counts from each one's creation in real
    // time, so with it kept a round could show attempt 1's transfer without the second one made a
    // moment later (on a loaded machine), and payoutd would rightly pay with the one it saw.
    w.sim.set_lookup_lag_ms(0);
    assert_eq!(
        w.sim.created(),
        2,
        "attempt 1's transfer, whose answer was lost, and a second behind its reference"
    );
    (w, payout)
}

/// Attempt 1 pays through Coinbase; then a second transfer carrying its reference is made and is
/// still `processing` when reconciliation lists it. The incident opens at once, but nothing is
/// booked while the transfer may still fail; when it completes, its outflow is booked once against
/// the platform. (Before, a transfer not yet final was presumed to have moved money and booked at
/// first sight.)
async fn a_second_transfer_not_yet_final_is_booked_when_it_completes(db: TestDb) {
    let (w, second) = second_coinbase_transfer_processing(&db, "completes").await;
    w.round(i64::try_from(COINBASE_COMPLETES_AFTER_MS).unwrap());
    w.passes(3).await;
    let incidents = w.duplicates().await;
    assert_eq!(incidents.len(), 1, "{incidents:?}");
    assert!(incidents[0].detail.contains("booked against the platform"), "{}", incidents[0].detail);
    w.booked_once_against_the_platform(&db, &second).await;
}

/// As above, but the second transfer fails at Coinbase: it moved nothing, so nothing is booked
/// and the incident is resolved by the rail's proof. (Before, its outflow was booked against the
/// platform at first sight and stayed there: the books said money left that never did.)
async fn a_second_transfer_that_then_fails_books_nothing(db: TestDb) {
    let (w, second) = second_coinbase_transfer_processing(&db, "fails").await;
    assert!(w.sim.fail(&second, "travel_rules_field_missing"));
    w.passes(3).await;
    assert_eq!(
        w.booked_against_the_platform(&db, &second).await,
        0,
        "a transfer that failed moved nothing"
    );
    assert!(
        w.duplicates().await.is_empty(),
        "the rail proved the transfer moved nothing: the alarm is resolved"
    );
    let usd = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset == w.asset.code)
        .unwrap();
    assert_eq!(
        usd.available,
        Amount::from_u128(FUNDED_BASE_UNITS - AMOUNT_BASE_UNITS),
        "the merchant paid once"
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A second transfer behind a paid attempt's reference delivers less than the payout: Bridge takes
/// its gas fee out of the amount, so the recipient gets less while the whole amount left the
/// account. The second payment is booked against the platform at what left the account, and its
/// incident stays open for a person. (Before, a second payment whose amount was not the payout's
/// was taken as having moved nothing: nothing was booked, and its incident closed by itself.)
async fn a_second_transfer_of_another_amount_is_booked_at_what_it_moved(db: TestDb) {
    let w = World::bridge(&db, "short").await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    let payout = w.payout("short-0001").await;
    w.tick_until(&payout, PayoutStatus::Paid).await;
    assert_eq!(w.status(&payout).await, PayoutStatus::Paid);
    w.resend_first_bridge_create_under_another_key().await;
    let second = w.second_transfer(&payout).await;
    // 0.0033 USDC asked, 0.0030 delivered: 300 base units of gas taken out.
    assert!(w.sim.bridge_receipt_final_amount(&second, Some("0.003")));
    w.passes(6).await;
    let incidents = w.duplicates().await;
    assert_eq!(incidents.len(), 1, "the second payment stays open for a person: {incidents:?}");
    assert!(
        incidents[0].detail.starts_with(&format!("provider:bridge: {second}, ")),
        "{}",
        incidents[0].detail
    );
    w.booked_once_against_the_platform(&db, &second).await;
}

/// A Coinbase payout paid by attempt 1, then a second transfer behind its reference, seen by
/// reconciliation while `processing`: one incident, nothing booked yet. Returns the second's id.
async fn second_coinbase_transfer_processing(db: &TestDb, name: &str) -> (World, String) {
    let w = World::coinbase(db, name).await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    let payout = w.payout(&format!("{name}-0001")).await;
    w.tick_until(&payout, PayoutStatus::Paid).await;
    assert_eq!(w.status(&payout).await, PayoutStatus::Paid);
    w.resend_first_coinbase_create_under_another_key().await;
    w.passes(3).await;
    let second = w.second_transfer(&payout).await;
    let incidents = w.duplicates().await;
    assert_eq!(incidents.len(), 1, "reported when first listed: {incidents:?}");
    assert!(
        incidents[0].detail.starts_with(&format!("provider:coinbase: {second}, ")),
        "{}",
        incidents[0].detail
    );
    assert_eq!(
        w.booked_against_the_platform(db, &second).await,
        0,
        "nothing is booked while the transfer may still fail"
    );
    (w, second)
}

payoutd_testkit::both_stores!(
    a_second_transfer_of_another_amount_is_booked_at_what_it_moved,
    a_second_transfer_not_yet_final_is_booked_when_it_completes,
    a_second_transfer_that_then_fails_books_nothing,
    a_second_payment_is_booked_against_the_platform_with_its_incident,
    a_second_transfer_behind_a_paid_attempts_reference_is_found,
    two_transfers_behind_one_reference_found_by_lookup_report_one,
    two_transfers_listed_before_the_lookup_report_one
);
