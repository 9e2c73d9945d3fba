//! The Coinbase CDP v2 transfers simulator against its documented contract.

use std::time::Duration;

use payoutd_provider_sim::{Fault, ProviderKind, ProviderSim, SimOptions};
use serde_json::{Value, json};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;
const STEP_MS: u64 = 60_000;
const ACCOUNT: &str = "account_af2937b0-9846-4fe7-bfe9-ccc22d935114";

fn body(amount: &str, reference: &str) -> Value {
    json!({"source": {"accountId": ACCOUNT, "asset": "usdc"},
        "target": {"address": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "network": "base", "asset": "usdc"},
        "amount": amount, "asset": "usdc", "amountType": "target", "execute": true,
        "metadata": {"payoutd_reference": reference}})
}

fn key() -> String {
    uuid::Uuid::new_v4().to_string()
}

async fn create(sim: &ProviderSim, key: Option<&str>, body: &Value) -> (u16, Value) {
    let mut rb = reqwest::Client::new()
        .post(format!("{}/platform/v2/transfers", sim.base_url()))
        .bearer_auth(sim.coinbase_token("POST", "/platform/v2/transfers"))
        .json(body);
    if let Some(k) = key {
        rb = rb.header("X-Idempotency-Key", k);
    }
    let resp = rb.send().await.expect("send");
    (resp.status().as_u16(), resp.json().await.expect("json"))
}

async fn get(sim: &ProviderSim, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{}/platform/v2{path}", sim.base_url()))
        .bearer_auth(sim.coinbase_token(
            "GET",
            &format!("/platform/v2{}", path.split('?').next().unwrap_or(path)),
        ))
        .send()
        .await
        .expect("send");
    (resp.status().as_u16(), resp.json().await.expect("json"))
}

#[tokio::test]
async fn create_replay_conflict_window() {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let k = key();
    let (status, first) = create(&sim, Some(&k), &body("12.34", "ref-1")).await;
    assert_eq!(status, 200, "{first}");
    let id = first["transferId"].as_str().unwrap().to_string();
    assert!(id.starts_with("transfer_") && id.len() == "transfer_".len() + 36);
    assert_eq!(first["status"], "quoted", "a create answers quoted first");
    assert_eq!(first["targetAmount"], "12.34");
    assert_eq!(first["fees"], json!([]));
    assert_eq!(first["metadata"]["payoutd_reference"], "ref-1");
    assert!(first["createdAt"].as_str().unwrap().ends_with('Z'));

    let (status, replay) = create(&sim, Some(&k), &body("12.34", "ref-1")).await;
    assert_eq!(status, 200);
    assert_eq!(replay, first);
    assert_eq!(sim.created(), 1);
    let (_, read) = get(&sim, &format!("/transfers/{id}")).await;
    assert_eq!(read["status"], "processing", "executed: processing once read");

    let (status, e) = create(&sim, Some(&k), &body("99", "ref-1")).await;
    assert_eq!(status, 422);
    assert_eq!(e["errorType"], "idempotency_error");
    assert_eq!(
        e["errorMessage"],
        format!(
            "Idempotency key '{k}' was already used with a different request payload. Please try again with a new idempotency key."
        )
    );
    assert_eq!(sim.created(), 1);

    sim.advance(DAY_MS + 1);
    let (status, again) = create(&sim, Some(&k), &body("12.34", "ref-1")).await;
    assert_eq!(status, 200);
    assert_ne!(again["transferId"], id.as_str());
    assert_eq!(sim.created(), 2);
    assert_eq!(sim.created_with_reference("ref-1"), 2);
}

#[tokio::test]
async fn validation() {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let (status, e) = create(&sim, Some("not-a-uuid"), &body("1", "r")).await;
    assert_eq!((status, e["errorType"].as_str()), (400, Some("invalid_request")));
    let v1 = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"; // a v1 UUID
    assert_eq!(create(&sim, Some(v1), &body("1", "r")).await.0, 400);
    let mut b = body("0", "r");
    assert_eq!(create(&sim, Some(&key()), &b).await.1["errorType"], "transfer_amount_invalid");
    b["amount"] = json!("1");
    b["target"]["address"] = json!("0x123");
    assert_eq!(
        create(&sim, Some(&key()), &b).await.1["errorType"],
        "target_onchain_address_invalid"
    );
    let mut b = body("1", "r");
    b.as_object_mut().unwrap().remove("execute");
    assert_eq!(create(&sim, Some(&key()), &b).await.1["errorType"], "invalid_request");
    let mut b = body("1", "r");
    b["metadata"] =
        json!((0..11).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>());
    assert_eq!(create(&sim, Some(&key()), &b).await.1["errorType"], "metadata_too_many_entries");
    assert_eq!(sim.created(), 0);
    // Without a key every request creates.
    assert_eq!(create(&sim, None, &body("1", "r")).await.0, 200);
    assert_eq!(create(&sim, None, &body("1", "r")).await.0, 200);
    assert_eq!(sim.created(), 2);
}

