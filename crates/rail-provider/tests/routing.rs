//! Routing across rails against two providers' simulators (real HTTP), on both stores: a payout's next attempt moves to the route's next rail only after a proof that the one before moved nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::{
    Amount, AssetCode, AssetRegistry, AttemptSlot, AttemptStatus, DepositKey, IncidentKind,
    Metadata, PayoutId, PayoutKey, PayoutRequest, PayoutStatus, Route, Routes,
};
use payoutd_domain::{EndpointOwner, EventType};
use payoutd_engine::standalone::RailWallet;
use payoutd_engine::webhook_store::{EventQuery, WebhookStore};
use payoutd_engine::{Engine, Pipeline, PipelineConfig, PipelineStore, StandaloneLine};
use payoutd_provider_sim::{Fault, ProviderKind, ProviderSim};
use payoutd_rail_provider::{ProviderRail, ProviderRailConfig, our_reference};
use payoutd_testkit::TestDb;

use crate::support;
use crate::support::{FakeClock, Setup, api_of, asset_of, destination_of};

const CLIENT_TIMEOUT_MS: u64 = 600;
/// Far past the client's timeout: on a loaded machine a runtime stalled for a while wakes to both
/// the client's timer and a late answer ready, and may read the answer (the attempt is then not
/// ambiguous at all, and the test proves nothing). Ten seconds of stall does not happen.
const DELAY_PAST_TIMEOUT_MS: u64 = 10_000;
/// Reads of the events a test makes at most, this far apart, before an event counts as missing.
const EVENT_VISIBLE_TRIES_MAX: u32 = 100;
const EVENT_VISIBLE_WAIT_MS: u64 = 50;
/// Rounds of the pipeline a test runs at most before it fails.
const ROUNDS_MAX: u32 = 60;
/// Both providers' clocks and ours move this much per round.
const ROUND_MS: i64 = 1_500;
/// Rounds an ambiguous attempt is watched while its provider's list does not show it yet.
const AMBIGUOUS_ROUNDS: u32 = 20;
/// Real time a test's rounds may take on a loaded machine, beyond the time they move the clocks.
const REAL_TIME_ROOM_MS: u64 = 60_000;
const FUNDED_BASE_UNITS: u128 = 1_000_000_000;

/// Payouts in Circle's USDC, routed to Coinbase's USDC (the same money to the same address).
struct Routed {
    circle: ProviderSim,
    coinbase: ProviderSim,
    store: Arc<dyn PipelineStore>,
    webhooks: Arc<dyn WebhookStore>,
    engine: Engine,
    pipeline: Pipeline,
    clock: Arc<FakeClock>,
    merchant: payoutd_domain::MerchantId,
}

async fn routed(db: TestDb) -> Routed {
    let (circle, coinbase) = (
        ProviderSim::start(ProviderKind::Circle).await,
        ProviderSim::start(ProviderKind::Coinbase).await,
    );
    let store = db.pipeline();
    let clock = Arc::new(FakeClock(AtomicI64::new(i64::try_from(circle.now_ms()).unwrap())));
    let (first, next) = (asset_of(ProviderKind::Circle), asset_of(ProviderKind::Coinbase));
    let engine = Engine::new(
        store.clone(),
        clock.clone(),
        AssetRegistry::new(vec![first.clone(), next.clone()]).unwrap(),
    );
    let (merchant, _) = engine.create_merchant("routed", [5u8; 32]).await.unwrap();
    engine
        .deposit(
            &merchant,
            &first.code,
            Amount::from_u128(FUNDED_BASE_UNITS),
            DepositKey::parse("fund-routed").unwrap(),
        )
        .await
        .unwrap();
    let routes =
        Routes::new(vec![Route::new(first.code.clone(), vec![next.code.clone()]).unwrap()])
            .unwrap();
    let sims = [(ProviderKind::Circle, &circle), (ProviderKind::Coinbase, &coinbase)];
    let pipeline = pipeline_of(&store, &clock, &sims, routes).await;
    assert_eq!(
        pipeline.balance_check_pass().await.unwrap().balance_mismatches,
        0,
        "the first check books each account's opening balance"
    );
    Routed { circle, coinbase, store, webhooks: db.webhooks(), engine, pipeline, clock, merchant }
}

