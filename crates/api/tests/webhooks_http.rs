//! The webhook endpoints and the events API over real HTTP, on both stores.

use std::sync::Arc;

use payoutd_api::AppState;
use payoutd_domain::{ApiKey, AssetRegistry};
use payoutd_engine::webhooks::REDISPATCHES_PER_DELIVERY_MAX;
use payoutd_engine::{Engine, SystemClock, WebhookConfig, Webhooks};
use payoutd_testkit::webhooks::{Receiver, verify_with_reference};
use payoutd_testkit::{TestDb, both_stores};
use payoutd_webhooks::{AddressPolicy, HttpTransport};
use reqwest::StatusCode;
use serde_json::{Value, json};

const OPERATOR_KEY: &str = "op_test_key_0123456789abcdef";
const USDC: &str = "evm:31337/USDC";

struct Api {
    base: String,
    http: reqwest::Client,
    webhooks: Webhooks,
    merchant_key: String,
    other_key: String,
    merchant_id: String,
    db: TestDb,
}

impl Api {
    async fn start(db: TestDb, policy: AddressPolicy) -> Api {
        let engine =
            Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
        let config = WebhookConfig {
            retry_delays_ms: [20, 20, 20, 20],
            idle_sleep_ms: 10,
            ..WebhookConfig::default()
        };
        let transport = HttpTransport::new(config.timeout_ms, policy).unwrap();
        let webhooks =
            Webhooks::new(db.webhooks(), Arc::new(transport), Arc::new(SystemClock), config);
        let mut state = AppState::new(engine.clone(), Some(&ApiKey::presented(OPERATOR_KEY)));
        state.webhooks = Some(webhooks.clone());
        state.operator_views = Some(db.operator_views());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
        });
        let (merchant, key) = engine.create_merchant("hooks", [1; 32]).await.unwrap();
        let (_, other) = engine.create_merchant("other", [2; 32]).await.unwrap();
        Api {
            base,
            http: reqwest::Client::new(),
            webhooks,
            merchant_key: key.expose().to_owned(),
            other_key: other.expose().to_owned(),
            merchant_id: merchant.to_string(),
            db,
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        key: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request =
            self.http.request(method, format!("{}{path}", self.base)).bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap() })
    }

    async fn deposit(&self, n: u32) -> (StatusCode, Value) {
        let body = json!({"merchant_id": self.merchant_id, "asset": USDC, "amount": "100", "idempotency_key": format!("deposit-{n:05}")});
        self.send(reqwest::Method::POST, OPERATOR_KEY, "/v1/deposits", Some(body)).await
    }

    async fn deliver_all(&self) {
        let dispatcher = self.webhooks.dispatcher();
        for _ in 0..5 {
            dispatcher.pass().await.unwrap();
        }
    }
}

