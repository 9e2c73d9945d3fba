//! Webhook delivery end to end on both stores: the outbox, the dispatcher, real HTTP to a local
//! receiver, and signatures checked by the reference Standard Webhooks library.

use std::sync::Arc;
use std::time::Duration;

use payoutd_domain::webhook::WEBHOOK_SECRET_RANDOM_BYTES;
use payoutd_domain::{
    Amount, AssetCode, AssetRegistry, DepositKey, EndpointOwner, EventFilter, EventId, EventType,
    MerchantId, WebhookSecret, WebhookUrl,
};
use payoutd_engine::webhook_store::{DeliveryState, EventQuery, WebhookEndpoint};
use payoutd_engine::webhooks::{UrlRefused, WebhookTransport};
use payoutd_engine::{Engine, SystemClock, WebhookConfig, Webhooks};
use payoutd_testkit::webhooks::{Receiver, verify_with_reference};
use payoutd_testkit::{TestDb, both_stores};
use payoutd_webhooks::{AddressPolicy, HttpTransport};

const USDC: &str = "evm:31337/USDC";
/// Passes a test waits for deliveries before it gives up.
const PASSES_MAX: u32 = 400;

struct World {
    db: TestDb,
    engine: Engine,
    webhooks: Webhooks,
    merchant: MerchantId,
}