#[tokio::test]
async fn progression_lookup_fail_and_list() {
    // Long steps, so a slow machine cannot move a state on behind the test's back.
    let sim = ProviderSim::start_with(
        ProviderKind::Coinbase,
        SimOptions { step_ms: STEP_MS, ..SimOptions::default() },
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, t) = create(&sim, Some(&key()), &body("5", &format!("ref-{i}"))).await;
        ids.push(t["transferId"].as_str().unwrap().to_string());
        sim.advance(10);
    }
    let (status, t) = get(&sim, &format!("/transfers/{}", ids[0])).await;
    assert_eq!(status, 200);
    assert_eq!(t["status"], "processing");
    assert!(t.get("completedAt").is_none());
    sim.advance(STEP_MS);
    let (_, t) = get(&sim, &format!("/transfers/{}", ids[0])).await;
    assert_eq!(t["status"], "completed");
    assert!(t["completedAt"].is_string());
    let tx = &t["details"]["onchainTransactions"][0];
    assert_eq!(tx["network"], "base");
    assert_eq!(tx["transactionHash"].as_str().unwrap().len(), 66);

    assert!(sim.fail(&ids[1], "insufficient_liquidity"));
    let (_, f) = get(&sim, &format!("/transfers/{}", ids[1])).await;
    assert_eq!(f["status"], "failed");
    assert_eq!(f["failureReason"], "insufficient_liquidity");

    let missing = format!("transfer_{}", uuid::Uuid::new_v4());
    let (status, e) = get(&sim, &format!("/transfers/{missing}")).await;
    assert_eq!((status, e["errorType"].as_str()), (404, Some("not_found")));

    let (_, page) = get(&sim, "/transfers?pageSize=2").await;
    let got: Vec<&str> = page["transfers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["transferId"].as_str().unwrap())
        .collect();
    assert_eq!(got, vec![ids[2].as_str(), ids[1].as_str()]);
    let token = page["nextPageToken"].as_str().unwrap();
    let (_, last) = get(&sim, &format!("/transfers?pageSize=2&pageToken={token}")).await;
    assert_eq!(last["transfers"].as_array().unwrap().len(), 1);
    assert_eq!(last["transfers"][0]["transferId"], ids[0].as_str());
    assert!(last.get("nextPageToken").is_none());
    let (_, failed) = get(&sim, "/transfers?status=failed").await;
    assert_eq!(failed["transfers"].as_array().unwrap().len(), 1);
    let (_, all) = get(&sim, "/transfers").await;
    assert_eq!(all["transfers"].as_array().unwrap().len(), 3);
    let (_, none) = get(&sim, "/transfers?createdAfter=2999-01-01T00:00:00Z").await;
    assert!(none["transfers"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn faults() {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    sim.fault_next_create(Fault::ServerErrorAfterCreate);
    let k = key();
    let (status, e) = create(&sim, Some(&k), &body("3", "ref-f")).await;
    assert_eq!((status, e["errorType"].as_str()), (500, Some("internal_server_error")));
    assert_eq!(sim.created(), 1);
    let (status, replay) = create(&sim, Some(&k), &body("3", "ref-f")).await;
    assert_eq!(status, 200);
    assert_eq!(replay["metadata"]["payoutd_reference"], "ref-f");
    assert_eq!(sim.created(), 1);

    sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    assert_eq!(create(&sim, Some(&key()), &body("3", "ref-b")).await.0, 500);
    assert_eq!(sim.created_with_reference("ref-b"), 0);

    sim.fault_next_create(Fault::DelayAfterCreate(2_000));
    let client = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let k = key();
    let err = client
        .post(format!("{}/platform/v2/transfers", sim.base_url()))
        .bearer_auth(sim.coinbase_token("POST", "/platform/v2/transfers"))
        .header("X-Idempotency-Key", &k)
        .json(&body("4", "ref-d"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert_eq!(sim.created_with_reference("ref-d"), 1);
    let (status, replay) = create(&sim, Some(&k), &body("4", "ref-d")).await;
    assert_eq!(status, 200);
    assert_eq!(replay["metadata"]["payoutd_reference"], "ref-d");
    assert_eq!(sim.created_with_reference("ref-d"), 1);

    sim.fault_next_create(Fault::ResetAfterCreate);
    let k = key();
    let err = reqwest::Client::new()
        .post(format!("{}/platform/v2/transfers", sim.base_url()))
        .bearer_auth(sim.coinbase_token("POST", "/platform/v2/transfers"))
        .header("X-Idempotency-Key", &k)
        .json(&body("4", "ref-r"))
        .send()
        .await;
    assert!(err.is_err());
    assert_eq!(sim.created_with_reference("ref-r"), 1);
}

#[tokio::test]
async fn auth_required() {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/platform/v2/transfers", sim.base_url()))
        .json(&body("1", "r"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["errorType"], "unauthorized");
    assert!(e["errorMessage"].is_string());
    assert_eq!(sim.created(), 0);
    // A token for another request, or signed by another key, is refused too.
    for token in [sim.coinbase_token("GET", "/platform/v2/transfers"), sim.api_key()] {
        let resp = reqwest::Client::new()
            .post(format!("{}/platform/v2/transfers", sim.base_url()))
            .bearer_auth(token)
            .json(&body("1", "r"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
    }
    assert_eq!(sim.created(), 0);
}
