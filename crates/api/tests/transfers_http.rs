//! Internal transfers over HTTP on both stores: SPEC 3's idempotency table, conditional debit,
//! events to both sides, a balanced ledger.

use std::sync::Arc;

use payoutd_api::AppState;
use payoutd_domain::{ApiKey, AssetRegistry, EventType, MerchantId};
use payoutd_engine::{Engine, SystemClock};
use payoutd_testkit::{TestDb, both_stores};
use reqwest::StatusCode;
use serde_json::{Value, json};

const OPERATOR_KEY: &str = "op_test_key_0123456789abcdef";
const USDC: &str = "evm:31337/USDC";

struct Api {
    base: String,
    http: reqwest::Client,
    db: TestDb,
    engine: Engine,
}

struct Merchant {
    id: MerchantId,
    key: String,
}

impl Api {
    async fn start(db: TestDb) -> Api {
        let engine =
            Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
        Api::start_with(db, engine).await
    }

    async fn start_with(db: TestDb, engine: Engine) -> Api {
        let state = AppState::new(engine.clone(), Some(&ApiKey::presented(OPERATOR_KEY)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
        });
        Api { base, http: reqwest::Client::new(), db, engine }
    }

    async fn merchant(&self, name: &str, seed: u8, funds: &str) -> Merchant {
        let (id, key) = self.engine.create_merchant(name, [seed; 32]).await.unwrap();
        if funds != "0" {
            let body = json!({"merchant_id": id.as_str(), "asset": USDC, "amount": funds, "idempotency_key": format!("fund-{seed}")});
            let r = self
                .http
                .post(format!("{}/v1/deposits", self.base))
                .bearer_auth(OPERATOR_KEY)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::CREATED);
        }
        Merchant { id, key: key.expose().to_owned() }
    }

    async fn transfer(&self, from: &Merchant, body: Value) -> (StatusCode, Option<String>, Value) {
        let r = self
            .http
            .post(format!("{}/v1/transfers", self.base))
            .bearer_auth(&from.key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let replayed =
            r.headers().get("idempotent-replayed").map(|v| v.to_str().unwrap().to_owned());
        (r.status(), replayed, r.json().await.unwrap())
    }

    async fn available(&self, m: &Merchant) -> String {
        let r: Value = self
            .http
            .get(format!("{}/v1/balances", self.base))
            .bearer_auth(&m.key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        r["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["asset"] == USDC)
            .map_or("0".into(), |b| b["available"].as_str().unwrap().to_owned())
    }

    async fn transfers_in_db(&self) -> i64 {
        self.db.scalar_raw("SELECT count(*) FROM transfers").await
    }
}

fn body(to: &Merchant, amount: &str, key: &str) -> Value {
    json!({"destination_merchant_id": to.id.as_str(), "asset": USDC, "amount": amount, "idempotency_key": key})
}

async fn a_transfer_moves_balance_once_and_replays_as_it_was(db: TestDb) {
    let api = Api::start(db).await;
    let a = api.merchant("a", 1, "100").await;
    let b = api.merchant("b", 2, "0").await;
    let (status, replayed, created) = api.transfer(&a, body(&b, "30", "rent-2026-12")).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, None), "{created}");
    assert_eq!(created["status"], "completed");
    let (status, replayed, again) = api.transfer(&a, body(&b, "30", "rent-2026-12")).await;
    assert_eq!((status, replayed.as_deref()), (StatusCode::OK, Some("true")));
    assert_eq!(again["id"], created["id"]);
    assert_eq!(
        (api.available(&a).await, api.available(&b).await),
        ("70".to_owned(), "30".to_owned())
    );

    let (status, _, problem) = api.transfer(&a, body(&b, "31", "rent-2026-12")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(problem["type"].as_str().unwrap().ends_with("idempotency-key-reused"), "{problem}");

    let id = created["id"].as_str().unwrap();
    assert_eq!(created["idempotency_key"], "rent-2026-12", "the sender sees its own key");
    for (who, key) in [(&a, json!("rent-2026-12")), (&b, Value::Null)] {
        let r = api
            .http
            .get(format!("{}/v1/transfers/{id}", api.base))
            .bearer_auth(&who.key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "both sides read it");
        let seen: Value = r.json().await.unwrap();
        assert_eq!(seen["idempotency_key"], key, "the recipient does not see the sender's key");
    }
    // The recipient's `transfer.completed` does not carry the sender's key either.
    let carrying_key = |merchant: &Merchant| {
        format!(
            "SELECT count(*) FROM events WHERE type = 'transfer.completed' AND merchant_id = '{}' AND CAST(payload AS TEXT) LIKE '%rent-2026-12%'",
            merchant.id
        )
    };
    assert_eq!(api.db.scalar_raw(&carrying_key(&b)).await, 0, "the recipient's event");
    assert_eq!(api.db.scalar_raw(&carrying_key(&a)).await, 1, "the sender's event carries it");
    let c = api.merchant("c", 3, "0").await;
    let r = api
        .http
        .get(format!("{}/v1/transfers/{id}", api.base))
        .bearer_auth(&c.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "a third merchant does not see it");

    let store = api.db.store();
    assert_eq!(
        store.count_events(&a.id, EventType::TransferCompleted).await.unwrap(),
        1,
        "the sender is told"
    );
    assert_eq!(
        store.count_events(&b.id, EventType::TransferCompleted).await.unwrap(),
        1,
        "the receiver is told"
    );
    assert!(store.audit_ledger().await.unwrap().is_clean());
    assert_eq!(api.db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'transfer'").await, 1);
}

async fn an_insufficient_transfer_writes_nothing(db: TestDb) {
    let api = Api::start(db).await;
    let a = api.merchant("a", 1, "10").await;
    let b = api.merchant("b", 2, "0").await;
    let (status, _, problem) = api.transfer(&a, body(&b, "11", "too-much")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(problem["type"].as_str().unwrap().ends_with("insufficient-funds"), "{problem}");
    assert_eq!(api.transfers_in_db().await, 0);
    assert_eq!(
        (api.available(&a).await, api.available(&b).await),
        ("10".to_owned(), "0".to_owned())
    );
    assert_eq!(
        api.db.scalar_raw("SELECT count(*) FROM events WHERE type = 'transfer.completed'").await,
        0
    );
    // The key was not used up: the same key with a payable amount succeeds.
    assert_eq!(api.transfer(&a, body(&b, "10", "too-much")).await.0, StatusCode::CREATED);
}

async fn racing_transfers_with_one_key_converge_on_one(db: TestDb) {
    let api = Api::start(db).await;
    let a = api.merchant("a", 1, "100").await;
    let b = api.merchant("b", 2, "0").await;
    let tries = (0..8).map(|_| api.transfer(&a, body(&b, "60", "race-key")));
    let answers = futures::future::join_all(tries).await;
    let ids: std::collections::BTreeSet<String> =
        answers.iter().map(|(_, _, v)| v["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 1, "every racer got the one winner");
    assert_eq!(answers.iter().filter(|(s, _, _)| *s == StatusCode::CREATED).count(), 1);
    assert_eq!(api.transfers_in_db().await, 1);
    assert_eq!(api.available(&a).await, "40", "debited once");
    // Two different keys racing for one balance: one succeeds, the balance never goes negative.
    let c = api.merchant("c", 3, "0").await;
    let (x, y) = futures::join!(
        api.transfer(&a, body(&c, "40", "drain-1")),
        api.transfer(&a, body(&c, "40", "drain-2"))
    );
    let mut statuses = [x.0, y.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::CREATED, StatusCode::UNPROCESSABLE_ENTITY]);
    assert_eq!(api.available(&a).await, "0");
    assert!(api.db.store().audit_ledger().await.unwrap().is_clean());
}

async fn bad_transfers_are_refused_with_problems(db: TestDb) {
    let api = Api::start(db).await;
    let a = api.merchant("a", 1, "100").await;
    let b = api.merchant("b", 2, "0").await;
    let no_key = json!({"destination_merchant_id": b.id.as_str(), "asset": USDC, "amount": "1"});
    let cases = [
        (no_key, "idempotency-key-missing"),
        (body(&b, "1", &"k".repeat(65)), "idempotency-key-invalid"),
        (body(&a, "1", "self"), "invalid-request"),
        (body(&b, "0", "zero"), "invalid-amount"),
        (body(&b, "1.5", "fraction"), "invalid-amount"),
        (
            json!({"destination_merchant_id": b.id.as_str(), "asset": "evm:1/DOGE", "amount": "1", "idempotency_key": "doge"}),
            "unknown-asset",
        ),
        (
            json!({"destination_merchant_id": b.id.as_str(), "asset": USDC, "amount": "1", "idempotency_key": "x", "memo": "hi"}),
            "malformed-json",
        ),
    ];
    for (request, slug) in cases {
        let (status, _, problem) = api.transfer(&a, request.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{request}: {problem}");
        assert!(problem["type"].as_str().unwrap().ends_with(slug), "{request}: {problem}");
    }
    let ghost = json!({"destination_merchant_id": "mer_00000000000000000000000000000000", "asset": USDC, "amount": "1", "idempotency_key": "ghost"});
    let (status, _, problem) = api.transfer(&a, ghost).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a well-formed id that names no merchant: {problem}");
    assert!(problem["type"].as_str().unwrap().ends_with("unknown-merchant"), "{problem}");
    assert_eq!(api.transfers_in_db().await, 0, "nothing was written");
    assert_eq!(api.available(&a).await, "100");
}

/// A transfer meets the payouts' minimum of its asset and takes a place in the merchant's minute,
/// so a stolen key can neither scatter a balance in dust nor send transfers without bound; each
/// refusal writes nothing. (Before, transfers passed both.)
async fn a_transfer_meets_the_payouts_minimum_and_the_merchants_minute(db: TestDb) {
    let usdc = AssetRegistry::local_development().get(USDC).unwrap().clone();
    let assets =
        AssetRegistry::new(vec![usdc.with_min_amount(payoutd_domain::Amount::from_u128(10))])
            .unwrap();
    let engine = Engine::new(db.store(), Arc::new(SystemClock), assets).with_intake_rate(3);
    let api = Api::start_with(db, engine).await;
    let a = api.merchant("a", 1, "100").await;
    let b = api.merchant("b", 2, "0").await;
    let (status, _, problem) = api.transfer(&a, body(&b, "9", "dust-1")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert!(problem["type"].as_str().unwrap().ends_with("amount-below-minimum"), "{problem}");
    assert_eq!(api.transfers_in_db().await, 0, "nothing written");
    for n in 1..=3 {
        let (status, _, created) = api.transfer(&a, body(&b, "10", &format!("ok-{n}"))).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
    }
    let (status, _, problem) = api.transfer(&a, body(&b, "10", "ok-4")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{problem}");
    assert_eq!(api.transfers_in_db().await, 3);
    assert_eq!(api.available(&a).await, "70");
}

both_stores!(
    a_transfer_meets_the_payouts_minimum_and_the_merchants_minute,
    a_transfer_moves_balance_once_and_replays_as_it_was,
    an_insufficient_transfer_writes_nothing,
    racing_transfers_with_one_key_converge_on_one,
    bad_transfers_are_refused_with_problems,
);
