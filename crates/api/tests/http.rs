//! The intake API over real HTTP, against a fresh PostgreSQL database and a fresh SQLite file per test.

use std::sync::Arc;

use payoutd_domain::{ApiKey, EndpointOwner, EventType};
use payoutd_engine::webhook_store::EventQuery;
use payoutd_testkit::TestDb;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::*;

/// Reads of the events page before a test gives up waiting for its event to be visible (50 ms apart).
const EVENT_VISIBLE_TRIES_MAX: u32 = 200;

async fn sixty_four_concurrent_identical_posts_create_one_payout(db: TestDb) {
    let api = Arc::new(Api::start(db).await);
    let m = Arc::new(api.merchant("acme", 1).await);
    assert_eq!(api.deposit(&m, "1000", "fund-1").await.status(), StatusCode::CREATED);
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (api, m) = (api.clone(), m.clone());
            tokio::spawn(async move {
                let r = api.post_payout(&m, payout("withdrawal-0001", "250", DEST_A)).await;
                let replayed =
                    r.headers().get("idempotent-replayed").map(|v| v.to_str().unwrap().to_owned());
                let status = r.status();
                let body: Value = r.json().await.unwrap();
                (status, replayed, body["id"].as_str().unwrap().to_owned())
            })
        })
        .collect();
    let results: Vec<_> =
        futures::future::join_all(tasks).await.into_iter().map(Result::unwrap).collect();
    let created: Vec<_> = results.iter().filter(|r| r.0 == StatusCode::CREATED).collect();
    assert_eq!(created.len(), 1, "exactly one 201");
    assert!(created[0].1.is_none());
    let replays =
        results.iter().filter(|r| r.0 == StatusCode::OK && r.1.as_deref() == Some("true")).count();
    assert_eq!(replays, 63, "the other 63 are replays marked Idempotent-Replayed: true");
    assert!(results.iter().all(|r| r.2 == created[0].2), "all answers carry the same payout");
    assert_eq!(api.count("payouts").await, 1);
    assert_eq!(
        api.db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'hold'").await,
        1,
        "one hold"
    );
    assert_eq!(
        api.db.scalar_raw("SELECT count(*) FROM events WHERE type = 'payout.created'").await,
        1,
        "one outbox event"
    );
    assert_eq!(api.balance(&m).await, ("750".into(), "250".into()));
}

async fn same_key_with_other_amount_or_destination_is_422_and_changes_nothing(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("acme", 1).await;
    api.deposit(&m, "1000", "fund-1").await;
    let first: Value =
        api.post_payout(&m, payout("withdrawal-0002", "100", DEST_A)).await.json().await.unwrap();
    for other in
        [payout("withdrawal-0002", "101", DEST_A), payout("withdrawal-0002", "100", DEST_B)]
    {
        let (status, slug) = problem(api.post_payout(&m, other).await).await;
        assert_eq!(
            (status, slug.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "idempotency-key-reused")
        );
    }
    assert_eq!(api.count("payouts").await, 1);
    assert_eq!(api.balance(&m).await, ("900".into(), "100".into()));
    let again: Value = api
        .get(&m, &format!("/v1/payouts/{}", first["id"].as_str().unwrap()))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (again["amount"].as_str(), again["destination"].as_str()),
        (Some("100"), Some(DEST_A))
    );
}

