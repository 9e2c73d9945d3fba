//! The Stripe simulator against its documented contract: transfers, payouts, idempotency, lists, faults, auth.

use std::time::Duration;

use payoutd_provider_sim::{Fault, ProviderKind, ProviderSim, SimOptions};
use serde_json::Value;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;
const STEP_MS: u64 = 60_000;

fn transfer_params(amount: &str, group: &str) -> Vec<(&'static str, String)> {
    vec![
        ("amount", amount.to_string()),
        ("currency", "usd".to_string()),
        ("destination", payoutd_provider_sim::STRIPE_SIM_CONNECTED_ACCOUNT.to_string()),
        ("transfer_group", group.to_string()),
        ("metadata[payoutd_reference]", group.to_string()),
    ]
}

async fn post(
    sim: &ProviderSim,
    path: &str,
    key: Option<&str>,
    params: &[(&str, String)],
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut rb = reqwest::Client::new()
        .post(format!("{}{path}", sim.base_url()))
        .bearer_auth(sim.api_key())
        .form(params);
    if let Some(k) = key {
        rb = rb.header("Idempotency-Key", k);
    }
    let resp = rb.send().await.expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.json().await.expect("json body"))
}

async fn get(sim: &ProviderSim, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{}{path}", sim.base_url()))
        .bearer_auth(sim.api_key())
        .send()
        .await
        .expect("send");
    (resp.status().as_u16(), resp.json().await.expect("json body"))
}

#[tokio::test]
async fn create_replay_conflict_and_window() {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    let (status, headers, first) =
        post(&sim, "/v1/transfers", Some("k1"), &transfer_params("1100", "ref-1")).await;
    assert_eq!(status, 200, "{first}");
    let id = first["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("tr_"));
    assert_eq!(first["object"], "transfer");
    assert_eq!(first["amount"], 1100);
    assert_eq!(first["amount_reversed"], 0);
    assert_eq!(first["reversed"], false);
    assert_eq!(first["livemode"], false);
    assert_eq!(first["destination"], payoutd_provider_sim::STRIPE_SIM_CONNECTED_ACCOUNT);
    assert_eq!(first["transfer_group"], "ref-1");
    assert_eq!(first["metadata"]["payoutd_reference"], "ref-1");
    assert_eq!(first["reversals"]["object"], "list");
    assert!(first["created"].as_i64().unwrap() > 1_600_000_000);
    assert!(headers.get("idempotent-replayed").is_none());

    // The same params in another order are the same request.
    let mut reordered = transfer_params("1100", "ref-1");
    reordered.reverse();
    let (status, headers, replay) = post(&sim, "/v1/transfers", Some("k1"), &reordered).await;
    assert_eq!(status, 200);
    assert_eq!(replay["id"], id.as_str());
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(sim.created(), 1);

    let (status, _, conflict) =
        post(&sim, "/v1/transfers", Some("k1"), &transfer_params("1200", "ref-1")).await;
    assert_eq!(status, 400);
    assert_eq!(conflict["error"]["type"], "idempotency_error");
    assert!(conflict["error"]["message"].as_str().unwrap().starts_with("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than 'k1'"));

    let payout = vec![("amount", "1100".to_string()), ("currency", "usd".to_string())];
    let (status, _, other_endpoint) = post(&sim, "/v1/payouts", Some("k1"), &payout).await;
    assert_eq!(status, 400);
    assert_eq!(other_endpoint["error"]["type"], "idempotency_error");
    assert!(other_endpoint["error"]["message"].as_str().unwrap().contains("same endpoint"));
    assert_eq!(sim.created(), 1);

    // Past the window the key is forgotten and a reuse creates anew.
    sim.advance(DAY_MS + 1);
    let (status, headers, again) =
        post(&sim, "/v1/transfers", Some("k1"), &transfer_params("1100", "ref-1")).await;
    assert_eq!(status, 200);
    assert_ne!(again["id"], id.as_str());
    assert!(headers.get("idempotent-replayed").is_none());
    assert_eq!(sim.created(), 2);
    assert_eq!(sim.created_with_reference("ref-1"), 2);
    assert_eq!(sim.created_with_reference("ref-2"), 0);
}

#[tokio::test]
async fn validation_errors_are_not_saved() {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    let mut missing = transfer_params("1", "r");
    missing.remove(0);
    let (status, _, e) = post(&sim, "/v1/transfers", Some("v1"), &missing).await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert_eq!(e["error"]["code"], "parameter_missing");
    assert_eq!(e["error"]["param"], "amount");
    for (name, value, param) in [
        ("amount", "0", "amount"),
        ("amount", "1.5", "amount"),
        ("currency", "xyz", "currency"),
        ("destination", "ba_123", "destination"),
    ] {
        let mut p = transfer_params("100", "r");
        p.iter_mut().find(|(k, _)| *k == name).unwrap().1 = value.to_string();
        let (status, _, e) = post(&sim, "/v1/transfers", Some("v1"), &p).await;
        assert_eq!(status, 400, "{name}={value}");
        assert_eq!(e["error"]["param"], param);
    }
    let mut unknown = transfer_params("100", "r");
    unknown.push(("colour", "red".to_string()));
    let (status, _, e) = post(&sim, "/v1/transfers", Some("v1"), &unknown).await;
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("colour")));
    assert_eq!(sim.created(), 0);
    // The failed attempts were not saved, so the same key now works with good params.
    let (status, _, ok) =
        post(&sim, "/v1/transfers", Some("v1"), &transfer_params("100", "r")).await;
    assert_eq!(status, 200, "{ok}");
    assert_eq!(sim.created(), 1);

    let (status, _, e) =
        post(&sim, "/v1/transfers", Some("v2"), &transfer_params("1000000000001", "r")).await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["code"], "balance_insufficient");
    assert_eq!(sim.created(), 1);
}

