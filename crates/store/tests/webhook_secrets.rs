//! Webhook signing secrets sealed at rest, on both stores: the database holds no secret in clear, the dispatcher still signs with it, and sealed rows open only with their key.

use std::sync::Arc;

use payoutd_domain::webhook::WEBHOOK_SECRET_RANDOM_BYTES;
use payoutd_domain::{Amount, AssetCode, AssetRegistry, DepositKey, EndpointOwner, EventFilter, WebhookEndpointId, WebhookSecret, WebhookUrl};
use payoutd_engine::webhook_store::WebhookEndpoint;
use payoutd_engine::{Engine, StoreError, SystemClock};
use payoutd_store::{open_stores_with, SecretsKey};
use payoutd_testkit::{both_stores, TestDb};

const LEASE_MS: i64 = 60_000;

/// With a key configured, a new endpoint's secret is stored sealed (the row never shows it), and
/// a leased delivery carries the secret as created. A store without the key, or with another,
/// refuses the sealed row instead of signing with garbage. (Before, secrets were stored in clear.)
async fn webhook_secrets_are_sealed_at_rest_and_sign_as_created(db: TestDb) {
    let sealed = open_stores_with(db.url(), Some(Arc::new(SecretsKey::from_bytes(&[3; 32])))).await.unwrap();
    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
    let (merchant, _) = engine.create_merchant("sealed", [4; 32]).await.unwrap();
    let now = payoutd_engine::Clock::now_ms(&SystemClock);
    let endpoint = WebhookEndpoint {
        id: WebhookEndpointId::new(),
        owner: EndpointOwner::Merchant(merchant.clone()),
        url: WebhookUrl::parse("https://hooks.example.com/payoutd").unwrap(),
        filter: EventFilter::parse(std::iter::empty::<&str>()).unwrap(),
        created_at_ms: now,
    };
    let secret = WebhookSecret::from_random([9; WEBHOOK_SECRET_RANDOM_BYTES]);
    assert!(sealed.webhooks.create_endpoint(&endpoint, &secret).await.unwrap());
    let at_rest = db.scalar_raw(&format!("SELECT count(*) FROM webhook_secrets WHERE secret = '{}'", secret.expose())).await;
    assert_eq!(at_rest, 0, "no secret in clear in the database");
    let usdc = AssetCode::parse("evm:31337/USDC").unwrap().0;
    engine.deposit(&merchant, &usdc, Amount::from_u128(5), DepositKey::parse("deposit-sealed-1").unwrap()).await.unwrap();
    sealed.webhooks.fan_out(10, now).await.unwrap();
    let claimed = sealed.webhooks.claim_deliveries(&endpoint.id, now + 1, now + LEASE_MS, 1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(claimed[0].secrets == vec![secret.clone()], "the dispatcher signs with the secret as created");
    let later = now + 2 * LEASE_MS; // past the lease: the delivery is due again
    let without_key = db.webhooks().claim_deliveries(&endpoint.id, later, later + LEASE_MS, 1).await;
    assert!(matches!(without_key, Err(StoreError::Corrupt(_))), "a sealed secret needs its key");
    let other_key = open_stores_with(db.url(), Some(Arc::new(SecretsKey::from_bytes(&[5; 32])))).await.unwrap();
    let later_still = later + 2 * LEASE_MS; // past the lease the refused claim took
    let with_other = other_key.webhooks.claim_deliveries(&endpoint.id, later_still, later_still + LEASE_MS, 1).await;
    assert!(matches!(with_other, Err(StoreError::Corrupt(_))), "nor does it open with another key");
}

both_stores!(webhook_secrets_are_sealed_at_rest_and_sign_as_created);