async fn endpoints_are_created_listed_rotated_and_deleted_by_their_owner(db: TestDb) {
    let api = Api::start(db, AddressPolicy::AllowPrivate).await;
    let receiver = Receiver::start().await;
    let (status, created) = api
        .send(
            reqwest::Method::POST,
            &api.merchant_key,
            "/v1/webhook_endpoints",
            Some(json!({"url": receiver.url, "event_types": ["deposit.created"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(created["event_types"], json!(["deposit.created"]));
    let id = created["id"].as_str().unwrap().to_owned();

    let (status, list) =
        api.send(reqwest::Method::GET, &api.merchant_key, "/v1/webhook_endpoints", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(list["data"][0].get("secret").is_none(), "the secret is shown only when created");
    let (_, theirs) =
        api.send(reqwest::Method::GET, &api.other_key, "/v1/webhook_endpoints", None).await;
    assert_eq!(theirs["data"].as_array().unwrap().len(), 0, "another merchant sees none of them");

    let (status, _) = api
        .send(reqwest::Method::DELETE, &api.other_key, &format!("/v1/webhook_endpoints/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another merchant cannot delete it");
    let (status, rotated) = api
        .send(
            reqwest::Method::POST,
            &api.merchant_key,
            &format!("/v1/webhook_endpoints/{id}/rotate_secret"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let new_secret = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, secret);

    api.deposit(1).await;
    api.deliver_all().await;
    let got = receiver.accepted();
    assert_eq!(got.len(), 1);
    verify_with_reference(&secret, &got).unwrap();
    verify_with_reference(&new_secret, &got).unwrap();

    let (status, _) = api
        .send(
            reqwest::Method::DELETE,
            &api.merchant_key,
            &format!("/v1/webhook_endpoints/{id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, list) =
        api.send(reqwest::Method::GET, &api.merchant_key, "/v1/webhook_endpoints", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 0);
}

async fn bad_endpoints_are_refused_with_problems_and_change_nothing(db: TestDb) {
    let api = Api::start(db, AddressPolicy::PublicHttpsOnly).await;
    for (body, status, slug) in [
        (json!({"url": "not a url"}), StatusCode::BAD_REQUEST, "invalid-request"),
        (
            json!({"url": "https://hooks.example.com/x", "event_types": ["payout.exploded"]}),
            StatusCode::BAD_REQUEST,
            "invalid-request",
        ),
        (
            json!({"url": "https://hooks.example.com/x", "color": "red"}),
            StatusCode::BAD_REQUEST,
            "malformed-json",
        ),
        (
            json!({"url": "http://hooks.example.com/x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "webhook-url-refused",
        ),
        (
            json!({"url": "https://127.0.0.1:9/x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "webhook-url-refused",
        ),
        (
            json!({"url": "https://10.0.0.8/x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "webhook-url-refused",
        ),
        (
            json!({"url": "https://hooks.example.com/x", "event_types": ["incident.opened"]}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "event-type-not-available",
        ),
    ] {
        let (got, problem) = api
            .send(
                reqwest::Method::POST,
                &api.merchant_key,
                "/v1/webhook_endpoints",
                Some(body.clone()),
            )
            .await;
        assert_eq!(got, status, "{body}: {problem}");
        assert!(problem["type"].as_str().unwrap().ends_with(slug), "{body}: {problem}");
    }
    let (_, list) =
        api.send(reqwest::Method::GET, &api.merchant_key, "/v1/webhook_endpoints", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 0, "nothing was created");
    let (status, _) =
        api.send(reqwest::Method::GET, "pk_not_a_key", "/v1/webhook_endpoints", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn events_page_forward_and_show_deliveries_and_redispatch(db: TestDb) {
    let api = Api::start(db, AddressPolicy::AllowPrivate).await;
    let receiver = Receiver::start().await;
    receiver.fail_first(1);
    let (status, _) = api
        .send(
            reqwest::Method::POST,
            &api.merchant_key,
            "/v1/webhook_endpoints",
            Some(json!({"url": receiver.url})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    for n in 0..3 {
        assert_eq!(api.deposit(n).await.0, StatusCode::CREATED);
    }
    // On PostgreSQL a page waits for every older transaction in the cluster (other tests' too).
    let mut page = Value::Null;
    for _ in 0..100 {
        let (status, got) = api
            .send(
                reqwest::Method::GET,
                &api.merchant_key,
                "/v1/events?type=deposit.created&limit=2",
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{got}");
        page = got;
        // All three visible: two on the page and one more behind it.
        if page["data"].as_array().unwrap().len() == 2 && page["has_more"].as_bool() == Some(true) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        (page["data"].as_array().unwrap().len(), page["has_more"].as_bool()),
        (2, Some(true))
    );
    let first = page["data"][0]["id"].as_str().unwrap().to_owned();
    let last = page["data"][1]["id"].as_str().unwrap().to_owned();
    assert_eq!(page["data"][0]["type"], "deposit.created");
    assert_eq!(page["data"][0]["data"]["object"], "deposit");
    let mut rest = Value::Null;
    for _ in 0..100 {
        rest = api
            .send(
                reqwest::Method::GET,
                &api.merchant_key,
                &format!("/v1/events?after={last}"),
                None,
            )
            .await
            .1;
        if !rest["data"].as_array().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        (rest["data"].as_array().unwrap().len(), rest["has_more"].as_bool()),
        (1, Some(false))
    );

    for (query, why) in [
        ("type=payout.exploded", "unknown type"),
        ("after=ZZZZ", "malformed cursor"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
    ] {
        let (status, problem) = api
            .send(reqwest::Method::GET, &api.merchant_key, &format!("/v1/events?{query}"), None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{why}: {problem}");
    }
    // A well-formed cursor that names no event this key can see.
    let (status, problem) = api
        .send(
            reqwest::Method::GET,
            &api.merchant_key,
            "/v1/events?after=00000000000000000000000000",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "unknown cursor: {problem}");
    let (status, _) =
        api.send(reqwest::Method::GET, &api.other_key, &format!("/v1/events/{first}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another merchant's event is not found");
    let (status, _) =
        api.send(reqwest::Method::GET, OPERATOR_KEY, &format!("/v1/events/{first}"), None).await;
    assert_eq!(status, StatusCode::OK, "the operator reads every event");

    for _ in 0..50 {
        api.deliver_all().await;
        if receiver.accepted().len() == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    let (status, deliveries) = api
        .send(
            reqwest::Method::GET,
            &api.merchant_key,
            &format!("/v1/events/{first}/deliveries"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let delivery = &deliveries["data"][0];
    assert_eq!(delivery["state"], "delivered", "{deliveries}");
    let tries = delivery["tries"].as_array().unwrap();
    assert_eq!(
        tries.iter().map(|t| t["status_code"].as_u64().unwrap()).collect::<Vec<_>>(),
        vec![500, 204]
    );

    let (status, answer) = api
        .send(
            reqwest::Method::POST,
            &api.merchant_key,
            &format!("/v1/events/{first}/redispatch"),
            None,
        )
        .await;
    assert_eq!((status, answer["redispatched"].as_u64()), (StatusCode::ACCEPTED, Some(1)));
    api.deliver_all().await;
    let ids: Vec<String> =
        receiver.accepted().into_iter().map(|r| r.webhook_id).filter(|id| id == &first).collect();
    assert_eq!(ids.len(), 2, "delivered, then once more on redispatch, with the same webhook-id");
    let (status, _) = api
        .send(
            reqwest::Method::POST,
            &api.other_key,
            &format!("/v1/events/{first}/redispatch"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Sent again by hand at most REDISPATCHES_PER_DELIVERY_MAX times in all: a loop of redispatches
    // cannot turn payoutd into a request flood. (Before, there was no limit.)
    for n in 2..=REDISPATCHES_PER_DELIVERY_MAX {
        let (_, answer) = api
            .send(
                reqwest::Method::POST,
                &api.merchant_key,
                &format!("/v1/events/{first}/redispatch"),
                None,
            )
            .await;
        assert_eq!(answer["redispatched"].as_u64(), Some(1), "redispatch {n}");
    }
    let (status, answer) = api
        .send(
            reqwest::Method::POST,
            &api.merchant_key,
            &format!("/v1/events/{first}/redispatch"),
            None,
        )
        .await;
    assert_eq!(
        (status, answer["redispatched"].as_u64()),
        (StatusCode::ACCEPTED, Some(0)),
        "past the limit nothing is sent again"
    );
}

/// Incidents are the operator's: a merchant's events API neither lists nor shows the incidents
/// about its payouts, the operator's shows them. (Before, the merchant read them: the platform's
/// wallets, losses and alarms.)
async fn a_merchant_never_reads_incident_events(db: TestDb) {
    use payoutd_engine::{IncidentSubject, NewIncident};
    let pipeline = db.pipeline();
    let api = Api::start(db, AddressPolicy::AllowPrivate).await;
    assert_eq!(api.deposit(1).await.0, StatusCode::CREATED);
    let subject = IncidentSubject {
        merchant_id: Some(payoutd_domain::MerchantId::parse(&api.merchant_id).unwrap()),
        ..IncidentSubject::default()
    };
    let incident = NewIncident::new(
        payoutd_domain::IncidentKind::Reverted,
        subject,
        "reverted: the token refused".into(),
        1,
    );
    assert!(pipeline.open_incident_once(&incident, "po_reverted").await.unwrap());
    let event = incident.event.id.as_str().to_owned();
    // On PostgreSQL a page waits for every older transaction in the cluster (other tests' too): the
    // incident's event is waited for in the operator's list, within a bound, so that the merchant's
    // list below is read once both events can be listed.
    for _ in 0..100 {
        let (status, ops) = api
            .send(reqwest::Method::GET, OPERATOR_KEY, "/v1/events?type=incident.opened", None)
            .await;
        assert_eq!(status, StatusCode::OK);
        if !ops["data"].as_array().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (status, mine) =
        api.send(reqwest::Method::GET, &api.merchant_key, "/v1/events", None).await;
    assert_eq!(status, StatusCode::OK);
    let types: Vec<&str> =
        mine["data"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, vec!["deposit.created"], "the merchant's own events only");
    let (status, filtered) = api
        .send(reqwest::Method::GET, &api.merchant_key, "/v1/events?type=incident.opened", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(filtered["data"].as_array().map(Vec::len), Some(0), "{filtered}");
    assert_eq!(
        api.send(reqwest::Method::GET, &api.merchant_key, &format!("/v1/events/{event}"), None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.send(reqwest::Method::GET, OPERATOR_KEY, &format!("/v1/events/{event}"), None).await.0,
        StatusCode::OK
    );
}

/// What the operator's key does to webhooks reaches the audit log, with the client address: its
/// endpoints (which carry incidents) created, rotated and deleted, and a redispatch of any
/// merchant's event. A merchant's own endpoints are not the operator's doing and are not in it.
/// (Before, none of these left a record.)
async fn the_operator_s_webhook_actions_are_in_the_audit_log(db: TestDb) {
    let api = Api::start(db, AddressPolicy::AllowPrivate).await;
    let receiver = Receiver::start().await;
    let body = json!({"url": format!("{}?token=kept-out", receiver.url)});
    let (status, created) =
        api.send(reqwest::Method::POST, OPERATOR_KEY, "/v1/webhook_endpoints", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/webhook_endpoints/{id}");
    let rotate = format!("{path}/rotate_secret");
    assert_eq!(
        api.send(reqwest::Method::POST, OPERATOR_KEY, &rotate, None).await.0,
        StatusCode::OK
    );
    assert_eq!(api.deposit(1).await.0, StatusCode::CREATED);
    // On PostgreSQL a page waits for every older transaction in the cluster (other tests' too).
    let mut event = None;
    for _ in 0..100 {
        let (_, events) = api.send(reqwest::Method::GET, OPERATOR_KEY, "/v1/events", None).await;
        event = events["data"][0]["id"].as_str().map(str::to_owned);
        if event.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let event = event.expect("the deposit's event is listed");
    let redispatch = format!("/v1/events/{event}/redispatch");
    let (status, _) = api.send(reqwest::Method::POST, OPERATOR_KEY, &redispatch, None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let gone = api.send(reqwest::Method::DELETE, OPERATOR_KEY, &path, None).await.0;
    assert_eq!(gone, StatusCode::NO_CONTENT);
    let mine = json!({"url": receiver.url});
    let (status, _) = api
        .send(reqwest::Method::POST, &api.merchant_key, "/v1/webhook_endpoints", Some(mine))
        .await;
    assert_eq!(status, StatusCode::CREATED);

    let audited = |action: &str, subject: &str| {
        format!(
            "SELECT count(*) FROM operator_actions WHERE action = '{action}' AND subject = '{subject}' AND actor LIKE 'api (%'"
        )
    };
    for (action, subject) in [
        ("create_webhook_endpoint", id.as_str()),
        ("rotate_webhook_secret", id.as_str()),
        ("delete_webhook_endpoint", id.as_str()),
        ("redispatch_event", event.as_str()),
    ] {
        assert_eq!(api.db.scalar_raw(&audited(action, subject)).await, 1, "{action}");
    }
    let webhook_actions = "SELECT count(*) FROM operator_actions WHERE action LIKE '%webhook%' OR action = 'redispatch_event'";
    assert_eq!(api.db.scalar_raw(webhook_actions).await, 4, "nothing for the merchant's endpoint");
    let leaked = "SELECT count(*) FROM operator_actions WHERE detail LIKE '%kept-out%'";
    assert_eq!(api.db.scalar_raw(leaked).await, 0, "a receiver's query stays out of the log");
}

both_stores!(
    the_operator_s_webhook_actions_are_in_the_audit_log,
    a_merchant_never_reads_incident_events,
    endpoints_are_created_listed_rotated_and_deleted_by_their_owner,
    bad_endpoints_are_refused_with_problems_and_change_nothing,
    events_page_forward_and_show_deliveries_and_redispatch,
);