/// A payout's events carry exactly the API's payout object (one shape, built once), metadata and
/// all: a webhook consumer and an API client read the same fields.
async fn a_payouts_event_carries_the_api_payout_object(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("evented", 1).await;
    api.deposit(&m, "1000", "fund-evented").await;
    let request = json!({"idempotency_key": "withdrawal-evented-1", "asset": USDC, "amount": "7", "destination": DEST_A, "metadata": {"order": "A-17", "n": 3}});
    let created: Value = api.post_payout(&m, request).await.json().await.unwrap();
    let query = EventQuery {
        owner: EndpointOwner::Merchant(m.id.clone()),
        event_type: Some(EventType::PayoutCreated),
        after: None,
        limit: 10,
    };
    // On PostgreSQL an events page holds back events newer than the oldest transaction still open
    // in the cluster (another test's), so the event is waited for, within a bound.
    let mut events = Vec::new();
    for _ in 0..EVENT_VISIBLE_TRIES_MAX {
        events = api.db.webhooks().events(&query).await.unwrap();
        if !events.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(events.len(), 1, "one payout.created event");
    let payload: Value = serde_json::from_str(&events[0].payload_json).unwrap();
    assert_eq!(payload, created, "the event's payout is the API's payout object");
    assert_eq!(payload["metadata"], json!({"n": 3, "order": "A-17"}));
}

async fn two_full_balance_withdrawals_race_and_exactly_one_wins(db: TestDb) {
    let api = Arc::new(Api::start(db).await);
    let m = Arc::new(api.merchant("acme", 1).await);
    api.deposit(&m, "1000", "fund-1").await;
    let tasks: Vec<_> = ["race-key-aaaa", "race-key-bbbb"]
        .into_iter()
        .map(|key| {
            let (api, m) = (api.clone(), m.clone());
            tokio::spawn(
                async move { api.post_payout(&m, payout(key, "1000", DEST_A)).await.status() },
            )
        })
        .collect();
    let mut statuses: Vec<_> =
        futures::future::join_all(tasks).await.into_iter().map(Result::unwrap).collect();
    statuses.sort();
    assert_eq!(statuses, vec![StatusCode::CREATED, StatusCode::UNPROCESSABLE_ENTITY]);
    assert_eq!(api.balance(&m).await, ("0".into(), "1000".into()));
    let audit = api.engine.store().audit_ledger().await.unwrap();
    assert!(audit.is_clean(), "ledger sums to zero and matches balances: {audit:?}");
}

async fn insufficient_funds_is_422_without_trace_then_same_key_succeeds(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("acme", 1).await;
    let (status, slug) =
        problem(api.post_payout(&m, payout("withdrawal-0003", "10", DEST_A)).await).await;
    assert_eq!((status, slug.as_str()), (StatusCode::UNPROCESSABLE_ENTITY, "insufficient-funds"));
    assert_eq!((api.count("payouts").await, api.count("journals").await), (0, 0));
    let lookup: Value =
        api.get(&m, "/v1/payouts?idempotency_key=withdrawal-0003").await.json().await.unwrap();
    assert_eq!(lookup["data"].as_array().unwrap().len(), 0, "query-before-retry finds nothing");
    assert_eq!(api.deposit(&m, "10", "fund-1").await.status(), StatusCode::CREATED);
    let replay = api.deposit(&m, "10", "fund-1").await;
    assert_eq!(replay.status(), StatusCode::OK);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let created = api.post_payout(&m, payout("withdrawal-0003", "10", DEST_A)).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let body: Value = created.json().await.unwrap();
    assert_eq!((body["status"].as_str(), body["amount"].as_str()), (Some("requested"), Some("10")));
    let lookup: Value =
        api.get(&m, "/v1/payouts?idempotency_key=withdrawal-0003").await.json().await.unwrap();
    assert_eq!(lookup["data"][0]["id"], body["id"], "query-before-retry now finds it");
}

async fn merchants_never_see_or_collide_with_each_other(db: TestDb) {
    let api = Api::start(db).await;
    let a = api.merchant("acme", 1).await;
    let b = api.merchant("globex", 2).await;
    api.deposit(&a, "100", "fund-a").await;
    api.deposit(&b, "100", "fund-b").await;
    let pa: Value =
        api.post_payout(&a, payout("same-key-001", "10", DEST_A)).await.json().await.unwrap();
    let rb = api.post_payout(&b, payout("same-key-001", "10", DEST_A)).await;
    assert_eq!(rb.status(), StatusCode::CREATED, "B's identical key is B's own");
    let pb: Value = rb.json().await.unwrap();
    assert_ne!(pa["id"], pb["id"]);
    for (who, other) in [(&a, &pb), (&b, &pa)] {
        let id = other["id"].as_str().unwrap();
        assert_eq!(
            problem(api.get(who, &format!("/v1/payouts/{id}")).await).await.0,
            StatusCode::NOT_FOUND
        );
        let cancel = api
            .http
            .post(format!("{}/v1/payouts/{id}/cancel", api.base))
            .bearer_auth(&who.key)
            .send()
            .await
            .unwrap();
        assert_eq!(problem(cancel).await.0, StatusCode::NOT_FOUND);
        let list: Value =
            api.get(who, "/v1/payouts?idempotency_key=same-key-001").await.json().await.unwrap();
        assert_eq!(list["data"].as_array().unwrap().len(), 1);
        assert_ne!(list["data"][0]["id"], other["id"]);
    }
    assert_eq!(api.balance(&a).await, ("90".into(), "10".into()));
    assert_eq!(api.balance(&b).await, ("90".into(), "10".into()));
    // A merchant key is not an operator key.
    let forged = api
        .http
        .post(format!("{}/v1/deposits", api.base))
        .bearer_auth(&a.key)
        .json(&json!({"merchant_id": a.id.as_str(), "asset": USDC, "amount": "1000000", "idempotency_key": "self-credit"}))
        .send()
        .await
        .unwrap();
    assert_eq!(problem(forged).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(api.balance(&a).await, ("90".into(), "10".into()));
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn bad_input_gets_a_clear_problem_and_writes_nothing(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("acme", 1).await;
    api.deposit(&m, "1000", "fund-1").await;
    let before =
        (api.count("payouts").await, api.count("journals").await, api.count("events").await);
    let overflow = "115792089237316195423570985008687907853269984665640564039457584007913129639936";
    let url = format!("{}/v1/payouts", api.base);
    let json_case = |body: Value| (body.to_string().into_bytes(), vec![]);
    // (what is wrong, (body, extra headers), the status answered, the problem's type)
    type Case<'a> = (&'a str, (Vec<u8>, Vec<(&'a str, &'a [u8])>), StatusCode, &'a str);
    let cases: Vec<Case> = vec![
        (
            "malformed JSON",
            (b"{\"asset\": ".to_vec(), vec![]),
            StatusCode::BAD_REQUEST,
            "malformed-json",
        ),
        (
            "oversized body",
            (format!("{{\"asset\":\"{}\"}}", "x".repeat(70_000)).into_bytes(), vec![]),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
        ),
        (
            "unknown field",
            json_case(
                json!({"asset": USDC, "amount": "1", "destination": DEST_A, "idempotency_key": "k-unknown-1", "amuont": "2"}),
            ),
            StatusCode::BAD_REQUEST,
            "malformed-json",
        ),
        (
            "negative amount",
            json_case(payout("k-neg-00001", "-1", DEST_A)),
            StatusCode::BAD_REQUEST,
            "invalid-amount",
        ),
        (
            "decimal amount",
            json_case(payout("k-dec-00001", "1.5", DEST_A)),
            StatusCode::BAD_REQUEST,
            "invalid-amount",
        ),
        (
            "exponent amount",
            json_case(payout("k-exp-00001", "1e6", DEST_A)),
            StatusCode::BAD_REQUEST,
            "invalid-amount",
        ),
        (
            "plus sign",
            json_case(payout("k-plus-0001", "+5", DEST_A)),
            StatusCode::BAD_REQUEST,
            "invalid-amount",
        ),
        (
            "zero amount",
            json_case(payout("k-zero-0001", "0", DEST_A)),
            StatusCode::BAD_REQUEST,
            "invalid-amount",
        ),
        (
            "overflowing amount",
            json_case(payout("k-ovf-00001", overflow, DEST_A)),
            StatusCode::BAD_REQUEST,
            "invalid-amount",
        ),
        (
            "number amount",
            json_case(
                json!({"asset": USDC, "amount": 5, "destination": DEST_A, "idempotency_key": "k-num-00001"}),
            ),
            StatusCode::BAD_REQUEST,
            "invalid-amount",
        ),
        (
            "bad address",
            json_case(payout("k-addr-0001", "1", "0x1234")),
            StatusCode::BAD_REQUEST,
            "invalid-destination",
        ),
        (
            "wrong checksum",
            json_case(payout("k-csum-0001", "1", "0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed")),
            StatusCode::BAD_REQUEST,
            "invalid-destination",
        ),
        (
            "unknown asset",
            json_case(
                json!({"asset": "evm:1/DOGE", "amount": "1", "destination": DEST_A, "idempotency_key": "k-asset-001"}),
            ),
            StatusCode::BAD_REQUEST,
            "unknown-asset",
        ),
        (
            "key too short",
            json_case(payout("short", "1", DEST_A)),
            StatusCode::BAD_REQUEST,
            "idempotency-key-invalid",
        ),
        (
            "key too long",
            json_case(payout(&"k".repeat(129), "1", DEST_A)),
            StatusCode::BAD_REQUEST,
            "idempotency-key-invalid",
        ),
        (
            "key not ASCII",
            json_case(payout("ключ-ключ-ключ", "1", DEST_A)),
            StatusCode::BAD_REQUEST,
            "idempotency-key-invalid",
        ),
        (
            "key header not ASCII",
            (
                json!({"asset": USDC, "amount": "1", "destination": DEST_A})
                    .to_string()
                    .into_bytes(),
                vec![("idempotency-key", "ключ-ключ".as_bytes())],
            ),
            StatusCode::BAD_REQUEST,
            "idempotency-key-invalid",
        ),
        (
            "key missing",
            json_case(json!({"asset": USDC, "amount": "1", "destination": DEST_A})),
            StatusCode::BAD_REQUEST,
            "idempotency-key-missing",
        ),
        (
            "two different keys",
            (
                payout("k-body-0001", "1", DEST_A).to_string().into_bytes(),
                vec![("idempotency-key", b"k-head-0001".as_slice())],
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key-conflict",
        ),
    ];
    for (name, (body, headers), want_status, want_slug) in cases {
        let mut request = api
            .http
            .post(&url)
            .bearer_auth(&m.key)
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            request = request.header(k, reqwest::header::HeaderValue::from_bytes(v).unwrap());
        }
        let (status, slug) = problem(request.send().await.unwrap()).await;
        assert_eq!((status, slug.as_str()), (want_status, want_slug), "case: {name}");
    }
    let body = payout("k-auth-0001", "1", DEST_A);
    let no_auth = api.http.post(&url).json(&body).send().await.unwrap();
    assert_eq!(problem(no_auth).await, (StatusCode::UNAUTHORIZED, "unauthorized".to_owned()));
    let wrong = api.http.post(&url).bearer_auth("pk_0000").json(&body).send().await.unwrap();
    assert_eq!(problem(wrong).await, (StatusCode::UNAUTHORIZED, "unauthorized".to_owned()));
    // An unknown key is told so before anything about the body.
    let bad_body = json!({"asset": "nope", "amount": "-1", "destination": "x"});
    let wrong = api.http.post(&url).bearer_auth("pk_0000").json(&bad_body).send().await.unwrap();
    assert_eq!(problem(wrong).await, (StatusCode::UNAUTHORIZED, "unauthorized".to_owned()));
    let after =
        (api.count("payouts").await, api.count("journals").await, api.count("events").await);
    assert_eq!(before, after, "no refused request wrote anything");
    assert_eq!(api.balance(&m).await, ("1000".into(), "0".into()));
    // The same key sent in every accepted form is one key.
    let ok = api
        .http
        .post(&url)
        .bearer_auth(&m.key)
        .header("idempotency-key", "\"k-all-forms-1\"")
        .header("x-idempotency-key", "k-all-forms-1")
        .json(&payout("k-all-forms-1", "1", DEST_A))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED);
}

async fn cancel_releases_the_hold_once_and_repeats_harmlessly(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("acme", 1).await;
    api.deposit(&m, "100", "fund-1").await;
    let p: Value =
        api.post_payout(&m, payout("withdrawal-0004", "60", DEST_A)).await.json().await.unwrap();
    let url = format!("{}/v1/payouts/{}/cancel", api.base, p["id"].as_str().unwrap());
    let first = api.http.post(&url).bearer_auth(&m.key).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let body: Value = first.json().await.unwrap();
    assert_eq!(body["status"], "canceled");
    let second = api.http.post(&url).bearer_auth(&m.key).send().await.unwrap();
    assert_eq!(
        (second.status(), second.headers()["idempotent-replayed"].to_str().unwrap()),
        (StatusCode::OK, "true")
    );
    assert_eq!(api.balance(&m).await, ("100".into(), "0".into()));
    assert_eq!(api.db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'release'").await, 1);
    // The key stays taken forever: a retry of the canceled request gets the canceled payout back.
    let retry = api.post_payout(&m, payout("withdrawal-0004", "60", DEST_A)).await;
    assert_eq!(retry.status(), StatusCode::OK);
    assert_eq!(retry.json::<Value>().await.unwrap()["status"], "canceled");
}

async fn listing_paginates_and_service_endpoints_answer(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("acme", 1).await;
    api.deposit(&m, "100", "fund-1").await;
    for i in 0..5 {
        assert_eq!(
            api.post_payout(&m, payout(&format!("list-key-{i:03}"), "1", DEST_A)).await.status(),
            StatusCode::CREATED
        );
    }
    let page1: Value = api.get(&m, "/v1/payouts?limit=3").await.json().await.unwrap();
    assert_eq!(
        (page1["data"].as_array().unwrap().len(), page1["has_more"].as_bool()),
        (3, Some(true))
    );
    let cursor = page1["next_cursor"].as_str().unwrap();
    let page2: Value =
        api.get(&m, &format!("/v1/payouts?limit=3&cursor={cursor}")).await.json().await.unwrap();
    assert_eq!(
        (page2["data"].as_array().unwrap().len(), page2["has_more"].as_bool()),
        (2, Some(false))
    );
    assert_eq!(page2["data"][1]["idempotency_key"], "list-key-000", "oldest last");
    assert_eq!(problem(api.get(&m, "/v1/payouts?limit=0").await).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(
        problem(api.get(&m, "/v1/payouts?status=teleported").await).await.0,
        StatusCode::BAD_REQUEST
    );
    let openapi: Value = api
        .http
        .get(format!("{}/openapi.json", api.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in [
        "/v1/payouts",
        "/v1/payouts/{id}",
        "/v1/payouts/{id}/cancel",
        "/v1/balances",
        "/v1/deposits",
    ] {
        assert!(openapi["paths"].get(path).is_some(), "openapi documents {path}");
    }
    assert!(openapi["components"]["schemas"]["CreatePayoutBody"].is_object());
    assert_eq!(
        api.http.get(format!("{}/healthz", api.base)).send().await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        api.http.get(format!("{}/readyz", api.base)).send().await.unwrap().status(),
        StatusCode::OK
    );
    let metrics = api.scrape(METRICS_TOKEN).await.text().await.unwrap();
    assert!(metrics.contains("payoutd_payouts_created_total"), "{metrics}");
    assert!(metrics.contains("payoutd_payouts{status=\"requested\"}"), "{metrics}");
}

/// `/metrics` answers only its own token: not anonymous callers, not a merchant's key, not the
/// operator's key (whatever scrapes must not hold it). Scrapes read the store's counts at most once
/// per interval, so a loop of scrapes adds no database load: a payout created between two close
/// scrapes shows in neither. (Before, `/metrics` was anonymous and ran a `GROUP BY` per scrape.)
async fn metrics_answer_their_own_token_read_live_counts_once_per_interval_and_count_ends(
    db: TestDb,
) {
    let api = Api::start(db).await;
    let m = api.merchant("scraped", 9).await;
    for refused in
        [None, Some(m.key.as_str()), Some(OPERATOR_KEY), Some("metrics_token_wrong_456789abcdef")]
    {
        let mut request = api.http.get(format!("{}/metrics", api.base));
        if let Some(token) = refused {
            request = request.bearer_auth(token);
        }
        let (status, body) = problem(request.send().await.unwrap()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused:?}: {body}");
    }
    let first = api.scrape(METRICS_TOKEN).await.text().await.unwrap();
    assert!(first.contains("payoutd_payouts{status=\"requested\"} 0"), "{first}");
    assert_eq!(api.deposit(&m, "100", "deposit-scraped-0001").await.status(), StatusCode::CREATED);
    let created = api.post_payout(&m, json!({"idempotency_key": "withdrawal-scraped-1", "asset": USDC, "amount": "5", "destination": DEST_A})).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let second = api.scrape(METRICS_TOKEN).await.text().await.unwrap();
    assert!(
        second.contains("payoutd_payouts{status=\"requested\"} 0"),
        "read again within the interval: {second}"
    );
    // Another router in the same process, over another store, shows its own counts and leaves
    // this one's alone (before, both wrote the process-wide recorder's gauges).
    let other = Api::start(payoutd_testkit::db::fresh_sqlite().await).await;
    let o = other.merchant("scraped-elsewhere", 10).await;
    assert_eq!(
        other.deposit(&o, "100", "deposit-elsewhere-0001").await.status(),
        StatusCode::CREATED
    );
    let elsewhere = json!({"idempotency_key": "withdrawal-elsewhere-1", "asset": USDC, "amount": "5", "destination": DEST_A});
    assert_eq!(other.post_payout(&o, elsewhere).await.status(), StatusCode::CREATED);
    let other_text = other.scrape(METRICS_TOKEN).await.text().await.unwrap();
    assert!(other_text.contains("payoutd_payouts{status=\"requested\"} 1"), "{other_text}");
    let third = api.scrape(METRICS_TOKEN).await.text().await.unwrap();
    assert!(
        third.contains("payoutd_payouts{status=\"requested\"} 0"),
        "its own store's counts: {third}"
    );
    // Final states are never counted from the table (a read that grows with the history): they are
    // counters kept as the work is done. (Before, every status was a `GROUP BY` over all payouts.)
    let id = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    assert!(
        api.http
            .post(format!("{}/v1/payouts/{id}/cancel", api.base))
            .bearer_auth(&m.key)
            .send()
            .await
            .unwrap()
            .status()
            .is_success()
    );
    let fourth = api.scrape(METRICS_TOKEN).await.text().await.unwrap();
    for ended in ["paid", "failed", "canceled", "rejected"] {
        assert!(
            !fourth.contains(&format!("payoutd_payouts{{status=\"{ended}\"}}")),
            "{ended} is no table count: {fourth}"
        );
    }
    let canceled = fourth
        .lines()
        .find_map(|line| line.strip_prefix("payoutd_payouts_canceled_total "))
        .map(|n| n.parse::<f64>().unwrap());
    assert!(canceled.is_some_and(|n| n >= 1.0), "the cancel is counted as it happens: {fourth}");
}

/// What the operator key does over the API reaches the audit log, once each, naming the API and
/// the client's address: a deposit (not its replay), a key created, a key revoked. (Before, only
/// the dashboard's actions were audited.)
async fn operator_actions_over_the_api_reach_the_audit_log(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("audited", 12).await;
    for _ in 0..2 {
        assert!(api.deposit(&m, "250", "deposit-audited-0001").await.status().is_success());
    }
    let created: Value = api
        .http
        .post(format!("{}/v1/merchants/{}/api_keys", api.base, m.id))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key_id = created["id"].as_str().unwrap();
    let revoked = api
        .http
        .delete(format!("{}/v1/api_keys/{key_id}", api.base))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    // The revoked key creates nothing and replays nothing.
    let key = created["api_key"].as_str().unwrap();
    let url = format!("{}/v1/payouts", api.base);
    let first = api.http.post(&url).bearer_auth(&m.key).json(&payout("k-revoked-1", "1", DEST_A));
    assert_eq!(first.send().await.unwrap().status(), StatusCode::CREATED);
    for idempotency_key in ["k-revoked-1", "k-revoked-2"] {
        let body = payout(idempotency_key, "1", DEST_A);
        let refused = api.http.post(&url).bearer_auth(key).json(&body).send().await.unwrap();
        let answer = problem(refused).await;
        assert_eq!(
            answer,
            (StatusCode::UNAUTHORIZED, "unauthorized".to_owned()),
            "{idempotency_key}"
        );
    }
    let audited = |action: &str, subject: &str| {
        format!(
            "SELECT count(*) FROM operator_actions WHERE action = '{action}' AND subject = '{subject}' AND actor = 'api (127.0.0.1)'"
        )
    };
    assert_eq!(
        api.db.scalar_raw(&audited("deposit", m.id.as_str())).await,
        1,
        "the deposit, not its replay"
    );
    assert_eq!(api.db.scalar_raw(&audited("create_api_key", m.id.as_str())).await, 1);
    assert_eq!(api.db.scalar_raw(&audited("revoke_api_key", key_id)).await, 1);
}

/// With a deposit key configured, only it credits deposits: the operator key (used daily by
/// people) is refused, and the deposit key opens no other operator endpoint. (Before, the one
/// operator key could credit any merchant.)
async fn with_a_deposit_key_only_it_credits_deposits(db: TestDb) {
    let api = Api::start_with_state(db, |mut state| {
        state.deposit_key_hash = Some(ApiKey::presented(DEPOSIT_KEY).hash());
        state
    })
    .await;
    let m = api.merchant("funded", 13).await;
    let deposit = |key: &'static str, idempotency_key: &'static str| {
        let body = json!({"merchant_id": m.id.as_str(), "asset": USDC, "amount": "500", "idempotency_key": idempotency_key});
        api.http.post(format!("{}/v1/deposits", api.base)).bearer_auth(key).json(&body).send()
    };
    assert_eq!(
        problem(deposit(OPERATOR_KEY, "deposit-by-operator-1").await.unwrap()).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        deposit(DEPOSIT_KEY, "deposit-by-treasury-1").await.unwrap().status(),
        StatusCode::CREATED
    );
    let incidents = api
        .http
        .get(format!("{}/v1/incidents", api.base))
        .bearer_auth(DEPOSIT_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(incidents.status(), StatusCode::UNAUTHORIZED, "the deposit key is no operator key");
    let balances: Value = api.get(&m, "/v1/balances").await.json().await.unwrap();
    assert!(balances.to_string().contains("\"available\":\"500\""), "credited once: {balances}");
}

payoutd_testkit::both_stores!(
    with_a_deposit_key_only_it_credits_deposits,
    operator_actions_over_the_api_reach_the_audit_log,
    metrics_answer_their_own_token_read_live_counts_once_per_interval_and_count_ends,
    sixty_four_concurrent_identical_posts_create_one_payout,
    same_key_with_other_amount_or_destination_is_422_and_changes_nothing,
    a_payouts_event_carries_the_api_payout_object,
    two_full_balance_withdrawals_race_and_exactly_one_wins,
    insufficient_funds_is_422_without_trace_then_same_key_succeeds,
    merchants_never_see_or_collide_with_each_other,
    bad_input_gets_a_clear_problem_and_writes_nothing,
    cancel_releases_the_hold_once_and_repeats_harmlessly,
    listing_paginates_and_service_endpoints_answer,
);
