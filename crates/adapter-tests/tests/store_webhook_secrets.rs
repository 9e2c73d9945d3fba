//! Webhook signing secrets sealed at rest, on both stores: the database holds no secret in clear, the dispatcher still signs with it, and sealed rows open only with their key.

use std::sync::Arc;

use payoutd_domain::webhook::WEBHOOK_SECRET_RANDOM_BYTES;
use payoutd_domain::{
    Amount, AssetCode, AssetRegistry, DepositKey, EndpointOwner, EventFilter, WebhookEndpointId,
    WebhookSecret, WebhookUrl,
};
use payoutd_engine::webhook_store::WebhookEndpoint;
use payoutd_engine::{Engine, StoreError, SystemClock};
use payoutd_store::{SecretsKey, open_stores_with};
use payoutd_testkit::{TestDb, both_stores};

const LEASE_MS: i64 = 60_000;

/// With a key configured, a new endpoint's secret is stored sealed (the row never shows it), and
/// a leased delivery carries the secret as created. A store without the key, or with another,
/// refuses the sealed row instead of signing with garbage. (Before, secrets were stored in clear.)
async fn webhook_secrets_are_sealed_at_rest_and_sign_as_created(db: TestDb) {
    let sealed =
        open_stores_with(db.url(), Some(Arc::new(SecretsKey::from_bytes(&[3; 32])))).await.unwrap();
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
    let at_rest = db
        .scalar_raw(&format!(
            "SELECT count(*) FROM webhook_secrets WHERE secret = '{}'",
            secret.expose()
        ))
        .await;
    assert_eq!(at_rest, 0, "no secret in clear in the database");
    let usdc = AssetCode::parse("evm:31337/USDC").unwrap().0;
    engine
        .deposit(
            &merchant,
            &usdc,
            Amount::from_u128(5),
            DepositKey::parse("deposit-sealed-1").unwrap(),
        )
        .await
        .unwrap();
    sealed.webhooks.fan_out(10, now).await.unwrap();
    let claimed =
        sealed.webhooks.claim_deliveries(&endpoint.id, now + 1, now + LEASE_MS, 1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(
        claimed[0].secrets == vec![secret.clone()],
        "the dispatcher signs with the secret as created"
    );
    let later = now + 2 * LEASE_MS; // past the lease: the delivery is due again
    let without_key =
        db.webhooks().claim_deliveries(&endpoint.id, later, later + LEASE_MS, 1).await;
    assert!(matches!(without_key, Err(StoreError::Corrupt(_))), "a sealed secret needs its key");
    let other_key =
        open_stores_with(db.url(), Some(Arc::new(SecretsKey::from_bytes(&[5; 32])))).await.unwrap();
    let later_still = later + 2 * LEASE_MS; // past the lease the refused claim took
    let with_other = other_key
        .webhooks
        .claim_deliveries(&endpoint.id, later_still, later_still + LEASE_MS, 1)
        .await;
    assert!(matches!(with_other, Err(StoreError::Corrupt(_))), "nor does it open with another key");
}

/// Resealing: a secret written in clear (before any key) and one sealed under the key being rotated
/// out are both sealed under the new key, and a store with the new key signs with each as created;
/// a second run rewrites nothing; a secret that opens with neither key stops the run and rewrites
/// nothing. (Before, secrets written in clear stayed in clear until each endpoint was rotated, and
/// the key could not be rotated at all.)
async fn webhook_secrets_are_resealed_under_a_new_key(db: TestDb) {
    let (old, new) = (SecretsKey::from_bytes(&[6; 32]), SecretsKey::from_bytes(&[7; 32]));
    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
    let (merchant, _) = engine.create_merchant("resealed", [8; 32]).await.unwrap();
    let now = payoutd_engine::Clock::now_ms(&SystemClock);
    let endpoint = |n: u8| WebhookEndpoint {
        id: WebhookEndpointId::new(),
        owner: EndpointOwner::Merchant(merchant.clone()),
        url: WebhookUrl::parse(&format!("https://hooks.example.com/{n}")).unwrap(),
        filter: EventFilter::parse(std::iter::empty::<&str>()).unwrap(),
        created_at_ms: now,
    };
    let (in_clear, under_old) = (endpoint(1), endpoint(2));
    let (clear_secret, old_secret) = (
        WebhookSecret::from_random([1; WEBHOOK_SECRET_RANDOM_BYTES]),
        WebhookSecret::from_random([2; WEBHOOK_SECRET_RANDOM_BYTES]),
    );
    assert!(db.webhooks().create_endpoint(&in_clear, &clear_secret).await.unwrap());
    let old_stores =
        open_stores_with(db.url(), Some(Arc::new(SecretsKey::from_bytes(&[6; 32])))).await.unwrap();
    assert!(old_stores.webhooks.create_endpoint(&under_old, &old_secret).await.unwrap());

    let stranger = SecretsKey::from_bytes(&[9; 32]);
    assert!(
        matches!(
            payoutd_store::reseal_webhook_secrets(db.url(), &stranger, None).await,
            Err(StoreError::Corrupt(_))
        ),
        "a key it was not sealed with"
    );
    let in_clear_rows =
        format!("SELECT count(*) FROM webhook_secrets WHERE secret = '{}'", clear_secret.expose());
    assert_eq!(db.scalar_raw(&in_clear_rows).await, 1, "a refused run rewrites nothing");

    assert_eq!(payoutd_store::reseal_webhook_secrets(db.url(), &new, Some(&old)).await.unwrap(), 2);
    assert_eq!(db.scalar_raw(&in_clear_rows).await, 0, "no secret in clear any more");
    assert_eq!(
        payoutd_store::reseal_webhook_secrets(db.url(), &new, Some(&old)).await.unwrap(),
        0,
        "a second run rewrites nothing"
    );
    let usdc = AssetCode::parse("evm:31337/USDC").unwrap().0;
    engine
        .deposit(
            &merchant,
            &usdc,
            Amount::from_u128(5),
            DepositKey::parse("deposit-resealed-1").unwrap(),
        )
        .await
        .unwrap();
    let new_stores =
        open_stores_with(db.url(), Some(Arc::new(SecretsKey::from_bytes(&[7; 32])))).await.unwrap();
    new_stores.webhooks.fan_out(10, now).await.unwrap();
    for (endpoint, secret) in [(&in_clear, &clear_secret), (&under_old, &old_secret)] {
        let claimed = new_stores
            .webhooks
            .claim_deliveries(&endpoint.id, now + 1, now + LEASE_MS, 1)
            .await
            .unwrap();
        assert!(
            claimed.len() == 1 && claimed[0].secrets == vec![secret.clone()],
            "signs with the secret as created"
        );
    }
}

both_stores!(
    webhook_secrets_are_sealed_at_rest_and_sign_as_created,
    webhook_secrets_are_resealed_under_a_new_key
);
