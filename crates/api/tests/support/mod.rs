//! The intake API's test harness: a router over a fresh database per test, served on a real port.

#![allow(dead_code)]

use std::sync::Arc;

use payoutd_api::AppState;
use payoutd_api::metrics_api::MetricsAccess;
use payoutd_domain::{ApiKey, AssetRegistry, MerchantId};
use payoutd_engine::{Engine, SystemClock};
use payoutd_testkit::TestDb;
use reqwest::StatusCode;
use serde_json::{Value, json};

pub const OPERATOR_KEY: &str = "op_test_key_0123456789abcdef";
pub const DEPOSIT_KEY: &str = "dep_test_key_0123456789abcdef";
pub const METRICS_TOKEN: &str = "metrics_token_0123456789abcdef";
pub const DEST_A: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
pub const DEST_B: &str = "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359";
pub const USDC: &str = "evm:31337/USDC";

pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
    pub db: TestDb,
    pub engine: Engine,
}

pub struct Merchant {
    pub id: MerchantId,
    pub key: String,
}

impl Api {
    pub async fn start(db: TestDb) -> Api {
        Api::start_with(db, AssetRegistry::local_development(), |engine| engine).await
    }

    /// `start` over `assets`, with the engine as `configure` leaves it.
    pub async fn start_with(
        db: TestDb,
        assets: AssetRegistry,
        configure: impl FnOnce(Engine) -> Engine,
    ) -> Api {
        let engine = configure(Engine::new(db.store(), Arc::new(SystemClock), assets));
        Api::serve(db, engine, |state| state).await
    }

    /// `start`, with the API's state as `configure` leaves it.
    pub async fn start_with_state(db: TestDb, configure: impl FnOnce(AppState) -> AppState) -> Api {
        let engine =
            Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
        Api::serve(db, engine, configure).await
    }

    pub async fn serve(
        db: TestDb,
        engine: Engine,
        configure: impl FnOnce(AppState) -> AppState,
    ) -> Api {
        let mut state = AppState::new(engine.clone(), Some(&ApiKey::presented(OPERATOR_KEY)));
        state.operator_views = Some(db.operator_views());
        state.metrics_access = MetricsAccess::on_api(Some(&ApiKey::presented(METRICS_TOKEN)));
        let state = configure(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
        });
        Api { base, http: reqwest::Client::new(), db, engine }
    }

    pub async fn merchant(&self, name: &str, seed: u8) -> Merchant {
        let (id, key) = self.engine.create_merchant(name, [seed; 32]).await.unwrap();
        Merchant { id, key: key.expose().to_owned() }
    }

    pub async fn deposit(&self, m: &Merchant, amount: &str, key: &str) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/deposits", self.base))
            .bearer_auth(OPERATOR_KEY)
            .json(&json!({"merchant_id": m.id.as_str(), "asset": USDC, "amount": amount, "idempotency_key": key}))
            .send()
            .await
            .unwrap()
    }

    pub async fn post_payout(&self, m: &Merchant, body: Value) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/payouts", self.base))
            .bearer_auth(&m.key)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn scrape(&self, token: &str) -> reqwest::Response {
        let response = self
            .http
            .get(format!("{}/metrics", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response
    }

    pub async fn get(&self, m: &Merchant, path: &str) -> reqwest::Response {
        self.http.get(format!("{}{path}", self.base)).bearer_auth(&m.key).send().await.unwrap()
    }

    pub async fn balance(&self, m: &Merchant) -> (String, String) {
        let body: Value = self.get(m, "/v1/balances").await.json().await.unwrap();
        let row = body["data"].as_array().unwrap().iter().find(|b| b["asset"] == USDC).cloned();
        row.map(|b| {
            (b["available"].as_str().unwrap().to_owned(), b["held"].as_str().unwrap().to_owned())
        })
        .unwrap_or(("0".into(), "0".into()))
    }

    pub async fn count(&self, table: &str) -> i64 {
        self.db.scalar_raw(&format!("SELECT count(*) FROM {table}")).await
    }
}

pub fn payout(key: &str, amount: &str, dest: &str) -> Value {
    json!({"asset": USDC, "amount": amount, "destination": dest, "idempotency_key": key})
}

pub async fn problem(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(content_type.as_deref(), Some("application/problem+json"), "status {status}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], status.as_u16());
    assert!(
        body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "a problem explains itself: {body}"
    );
    let slug = body["type"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
    (status, slug)
}
