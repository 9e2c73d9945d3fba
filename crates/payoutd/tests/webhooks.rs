//! `payoutd worker` delivering webhooks, SIGKILLed mid-delivery and restarted: every event arrives
//! at least once, always under its own id, signed (checked by the reference verifier).

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use payoutd_domain::{
    Amount, AssetCode, AssetRegistry, DepositKey, EndpointOwner, EventFilter, EventId, EventType,
    WebhookUrl,
};
use payoutd_engine::{Engine, SystemClock, WebhookConfig, Webhooks};
use payoutd_testkit::webhooks::{Receiver, verify_with_reference};
use payoutd_testkit::{TestDb, both_stores};
use payoutd_webhooks::{AddressPolicy, HttpTransport};

const EVENTS: u32 = 24;
/// The whole run must finish within this; a stall is a failure.
const DEADLINE_SECS: u64 = 60;

/// A worker process, killed when dropped so a failing test leaves none behind.
struct Worker(Child);

impl Worker {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn worker(config: &std::path::Path, database_url: &str, metrics_listen: &str) -> Worker {
    Worker(
        Command::new(env!("CARGO_BIN_EXE_payoutd"))
            .arg("worker")
            .env("PAYOUTD_METRICS_LISTEN", metrics_listen)
            .env("PAYOUTD_CONFIG", config)
            .env("PAYOUTD_DATABASE_URL", database_url)
            .env("PAYOUTD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start payoutd worker"),
    )
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn deliveries_survive_a_worker_sigkill_with_the_same_ids(db: TestDb) {
    let dir =
        std::env::temp_dir().join(format!("payoutd-webhooks-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("payoutd.toml");
    std::fs::write(&config, "[webhooks]\nallow_private_urls = true\ntimeout_ms = 1000\nretry_delays_ms = [50, 50, 50, 50]\n").unwrap();

    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
    let transport = HttpTransport::new(1_000, AddressPolicy::AllowPrivate).unwrap();
    let webhooks = Webhooks::new(
        db.webhooks(),
        Arc::new(transport),
        Arc::new(SystemClock),
        WebhookConfig::default(),
    );
    let (merchant, _) = engine.create_merchant("sigkill", [5; 32]).await.unwrap();
    let receiver = Receiver::start().await;
    // Slow answers, so tries are in flight when the worker dies.
    receiver.set_delay_ms(400);
    let url = WebhookUrl::parse(&receiver.url).unwrap();
    let (_, secret) = webhooks
        .create_endpoint(
            EndpointOwner::Merchant(merchant.clone()),
            url,
            EventFilter::default(),
            [9; 32],
        )
        .await
        .unwrap();
    let usdc = AssetCode::parse("evm:31337/USDC").unwrap().0;
    let mut expected = BTreeSet::new();
    for n in 0..EVENTS {
        let key = DepositKey::parse(&format!("deposit-{n:05}")).unwrap();
        let (deposit, _) = engine
            .deposit(&merchant, &usdc, Amount::from_u128(1 + u128::from(n)), key)
            .await
            .unwrap();
        expected.insert(
            EventId::derive(EventType::DepositCreated, deposit.id.as_str()).as_str().to_owned(),
        );
    }

    let deadline = Instant::now() + Duration::from_secs(DEADLINE_SECS);
    let free_port =
        || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let mut first = worker(&config, db.url(), &free_port());
    while receiver.received().len() < 2 {
        assert!(Instant::now() < deadline, "the first worker delivered nothing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill();
    let at_kill = receiver.received().len();
    assert!(
        at_kill < EVENTS as usize,
        "the worker was killed mid-way ({at_kill} of {EVENTS} delivered)"
    );

    let metrics_at = free_port();
    let mut second = worker(&config, db.url(), &metrics_at);
    loop {
        let got: BTreeSet<String> = receiver.accepted().into_iter().map(|r| r.webhook_id).collect();
        if got == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after the restart {} of {EVENTS} events arrived",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The worker's own metrics: the webhook tries it made, and nothing that names a merchant.
    let metrics =
        reqwest::get(format!("http://{metrics_at}/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("payoutd_webhook_tries_total"), "{metrics}");
    assert!(metrics.contains("payoutd_webhook_delivery_latency_seconds"), "{metrics}");
    assert!(metrics.contains("payoutd_incidents_open{kind=\"unmatched_transfer\"} 0"), "{metrics}");
    assert!(!metrics.contains(merchant.as_str()), "no per-merchant data in /metrics");
    second.kill();
    let all = receiver.received();
    assert!(
        all.iter().all(|r| expected.contains(&r.webhook_id)),
        "no request carries an id other than its event's"
    );
    verify_with_reference(secret.expose(), &all)
        .expect("every request, before and after the kill, verifies");
    std::fs::remove_dir_all(&dir).unwrap();
}

both_stores!(deliveries_survive_a_worker_sigkill_with_the_same_ids);