/// A dispatcher running in the background until stopped.
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(w: &World) -> Running {
        let dispatcher = w.webhooks.dispatcher();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            dispatcher
                .run(async {
                    let _ = stopped.await;
                })
                .await
        });
        Running { stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

/// Waits until `receiver` accepted something, checking every 10 ms, at most `checks` times.
async fn wait_accepted(receiver: &Receiver, checks: u32) {
    for _ in 0..checks {
        if !receiver.accepted().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long the slow receiver takes to answer in the fairness tests.
const SLOW_ANSWER_MS: u64 = 2_000;

fn fast_config() -> WebhookConfig {
    WebhookConfig {
        retry_delays_ms: [20, 20, 20, 20],
        round_interval_ms: 300,
        timeout_ms: 2_000,
        rounds_max: 3,
        allow_private_urls: true,
        idle_sleep_ms: 10,
        ..WebhookConfig::default()
    }
}

fn random(seed: u8) -> [u8; WEBHOOK_SECRET_RANDOM_BYTES] {
    [seed; WEBHOOK_SECRET_RANDOM_BYTES]
}

impl World {
    async fn new(db: TestDb, config: WebhookConfig) -> World {
        let engine =
            Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
        let transport = HttpTransport::new(config.timeout_ms, AddressPolicy::AllowPrivate).unwrap();
        let webhooks =
            Webhooks::new(db.webhooks(), Arc::new(transport), Arc::new(SystemClock), config);
        let (merchant, _) = engine.create_merchant("webhook test", [1; 32]).await.unwrap();
        World { db, engine, webhooks, merchant }
    }

    async fn endpoint(
        &self,
        owner: EndpointOwner,
        url: &str,
        types: &[&str],
        seed: u8,
    ) -> (WebhookEndpoint, WebhookSecret) {
        let filter = EventFilter::parse(types.iter().copied()).unwrap();
        self.webhooks
            .create_endpoint(owner, WebhookUrl::parse(url).unwrap(), filter, random(seed))
            .await
            .unwrap()
    }

    /// A `deposit.created` event for the merchant; returns its id.
    async fn deposit(&self, merchant: &MerchantId, n: u32) -> EventId {
        let asset = AssetCode::parse(USDC).unwrap().0;
        let key = DepositKey::parse(&format!("deposit-{n:06}")).unwrap();
        let (deposit, _) = self
            .engine
            .deposit(merchant, &asset, Amount::from_u128(1_000 + u128::from(n)), key)
            .await
            .unwrap();
        EventId::derive(EventType::DepositCreated, deposit.id.as_str())
    }

    /// Runs dispatcher passes until `done` holds.
    async fn pass_until(&self, what: &str, done: impl Fn() -> bool) {
        let dispatcher = self.webhooks.dispatcher();
        for _ in 0..PASSES_MAX {
            dispatcher.pass().await.unwrap();
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("gave up waiting for: {what}");
    }
}

async fn deliveries_are_signed_as_standard_webhooks_and_carry_the_event(db: TestDb) {
    let w = World::new(db, fast_config()).await;
    let receiver = Receiver::start().await;
    let (endpoint, secret) =
        w.endpoint(EndpointOwner::Merchant(w.merchant.clone()), &receiver.url, &[], 7).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(w.deposit(&w.merchant, n).await);
    }
    w.pass_until("three deliveries", || receiver.accepted().len() == 3).await;
    let got = receiver.accepted();
    verify_with_reference(secret.expose(), &got)
        .expect("the reference library verifies every delivery");
    let other = WebhookSecret::from_random(random(99));
    assert!(verify_with_reference(other.expose(), &got).is_err(), "another secret must not verify");
    let mut got_ids: Vec<&str> = got.iter().map(|r| r.webhook_id.as_str()).collect();
    let mut want_ids: Vec<&str> = ids.iter().map(EventId::as_str).collect();
    got_ids.sort_unstable();
    want_ids.sort_unstable();
    assert_eq!(got_ids, want_ids, "webhook-id is the event's deterministic id");
    for request in &got {
        let body = request.json();
        assert_eq!(body["type"], "deposit.created");
        assert!(
            body["timestamp"].as_str().unwrap().ends_with('Z'),
            "RFC 3339 UTC: {}",
            body["timestamp"]
        );
        assert_eq!(body["data"]["object"], "deposit");
    }
    let deliveries =
        w.webhooks.deliveries(&EndpointOwner::Merchant(w.merchant.clone()), &ids[0]).await.unwrap();
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0].endpoint_id, endpoint.id);
    assert_eq!(deliveries[0].state, DeliveryState::Delivered);
    assert_eq!(deliveries[0].tries.len(), 1);
    assert_eq!(deliveries[0].tries[0].status_code, Some(204));
}

async fn a_failing_receiver_gets_the_same_id_on_every_retry_and_on_redispatch(db: TestDb) {
    let w = World::new(db, fast_config()).await;
    let receiver = Receiver::start().await;
    receiver.fail_first(2);
    let owner = EndpointOwner::Merchant(w.merchant.clone());
    let (_, secret) = w.endpoint(owner.clone(), &receiver.url, &[], 7).await;
    let id = w.deposit(&w.merchant, 1).await;
    w.pass_until("delivered on the third try", || receiver.accepted().len() == 1).await;
    let got = receiver.received();
    assert_eq!(got.iter().map(|r| r.answered).collect::<Vec<_>>(), vec![500, 500, 204]);
    assert!(
        got.iter().all(|r| r.webhook_id == id.as_str()),
        "every retry carries the same webhook-id"
    );
    verify_with_reference(secret.expose(), &got).unwrap();
    let delivery = &w.webhooks.deliveries(&owner, &id).await.unwrap()[0];
    assert_eq!(
        delivery.tries.iter().map(|t| (t.try_no, t.status_code)).collect::<Vec<_>>(),
        vec![(1, Some(500)), (2, Some(500)), (3, Some(204))],
        "every try is recorded"
    );
    assert!(delivery.tries.iter().all(|t| t.latency_ms >= 0));
    assert!(delivery.tries[0].error.as_deref().unwrap().contains("500"));

    assert_eq!(w.webhooks.redispatch(&owner, &id).await.unwrap(), 1);
    w.pass_until("the redispatch arrives", || receiver.accepted().len() == 2).await;
    let again = receiver.accepted();
    assert_eq!(again[1].webhook_id, id.as_str(), "a redispatch carries the same webhook-id");
    let delivery = &w.webhooks.deliveries(&owner, &id).await.unwrap()[0];
    assert_eq!(
        (delivery.state, delivery.round),
        (DeliveryState::Delivered, 2),
        "a redispatch is a new round"
    );
}

async fn a_receiver_down_for_a_round_gets_the_event_in_a_later_round(db: TestDb) {
    let w = World::new(db, fast_config()).await;
    let receiver = Receiver::start().await;
    receiver.set_down(true);
    let owner = EndpointOwner::Merchant(w.merchant.clone());
    w.endpoint(owner.clone(), &receiver.url, &[], 7).await;
    let id = w.deposit(&w.merchant, 1).await;
    w.pass_until("a whole round of tries", || receiver.received().len() == 5).await;
    let delivery = &w.webhooks.deliveries(&owner, &id).await.unwrap()[0];
    assert_eq!(
        (delivery.state, delivery.round, delivery.tries_in_round),
        (DeliveryState::Pending, 2, 0),
        "the next round waits"
    );
    receiver.set_down(false);
    w.pass_until("the next round delivers", || receiver.accepted().len() == 1).await;
    let delivery = &w.webhooks.deliveries(&owner, &id).await.unwrap()[0];
    assert_eq!((delivery.state, delivery.round), (DeliveryState::Delivered, 2));
    assert_eq!(receiver.received().len(), 6, "five failed tries, then one in round 2");
    assert!(receiver.received().iter().all(|r| r.webhook_id == id.as_str()));
}

async fn rounds_end_in_abandon_and_a_redispatch_starts_again(db: TestDb) {
    let w = World::new(db, WebhookConfig { rounds_max: 1, ..fast_config() }).await;
    let receiver = Receiver::start().await;
    receiver.set_down(true);
    let owner = EndpointOwner::Merchant(w.merchant.clone());
    w.endpoint(owner.clone(), &receiver.url, &[], 7).await;
    let id = w.deposit(&w.merchant, 1).await;
    w.pass_until("one round", || receiver.received().len() == 5).await;
    let delivery = &w.webhooks.deliveries(&owner, &id).await.unwrap()[0];
    assert_eq!(delivery.state, DeliveryState::Abandoned);
    assert_eq!(w.db.webhooks().webhook_backlog().await.unwrap(), 0);
    receiver.set_down(false);
    w.webhooks.redispatch(&owner, &id).await.unwrap();
    w.pass_until("redispatched", || receiver.accepted().len() == 1).await;
}

/// SPEC 8 item 18: a worker that took a delivery and died (its lease expires) leaves it to the next
/// worker, which sends the same event id.
async fn a_webhook_redelivered_after_a_restart_carries_the_same_event_id(db: TestDb) {
    let w = World::new(db, fast_config()).await;
    let receiver = Receiver::start().await;
    let owner = EndpointOwner::Merchant(w.merchant.clone());
    let (endpoint, secret) = w.endpoint(owner.clone(), &receiver.url, &[], 7).await;
    let id = w.deposit(&w.merchant, 1).await;
    let store = w.db.webhooks();
    assert_eq!(store.fan_out(100, now_ms()).await.unwrap(), 1);
    // The first worker leases the delivery for a second and is killed before it posts or records anything.
    let leased_at = now_ms();
    let taken =
        store.claim_deliveries(&endpoint.id, leased_at, leased_at + 1_000, 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert!(
        store
            .claim_deliveries(&endpoint.id, leased_at + 999, leased_at + 2_000, 10)
            .await
            .unwrap()
            .is_empty(),
        "leased: nobody else takes it"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // A new worker (a restarted process) takes it once the lease has expired.
    w.pass_until("delivered by the next worker", || receiver.accepted().len() == 1).await;
    assert_eq!(receiver.accepted()[0].webhook_id, id.as_str());
    verify_with_reference(secret.expose(), &receiver.accepted()).unwrap();
}

/// Lists events until the page holds `n` (on PostgreSQL a page waits for every older transaction in
/// the cluster to end, and other tests' transactions come and go).
async fn events_page(
    w: &World,
    query: EventQuery,
    n: usize,
) -> payoutd_engine::webhooks::EventPage {
    for _ in 0..100 {
        let page = w.webhooks.events(&query).await.unwrap();
        if page.events.len() >= n {
            return page;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {n} events listed");
}

fn now_ms() -> i64 {
    use payoutd_engine::Clock;
    SystemClock.now_ms()
}

async fn two_dispatchers_make_each_try_once(db: TestDb) {
    let w = World::new(db, fast_config()).await;
    let receiver = Receiver::start().await;
    receiver.set_delay_ms(5);
    w.endpoint(EndpointOwner::Merchant(w.merchant.clone()), &receiver.url, &[], 7).await;
    const EVENTS: u32 = 40;
    for n in 0..EVENTS {
        w.deposit(&w.merchant, n).await;
    }
    let (a, b) = (w.webhooks.dispatcher(), w.webhooks.dispatcher());
    for _ in 0..PASSES_MAX {
        let (ra, rb) = futures::join!(a.pass(), b.pass());
        ra.unwrap();
        rb.unwrap();
        if receiver.received().len() >= EVENTS as usize {
            break;
        }
    }
    let got = receiver.received();
    assert_eq!(got.len(), EVENTS as usize, "each event was posted exactly once by the two workers");
    let mut ids: Vec<&str> = got.iter().map(|r| r.webhook_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), EVENTS as usize);
}

async fn endpoints_receive_only_their_owners_events_and_types(db: TestDb) {
    let w = World::new(db, fast_config()).await;
    let (other, _) = w.engine.create_merchant("other", [2; 32]).await.unwrap();
    let mine = Receiver::start().await;
    let theirs = Receiver::start().await;
    let filtered = Receiver::start().await;
    let operator = Receiver::start().await;
    w.endpoint(EndpointOwner::Merchant(w.merchant.clone()), &mine.url, &[], 1).await;
    w.endpoint(EndpointOwner::Merchant(other.clone()), &theirs.url, &[], 2).await;
    w.endpoint(EndpointOwner::Merchant(w.merchant.clone()), &filtered.url, &["payout.paid"], 3)
        .await;
    w.endpoint(EndpointOwner::Operator, &operator.url, &[], 4).await;
    w.deposit(&w.merchant, 1).await;
    w.deposit(&w.merchant, 2).await;
    w.deposit(&other, 3).await;
    w.pass_until("deliveries", || mine.accepted().len() == 2 && theirs.accepted().len() == 1).await;
    w.webhooks.dispatcher().pass().await.unwrap();
    assert_eq!(mine.accepted().len(), 2);
    assert_eq!(theirs.accepted().len(), 1, "a merchant never receives another merchant's events");
    assert!(filtered.received().is_empty(), "an endpoint gets only the types it named");
    assert!(operator.received().is_empty(), "operator endpoints get operator events only");
    // Listing is scoped the same way.
    let page = events_page(
        &w,
        EventQuery {
            owner: EndpointOwner::Merchant(other.clone()),
            event_type: None,
            after: None,
            limit: 10,
        },
        1,
    )
    .await;
    assert_eq!(page.events.len(), 1);
    let all = events_page(
        &w,
        EventQuery {
            owner: EndpointOwner::Operator,
            event_type: Some(EventType::DepositCreated),
            after: None,
            limit: 2,
        },
        2,
    )
    .await;
    assert_eq!((all.events.len(), all.has_more), (2, true));
    let rest = events_page(
        &w,
        EventQuery {
            owner: EndpointOwner::Operator,
            event_type: Some(EventType::DepositCreated),
            after: Some(all.events[1].id.clone()),
            limit: 2,
        },
        1,
    )
    .await;
    assert_eq!(
        (rest.events.len(), rest.has_more),
        (1, false),
        "the cursor pages forward, oldest first"
    );
    assert!(
        w.webhooks.event(&EndpointOwner::Merchant(other), &all.events[0].id).await.is_err(),
        "another merchant's event is not found"
    );
}

async fn an_endpoint_created_later_or_deleted_gets_nothing_it_should_not(db: TestDb) {
    let w = World::new(db, fast_config()).await;
    let receiver = Receiver::start().await;
    let owner = EndpointOwner::Merchant(w.merchant.clone());
    w.deposit(&w.merchant, 1).await;
    w.webhooks.dispatcher().pass().await.unwrap();
    let (endpoint, _) = w.endpoint(owner.clone(), &receiver.url, &[], 7).await;
    w.webhooks.dispatcher().pass().await.unwrap();
    assert!(
        receiver.received().is_empty(),
        "events written before the endpoint existed are not sent"
    );
    receiver.set_down(true);
    w.deposit(&w.merchant, 2).await;
    w.pass_until("a failed try", || !receiver.received().is_empty()).await;
    w.webhooks.delete_endpoint(&owner, &endpoint.id).await.unwrap();
    let before = receiver.received().len();
    receiver.set_down(false);
    for _ in 0..5 {
        w.webhooks.dispatcher().pass().await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(receiver.received().len(), before, "a deleted endpoint receives nothing more");
    assert!(w.webhooks.endpoints(&owner).await.unwrap().is_empty());
    assert!(
        w.webhooks.delete_endpoint(&owner, &endpoint.id).await.is_err(),
        "deleting twice is not found"
    );
}

async fn a_rotated_secret_signs_beside_the_old_one(db: TestDb) {
    let w = World::new(db, fast_config()).await;
    let receiver = Receiver::start().await;
    let owner = EndpointOwner::Merchant(w.merchant.clone());
    let (endpoint, old) = w.endpoint(owner.clone(), &receiver.url, &[], 7).await;
    let new = w.webhooks.rotate_secret(&owner, &endpoint.id, random(8)).await.unwrap();
    assert_ne!(old, new);
    w.deposit(&w.merchant, 1).await;
    w.pass_until("delivered", || receiver.accepted().len() == 1).await;
    let got = receiver.accepted();
    assert_eq!(got[0].signature.split(' ').count(), 2, "two signatures during the overlap");
    verify_with_reference(new.expose(), &got).expect("the new secret verifies");
    verify_with_reference(old.expose(), &got)
        .expect("the old secret still verifies during the overlap");
    let other =
        EndpointOwner::Merchant(w.engine.create_merchant("other", [3; 32]).await.unwrap().0);
    assert!(
        w.webhooks.rotate_secret(&other, &endpoint.id, random(9)).await.is_err(),
        "only the owner rotates"
    );
}

async fn a_slow_endpoint_does_not_hold_back_another(db: TestDb) {
    let w = World::new(db, WebhookConfig { timeout_ms: 3_000, ..fast_config() }).await;
    let (other, _) = w.engine.create_merchant("other", [2; 32]).await.unwrap();
    let slow = Receiver::start().await;
    slow.set_delay_ms(2_000);
    let fast = Receiver::start().await;
    w.endpoint(EndpointOwner::Merchant(w.merchant.clone()), &slow.url, &[], 1).await;
    w.endpoint(EndpointOwner::Merchant(other.clone()), &fast.url, &[], 2).await;
    for n in 0..20 {
        w.deposit(&w.merchant, n).await;
    }
    let running = Running::start(&w);
    // The slow endpoint's 20 deliveries take at least 10 s (2 s each, 4 at a time): the other
    // merchant's event must arrive while they are still going, not after.
    while slow.received().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    w.deposit(&other, 100).await;
    wait_accepted(&fast, 3_000).await;
    assert_eq!(fast.accepted().len(), 1, "the other merchant's event arrived");
    assert!(
        slow.received().len() < 20,
        "it arrived while the slow endpoint still had {} of 20 to go",
        20 - slow.received().len()
    );
    running.stop().await;
}

/// One merchant with 16 slow endpoints and 4 events for each has 64 tries to make, the process's
/// every slot; another merchant's event must still start at once, not after the first of them
/// ends: one owner holds at most a quarter of the slots. (Before, the 64 filled every slot and the
/// other merchant waited for one to end.)
async fn one_merchants_many_endpoints_do_not_hold_back_another(db: TestDb) {
    let w = World::new(db, WebhookConfig { timeout_ms: 5_000, ..fast_config() }).await;
    let (other, _) = w.engine.create_merchant("other", [2; 32]).await.unwrap();
    let slow = Receiver::start().await;
    slow.set_delay_ms(SLOW_ANSWER_MS);
    let fast = Receiver::start().await;
    for seed in 0..16u8 {
        w.endpoint(EndpointOwner::Merchant(w.merchant.clone()), &slow.url, &[], 10 + seed).await;
    }
    w.endpoint(EndpointOwner::Merchant(other.clone()), &fast.url, &[], 2).await;
    for n in 0..4 {
        w.deposit(&w.merchant, n).await;
    }
    let running = Running::start(&w);
    tokio::time::sleep(Duration::from_millis(SLOW_ANSWER_MS / 4)).await; // the first merchant's tries are in flight
    w.deposit(&other, 100).await;
    wait_accepted(&fast, 1_000).await;
    assert_eq!(fast.accepted().len(), 1, "the other merchant's event arrived");
    assert!(
        slow.received().is_empty(),
        "it arrived before any slow try ended ({} had)",
        slow.received().len()
    );
    running.stop().await;
}

/// Incident events go to operator endpoints only, whichever merchant's payout they concern: the
/// merchant's endpoint (listening to every type) gets its payout's events and no incident. (Before,
/// a merchant's endpoint received the incidents about its payouts: the platform's wallets, losses
/// and alarms.)
async fn incident_events_go_to_operator_endpoints_only(db: TestDb) {
    use payoutd_domain::IncidentKind;
    use payoutd_engine::{IncidentSubject, NewIncident};
    let w = World::new(db, fast_config()).await;
    let operator = Receiver::start().await;
    let merchant = Receiver::start().await;
    w.endpoint(EndpointOwner::Operator, &operator.url, &[], 1).await;
    w.endpoint(EndpointOwner::Merchant(w.merchant.clone()), &merchant.url, &[], 2).await;
    let store = w.db.pipeline();
    let stray = NewIncident::new(
        IncidentKind::UnmatchedTransfer,
        IncidentSubject::default(),
        "a stranger left the hot wallet".into(),
        now_ms(),
    );
    assert!(store.open_incident_once(&stray, "0xabc").await.unwrap());
    let theirs =
        IncidentSubject { merchant_id: Some(w.merchant.clone()), ..IncidentSubject::default() };
    let about_merchant =
        NewIncident::new(IncidentKind::Reverted, theirs, "reverted".into(), now_ms());
    assert!(store.open_incident_once(&about_merchant, "po_x").await.unwrap());
    let open = w.db.store().count_open_incidents_by_kind().await.unwrap();
    assert_eq!(
        open,
        vec![("reverted".to_owned(), 1), ("unmatched_transfer".to_owned(), 1)],
        "what the incidents gauge reports"
    );
    assert!(store.resolve_incident(&stray.id, "our own top-up", now_ms()).await.unwrap());
    assert_eq!(
        w.db.store().count_open_incidents_by_kind().await.unwrap(),
        vec![("reverted".to_owned(), 1)]
    );
    w.pass_until("incident events", || operator.accepted().len() == 3).await;
    let types: Vec<String> =
        operator.accepted().iter().map(|r| r.json()["type"].as_str().unwrap().to_owned()).collect();
    assert_eq!(types.iter().filter(|t| *t == "incident.opened").count(), 2, "{types:?}");
    assert_eq!(types.iter().filter(|t| *t == "incident.resolved").count(), 1, "{types:?}");
    // A later event of the merchant's own (a deposit) arrives: by then any incident would have too.
    w.deposit(&w.merchant, 1).await;
    w.pass_until("the merchant's own event", || !merchant.accepted().is_empty()).await;
    let mine: Vec<String> =
        merchant.accepted().iter().map(|r| r.json()["type"].as_str().unwrap().to_owned()).collect();
    assert!(
        mine.iter().all(|t| !t.starts_with("incident.")),
        "no incident reached the merchant: {mine:?}"
    );
}

both_stores!(
    incident_events_go_to_operator_endpoints_only,
    deliveries_are_signed_as_standard_webhooks_and_carry_the_event,
    a_failing_receiver_gets_the_same_id_on_every_retry_and_on_redispatch,
    a_receiver_down_for_a_round_gets_the_event_in_a_later_round,
    rounds_end_in_abandon_and_a_redispatch_starts_again,
    a_webhook_redelivered_after_a_restart_carries_the_same_event_id,
    two_dispatchers_make_each_try_once,
    endpoints_receive_only_their_owners_events_and_types,
    an_endpoint_created_later_or_deleted_gets_nothing_it_should_not,
    a_rotated_secret_signs_beside_the_old_one,
    a_slow_endpoint_does_not_hold_back_another,
    one_merchants_many_endpoints_do_not_hold_back_another,
);

#[tokio::test]
async fn only_public_https_urls_are_accepted_by_default() {
    let transport = HttpTransport::new(1_000, AddressPolicy::PublicHttpsOnly).unwrap();
    let check = |url: &str| {
        let transport = transport.clone();
        let url = WebhookUrl::parse(url).unwrap();
        async move { transport.check_url(&url).await }
    };
    assert_eq!(check("http://hooks.example.com/x").await, Err(UrlRefused::NotHttps));
    assert_eq!(
        check("https://127.0.0.1/x").await,
        Err(UrlRefused::PrivateAddress("127.0.0.1".into()))
    );
    assert_eq!(check("https://[::1]/x").await, Err(UrlRefused::PrivateAddress("::1".into())));
    assert_eq!(
        check("https://169.254.169.254/latest").await,
        Err(UrlRefused::PrivateAddress("169.254.169.254".into()))
    );
    // A name that resolves to loopback: the refusal names the host as given, never the address it
    // resolved to (which would map an internal network). (Before, it named the address.)
    let refused = check("https://localhost/x").await;
    assert_eq!(refused, Err(UrlRefused::PrivateAddress("localhost".into())));
    let shown = refused.unwrap_err().to_string();
    assert!(!shown.contains("127.0.0.1") && !shown.contains("::1"), "{shown}");
    // And at send time, whatever was registered: a private literal is never connected to.
    let receiver = Receiver::start().await;
    let url = WebhookUrl::parse(&receiver.url.replace("http://", "https://")).unwrap();
    let secret = WebhookSecret::from_random(random(1));
    let id = EventId::derive(EventType::PayoutPaid, "po_x");
    let sent = transport
        .post(payoutd_engine::webhooks::OutgoingWebhook {
            url: &url,
            webhook_id: &id,
            timestamp_s: 0,
            body: b"{}",
            secrets: std::slice::from_ref(&secret),
        })
        .await;
    assert!(sent.is_err());
    assert!(receiver.received().is_empty());
}

/// On PostgreSQL an event's `seq` is taken at insert and seen at commit: a consumer paging by cursor
/// must not step over an event that commits after a later one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_events_never_steps_over_a_late_commit() {
    let w = World::new(payoutd_testkit::db::fresh_postgres().await, fast_config()).await;
    let owner = EndpointOwner::Merchant(w.merchant.clone());
    let list = || async {
        let q = EventQuery { owner: owner.clone(), event_type: None, after: None, limit: 10 };
        w.webhooks
            .events(&q)
            .await
            .unwrap()
            .events
            .into_iter()
            .map(|e| e.entity_id)
            .collect::<Vec<_>>()
    };
    w.deposit(&w.merchant, 1).await;
    let first = events_page(
        &w,
        EventQuery { owner: owner.clone(), event_type: None, after: None, limit: 10 },
        1,
    )
    .await;
    let first: Vec<String> = first.events.into_iter().map(|e| e.entity_id).collect();
    assert_eq!(first.len(), 1);
    // A writer takes its seq now and commits later.
    let pool = sqlx::PgPool::connect(w.db.url()).await.unwrap();
    let mut slow = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO events (id, type, entity_id, merchant_id, payload, created_at_ms) VALUES ($1, 'payout.created', 'po_late', $2, '{}', 0)")
        .bind(EventId::derive(EventType::PayoutCreated, "po_late").as_str())
        .bind(w.merchant.as_str())
        .execute(&mut *slow)
        .await
        .unwrap();
    w.deposit(&w.merchant, 2).await;
    assert_eq!(list().await, first, "the later event waits until the earlier writer is done");
    slow.commit().await.unwrap();
    let all = events_page(
        &w,
        EventQuery { owner: owner.clone(), event_type: None, after: None, limit: 10 },
        3,
    )
    .await;
    let all: Vec<String> = all.events.into_iter().map(|e| e.entity_id).collect();
    assert_eq!(all.len(), 3);
    assert_eq!(all[1], "po_late", "in seq order, nothing skipped");
}