/// The workers over the rails of these providers' simulators, with `routes`; each provider's account
/// kept in the ledger, as payoutd wires it.
async fn pipeline_of(
    store: &Arc<dyn PipelineStore>,
    clock: &Arc<FakeClock>,
    sims: &[(ProviderKind, &ProviderSim)],
    routes: Routes,
) -> Pipeline {
    let mut pipeline = Pipeline::new(
        store.clone(),
        clock.clone(),
        PipelineConfig {
            rebroadcast_after_ms: 1_000,
            balance_check_interval_ms: 0,
            ..PipelineConfig::default()
        },
    );
    for &(kind, sim) in sims {
        let api = api_of(kind, sim, Setup::Working, CLIENT_TIMEOUT_MS);
        let id = store
            .ensure_signing_wallet(&format!("provider:{}", support::kind_name(kind)), api.account())
            .await
            .unwrap();
        let wallet = RailWallet { id, address: api.account().to_owned(), native: asset_of(kind) };
        let rail = ProviderRail::new(api, clock.clone(), ProviderRailConfig::default())
            .with_wallet(wallet);
        pipeline = pipeline.with_standalone_rail(StandaloneLine {
            rail: Arc::new(rail),
            assets: vec![asset_of(kind)],
        });
    }
    pipeline.with_routes(routes)
}

impl Routed {
    async fn request(&self, key: &str, amount: u128) -> PayoutId {
        let asset = asset_of(ProviderKind::Circle).code;
        let request = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            asset,
            Amount::from_u128(amount),
            destination_of(ProviderKind::Circle),
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0.id
    }

    async fn status(&self, id: &PayoutId) -> PayoutStatus {
        self.store.payout_by_id(id).await.unwrap().unwrap().status
    }

    async fn round(&self) {
        self.pipeline.tick().await.unwrap();
        self.jump(ROUND_MS);
    }

    /// Our clock and both providers' move `ms` at once.
    fn jump(&self, ms: i64) {
        self.clock.0.fetch_add(ms, Ordering::SeqCst);
        for sim in [&self.circle, &self.coinbase] {
            sim.advance(u64::try_from(ms).unwrap());
        }
    }

    async fn run_until(&self, id: &PayoutId, status: PayoutStatus) {
        for _ in 0..ROUNDS_MAX {
            self.pipeline.tick().await.unwrap();
            if self.status(id).await == status {
                return;
            }
            self.round().await;
        }
        panic!(
            "payout {id} is {:?}, not {status:?}: {:?}",
            self.status(id).await,
            self.store.attempts_of(id).await.unwrap()
        );
    }

    /// Each attempt's number, status and provider, in order.
    async fn attempts(&self, id: &PayoutId) -> Vec<(u32, AttemptStatus, String)> {
        let attempts = self.store.attempts_of(id).await.unwrap();
        attempts
            .into_iter()
            .map(|a| match a.slot {
                AttemptSlot::Provider { provider, .. } => (a.attempt_no, a.status, provider),
                other => panic!("a provider slot: {other:?}"),
            })
            .collect()
    }

    /// The `attempt` the payout's `payout.paid` event names: which try paid, on which rail.
    async fn paid_by(&self, id: &PayoutId) -> serde_json::Value {
        let query = EventQuery {
            owner: EndpointOwner::Merchant(self.merchant.clone()),
            event_type: Some(EventType::PayoutPaid),
            after: None,
            limit: 100,
        };
        // On PostgreSQL an events page holds back events newer than the oldest transaction still
        // open in the cluster (another test's), so the event is waited for, within a bound.
        let mut paid = Vec::new();
        for _ in 0..EVENT_VISIBLE_TRIES_MAX {
            let events = self.webhooks.events(&query).await.unwrap();
            paid = events.into_iter().filter(|e| e.entity_id == id.as_str()).collect();
            if !paid.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(EVENT_VISIBLE_WAIT_MS)).await;
        }
        assert_eq!(paid.len(), 1, "one payout.paid event per payout: {paid:?}");
        serde_json::from_str::<serde_json::Value>(&paid[0].payload_json).unwrap()["attempt"].clone()
    }

    /// The provider's id of the payout's last attempt.
    async fn last_transfer(&self, id: &PayoutId) -> String {
        match &self.store.attempts_of(id).await.unwrap().last().unwrap().slot {
            AttemptSlot::Provider { reference: Some(r), .. } => r.as_str().to_owned(),
            other => panic!("no provider id recorded: {other:?}"),
        }
    }

    /// No hold left, every journal balanced, and each provider's balance what its account's books
    /// say: a routed payout left the account that paid it, in that account's own asset.
    async fn assert_books_clean(&self) {
        let balances = self.engine.balances(&self.merchant).await.unwrap();
        assert!(balances.iter().all(|b| b.held == Amount::ZERO), "no hold left: {balances:?}");
        assert!(self.store.audit_ledger().await.unwrap().is_clean());
        let check = self.pipeline.balance_check_pass().await.unwrap();
        let open: Vec<_> = self
            .store
            .open_incidents(100)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::BalanceMismatch)
            .collect();
        assert_eq!(
            (check.balance_mismatches, open.len()),
            (0, 0),
            "each provider's balance is explained: {open:?}"
        );
    }
}