#[tokio::test]
async fn payouts_progress_and_fail() {
    // Long steps, so a slow machine cannot move a state on behind the test's back.
    let sim = ProviderSim::start_with(
        ProviderKind::Stripe,
        SimOptions { step_ms: STEP_MS, ..SimOptions::default() },
    )
    .await;
    let params = vec![
        ("amount", "1100".to_string()),
        ("currency", "usd".to_string()),
        ("method", "standard".to_string()),
        ("metadata[payoutd_reference]", "payout-42".to_string()),
    ];
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/payouts", sim.base_url()))
        .bearer_auth(sim.api_key())
        .header("Idempotency-Key", "p1")
        .header("Stripe-Account", "acct_123")
        .form(&params)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let po: Value = resp.json().await.unwrap();
    let id = po["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("po_"));
    assert_eq!(po["object"], "payout");
    assert_eq!(po["status"], "pending");
    for field in [
        "amount",
        "arrival_date",
        "automatic",
        "created",
        "currency",
        "livemode",
        "method",
        "reconciliation_status",
        "source_type",
        "type",
    ] {
        assert!(!po[field].is_null(), "{field}");
    }
    assert_eq!(sim.created_with_reference("payout-42"), 1);
    let path = format!("/v1/payouts/{id}");
    assert_eq!(get(&sim, &path).await.1["status"], "pending");
    sim.advance(STEP_MS);
    assert_eq!(get(&sim, &path).await.1["status"], "in_transit");
    sim.advance(STEP_MS);
    assert_eq!(get(&sim, &path).await.1["status"], "paid");
    let (_, list) = get(&sim, "/v1/payouts?status=paid").await;
    assert_eq!(list["data"][0]["id"], id.as_str());
    // "Some failed payouts may initially show as paid but then change to failed."
    assert!(sim.fail(&id, "account_closed"));
    let (_, failed) = get(&sim, &path).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_code"], "account_closed");
    assert!(!sim.fail("po_nope", "x"));
    let (status, e) = get(&sim, "/v1/payouts/po_nope").await;
    assert_eq!(status, 404);
    assert_eq!(e["error"]["code"], "resource_missing");
}

#[tokio::test]
async fn lookup_list_and_reversal() {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, _, t) =
            post(&sim, "/v1/transfers", None, &transfer_params("500", &format!("g{i}"))).await;
        ids.push(t["id"].as_str().unwrap().to_string());
        sim.advance(1500);
    }
    let (status, one) = get(&sim, &format!("/v1/transfers/{}", ids[1])).await;
    assert_eq!(status, 200);
    assert_eq!(one["transfer_group"], "g1");

    let (_, page) = get(&sim, "/v1/transfers?limit=2").await;
    assert_eq!(page["object"], "list");
    assert_eq!(page["url"], "/v1/transfers");
    assert_eq!(page["has_more"], true);
    let got: Vec<&str> =
        page["data"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(got, vec![ids[2].as_str(), ids[1].as_str()]);
    let (_, next) = get(&sim, &format!("/v1/transfers?limit=2&starting_after={}", ids[1])).await;
    assert_eq!(next["has_more"], false);
    assert_eq!(next["data"].as_array().unwrap().len(), 1);
    assert_eq!(next["data"][0]["id"], ids[0].as_str());
    let (_, prev) = get(&sim, &format!("/v1/transfers?limit=1&ending_before={}", ids[0])).await;
    assert_eq!(prev["data"][0]["id"], ids[1].as_str());
    assert_eq!(prev["has_more"], true);
    let (_, grouped) = get(&sim, "/v1/transfers?transfer_group=g0").await;
    assert_eq!(grouped["data"].as_array().unwrap().len(), 1);
    assert_eq!(grouped["data"][0]["id"], ids[0].as_str());
    let future = sim.now_ms() / 1000 + 3600;
    let (_, none) = get(&sim, &format!("/v1/transfers?created[gte]={future}")).await;
    assert!(none["data"].as_array().unwrap().is_empty());
    let (status, e) = get(&sim, "/v1/transfers?limit=101").await;
    assert_eq!((status, e["error"]["param"].as_str()), (400, Some("limit")));

    assert!(sim.fail(&ids[0], "destination_closed"));
    let (_, reversed) = get(&sim, &format!("/v1/transfers/{}", ids[0])).await;
    assert_eq!(reversed["reversed"], true);
    assert_eq!(reversed["amount_reversed"], 500);
    assert_eq!(reversed["reversals"]["data"][0]["object"], "transfer_reversal");
}

#[tokio::test]
async fn server_error_after_create_is_replayed() {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    sim.fault_next_create(Fault::ServerErrorAfterCreate);
    let (status, _, e) =
        post(&sim, "/v1/transfers", Some("s1"), &transfer_params("700", "ref-500")).await;
    assert_eq!(status, 500);
    assert_eq!(e["error"]["type"], "api_error");
    assert_eq!(sim.created(), 1);
    // "Retries with the same key return the saved response, including 500 errors."
    let (status, headers, e) =
        post(&sim, "/v1/transfers", Some("s1"), &transfer_params("700", "ref-500")).await;
    assert_eq!(status, 500);
    assert_eq!(e["error"]["type"], "api_error");
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(sim.created(), 1);
    // The transfer exists and is found by its group.
    let (_, found) = get(&sim, "/v1/transfers?transfer_group=ref-500").await;
    assert_eq!(found["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn server_error_before_create_creates_nothing() {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    let (status, _, _) =
        post(&sim, "/v1/transfers", Some("b1"), &transfer_params("700", "r")).await;
    assert_eq!(status, 500);
    assert_eq!(sim.created(), 0);
    let (status, _, _) =
        post(&sim, "/v1/transfers", Some("b1"), &transfer_params("700", "r")).await;
    assert_eq!(status, 200);
    assert_eq!(sim.created(), 1);
}

#[tokio::test]
async fn delay_and_reset_after_create() {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    sim.fault_next_create(Fault::DelayAfterCreate(2_000));
    let client = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let err = client
        .post(format!("{}/v1/transfers", sim.base_url()))
        .bearer_auth(sim.api_key())
        .header("Idempotency-Key", "d1")
        .form(&transfer_params("900", "ref-d"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(sim.created(), 1);
    let (status, headers, replay) =
        post(&sim, "/v1/transfers", Some("d1"), &transfer_params("900", "ref-d")).await;
    assert_eq!(status, 200);
    assert_eq!(headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(replay["transfer_group"], "ref-d");

    sim.fault_next_create(Fault::ResetAfterCreate);
    let err = reqwest::Client::new()
        .post(format!("{}/v1/transfers", sim.base_url()))
        .bearer_auth(sim.api_key())
        .header("Idempotency-Key", "r1")
        .form(&transfer_params("900", "ref-r"))
        .send()
        .await
        .unwrap_err();
    assert!(!err.is_timeout(), "{err}");
    assert_eq!(sim.created(), 2);
    let (status, _, replay) =
        post(&sim, "/v1/transfers", Some("r1"), &transfer_params("900", "ref-r")).await;
    assert_eq!(status, 200);
    assert_eq!(replay["transfer_group"], "ref-r");
    assert_eq!(sim.created(), 2);
    assert_eq!(sim.created_with_reference("ref-r"), 1);
}

#[tokio::test]
async fn auth_requests_log_and_control_endpoints() {
    let sim = ProviderSim::start(ProviderKind::Stripe).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/transfers", sim.base_url());
    let resp = client.post(&url).form(&transfer_params("1", "r")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    let resp = client.get(&url).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = client.get(&url).basic_auth(sim.api_key(), Some("")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(sim.created(), 0);

    post(&sim, "/v1/transfers", Some("log-1"), &transfer_params("5", "ref-log")).await;
    let last = sim.requests().pop().unwrap();
    assert_eq!(last.method, "POST");
    assert_eq!(last.path, "/v1/transfers");
    assert!(last.body.contains("transfer_group=ref-log"));
    assert!(last.headers.iter().any(|(n, v)| n == "idempotency-key" && v == "log-1"));
    assert!(!last.headers.iter().any(|(n, _)| n == "authorization"));

    let base = sim.base_url();
    let r = client
        .post(format!("{base}/_sim/fault"))
        .body(r#"{"fault":"server_error_before_create"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (status, _, _) = post(&sim, "/v1/transfers", None, &transfer_params("5", "ref-log")).await;
    assert_eq!(status, 500);
    let before = sim.now_ms();
    let r =
        client.post(format!("{base}/_sim/advance")).body(r#"{"ms":60000}"#).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(sim.now_ms() >= before + 60_000);
    let stats: Value =
        client.get(format!("{base}/_sim/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(stats["created"], 1);
    assert_eq!(stats["by_reference"]["ref-log"], 1);
    let r = client
        .post(format!("{base}/_sim/fault"))
        .body(r#"{"fault":"nonsense"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}