/// Circle reports the first attempt's transfer failed (its proof that nothing moved): the next
/// attempt is made on Coinbase, the route's next rail, under the same hold, and pays once. Circle
/// made one transfer, Coinbase one, for the payout's second attempt.
async fn a_payout_proven_dead_on_its_first_rail_is_paid_once_by_the_next(db: TestDb) {
    let w = routed(db).await;
    let id = w.request("routed-0001", 2_000_000).await;
    w.pipeline.tick().await.unwrap();
    let first = w.last_transfer(&id).await;
    assert!(w.circle.fail(&first, "insufficient funds in the source wallet"));
    w.run_until(&id, PayoutStatus::Paid).await;
    assert_eq!(
        w.attempts(&id).await,
        vec![
            (1, AttemptStatus::Dead, "circle".to_owned()),
            (2, AttemptStatus::Confirmed, "coinbase".to_owned())
        ]
    );
    assert_eq!((w.circle.created(), w.coinbase.created()), (1, 1));
    assert_eq!(
        w.paid_by(&id).await,
        serde_json::json!({"attempt_no": 2, "rail": "provider", "provider": "coinbase"}),
        "the event names the rail that paid"
    );
    assert_eq!(w.coinbase.created_with_reference(&our_reference(&id, 2)), 1);
    w.assert_books_clean().await;
}

/// The route's rails after the first are reordered (payoutd restarted with Bridge before Coinbase)
/// while attempt 2, made on Coinbase, is in flight: the attempt settles out of the Coinbase account
/// in Coinbase's asset, the rail its slot names, not in the asset today's route gives attempt 2
/// (Bridge's); each account's balance is explained. (Before, the wallet side was booked in Bridge's
/// asset against the Coinbase account.)
async fn an_attempt_settles_in_its_own_rail_s_asset_after_the_route_changed(db: TestDb) {
    let mut w = routed(db).await;
    let bridge = ProviderSim::start(ProviderKind::Bridge).await;
    let [circle, coinbase, bridge_asset] =
        [ProviderKind::Circle, ProviderKind::Coinbase, ProviderKind::Bridge]
            .map(|k| asset_of(k).code);
    let sims = [
        (ProviderKind::Circle, &w.circle),
        (ProviderKind::Coinbase, &w.coinbase),
        (ProviderKind::Bridge, &bridge),
    ];
    let route = |next: Vec<AssetCode>| {
        Routes::new(vec![Route::new(circle.clone(), next).unwrap()]).unwrap()
    };
    w.pipeline =
        pipeline_of(&w.store, &w.clock, &sims, route(vec![coinbase.clone(), bridge_asset.clone()]))
            .await;
    let id = w.request("routed-0009", 2_000_000).await;
    w.pipeline.tick().await.unwrap();
    let first = w.last_transfer(&id).await;
    assert!(w.circle.fail(&first, "insufficient funds in the source wallet"));
    for _ in 0..ROUNDS_MAX {
        if w.attempts(&id).await.len() == 2 {
            break;
        }
        w.round().await;
    }
    assert_eq!(w.attempts(&id).await[1], (2, AttemptStatus::Broadcast, "coinbase".to_owned()));
    w.pipeline = pipeline_of(&w.store, &w.clock, &sims, route(vec![bridge_asset, coinbase])).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    assert_eq!((w.circle.created(), w.coinbase.created(), bridge.created()), (1, 1, 0));
    w.assert_books_clean().await;
}

/// The last rail of a route makes every attempt after its turn: Circle's attempt fails, then
/// Coinbase's, and the third attempt is Coinbase's again; paid once, by it.
async fn the_routes_last_rail_makes_every_later_attempt(db: TestDb) {
    let w = routed(db).await;
    let id = w.request("routed-0002", 3_000_000).await;
    w.pipeline.tick().await.unwrap();
    assert!(w.circle.fail(&w.last_transfer(&id).await, "wallet frozen"));
    for _ in 0..ROUNDS_MAX {
        w.round().await;
        if w.attempts(&id).await.len() == 2
            && w.store.attempts_of(&id).await.unwrap()[1].slot.transfer_id().is_some()
        {
            break;
        }
    }
    assert!(w.coinbase.fail(&w.last_transfer(&id).await, "travel rule data refused"));
    w.run_until(&id, PayoutStatus::Paid).await;
    let providers: Vec<(u32, AttemptStatus, String)> = w.attempts(&id).await;
    assert_eq!(
        providers,
        vec![
            (1, AttemptStatus::Dead, "circle".to_owned()),
            (2, AttemptStatus::Dead, "coinbase".to_owned()),
            (3, AttemptStatus::Confirmed, "coinbase".to_owned())
        ]
    );
    assert_eq!((w.circle.created(), w.coinbase.created()), (1, 2));
    w.assert_books_clean().await;
}

/// The first create reaches Circle but its answer is lost, every retry with the same key is
/// refused before Circle looks at the key (which proves nothing), and Circle's list does not show
/// the transfer for a while: the attempt is unknown, not dead. However long that lasts, no attempt
/// is made on Coinbase; once Circle's list shows the transfer, the payout is paid by it, once.
async fn a_payout_whose_first_attempt_is_ambiguous_is_never_routed_elsewhere(db: TestDb) {
    let w = routed(db).await;
    // The simulator's clock runs with real time too: a minute's room for a loaded machine.
    w.circle.set_lookup_lag_ms(u64::from(AMBIGUOUS_ROUNDS) * ROUND_MS as u64 + REAL_TIME_ROOM_MS);
    w.circle.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    for _ in 0..AMBIGUOUS_ROUNDS {
        w.circle.fault_next_create(Fault::RefusedBeforeKeyCheck);
    }
    let id = w.request("routed-0003", 4_000_000).await;
    for _ in 0..AMBIGUOUS_ROUNDS - 2 {
        w.round().await;
        assert_eq!(w.status(&id).await, PayoutStatus::Processing);
        assert_eq!(
            w.coinbase.created(),
            0,
            "an attempt that may have paid is never followed on another rail"
        );
        assert_eq!(w.attempts(&id).await.len(), 1);
    }
    let creates = w
        .circle
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && !r.path.starts_with("/_sim"))
        .count();
    assert!(creates >= 3, "the attempt was retried (and refused) meanwhile: {creates} creates");
    // Past the attempt's resend horizon and its margin: creates have stopped, and only the
    // lookups' proof could let a next attempt start, on any rail. Circle's listing shows the
    // transfer by then: the attempt is found alive and pays. (Before, the test ended within 30 s of
    // a window of 24 h, so no rule past the window was ever exercised.)
    let rail = ProviderRailConfig::default();
    w.jump(rail.creates_until_ms() + rail.margin_ms() + 60_000);
    w.round().await;
    assert_eq!(w.coinbase.created(), 0, "past the horizon, still never followed elsewhere");
    w.run_until(&id, PayoutStatus::Paid).await;
    assert_eq!(w.attempts(&id).await, vec![(1, AttemptStatus::Confirmed, "circle".to_owned())]);
    assert_eq!((w.circle.created(), w.coinbase.created()), (1, 0));
    w.assert_books_clean().await;
}

payoutd_testkit::both_stores!(
    a_payout_proven_dead_on_its_first_rail_is_paid_once_by_the_next,
    the_routes_last_rail_makes_every_later_attempt,
    a_payout_whose_first_attempt_is_ambiguous_is_never_routed_elsewhere,
    an_attempt_settles_in_its_own_rail_s_asset_after_the_route_changed,
);
