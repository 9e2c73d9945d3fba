//! The Bridge transfers simulator against its documented contract.

use std::time::Duration;

use payoutd_provider_sim::{Fault, ProviderKind, ProviderSim, SimOptions};
use serde_json::{Value, json};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;
const STEP_MS: u64 = 60_000;

fn body(amount: &str, reference: &str) -> Value {
    json!({"amount": amount, "on_behalf_of": "cust_alice", "client_reference_id": reference,
        "source": {"payment_rail": "bridge_wallet", "currency": "usdc", "bridge_wallet_id": "wallet_1"},
        "destination": {"payment_rail": "base", "currency": "usdc", "to_address": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"}})
}

/// A Bridge simulator whose developer account has `wallet_1` of `cust_alice`, holding USDC.
async fn started(options: SimOptions) -> ProviderSim {
    let sim = ProviderSim::start_with(ProviderKind::Bridge, options).await;
    sim.add_bridge_wallet("cust_alice", "wallet_1", "usdc");
    sim
}

async fn create(sim: &ProviderSim, key: Option<&str>, body: &Value) -> (u16, Value) {
    let mut rb = reqwest::Client::new()
        .post(format!("{}/v0/transfers", sim.base_url()))
        .header("Api-Key", sim.api_key())
        .json(body);
    if let Some(k) = key {
        rb = rb.header("Idempotency-Key", k);
    }
    let resp = rb.send().await.expect("send");
    (resp.status().as_u16(), resp.json().await.expect("json"))
}

async fn get(sim: &ProviderSim, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{}/v0{path}", sim.base_url()))
        .header("Api-Key", sim.api_key())
        .send()
        .await
        .expect("send");
    (resp.status().as_u16(), resp.json().await.expect("json"))
}

#[tokio::test]
async fn create_replay_conflict_and_expiry() {
    let sim = started(SimOptions::default()).await;
    let (status, e) = create(&sim, None, &body("10.0", "ref-1")).await;
    assert_eq!(status, 400, "the key is required: {e}");
    assert_eq!(sim.created(), 0);

    let (status, first) = create(&sim, Some("k1"), &body("10.0", "ref-1")).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["state"], "funds_received");
    assert_eq!(first["client_reference_id"], "ref-1");
    assert_eq!(first["amount"], "10.0");
    assert_eq!(first["on_behalf_of"], "cust_alice");
    assert!(first["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(first["receipt"].get("destination_tx_hash").is_none());

    let (status, replay) = create(&sim, Some("k1"), &body("10.0", "ref-1")).await;
    assert_eq!(status, 201);
    assert_eq!(replay, first);
    assert_eq!(sim.created(), 1);

    let (status, e) = create(&sim, Some("k1"), &body("11.0", "ref-1")).await;
    assert_eq!(status, 400);
    assert_eq!(e["code"], "duplicate_record");
    assert_eq!(e["message"], "Idempotency key was reused with different parameters");

    sim.advance(DAY_MS + 1);
    let (status, e) = create(&sim, Some("k1"), &body("10.0", "ref-1")).await;
    assert_eq!(status, 422);
    assert_eq!(e["code"], "unprocessable_entity");
    assert_eq!(sim.created(), 1);
    assert_eq!(sim.created_with_reference("ref-1"), 1);
}

#[tokio::test]
async fn validation() {
    let sim = started(SimOptions::default()).await;
    let mut b = body("abc", "r");
    let (status, e) = create(&sim, Some("v1"), &b).await;
    assert_eq!(
        (status, e["code"].as_str(), e["source"]["key"].as_str()),
        (400, Some("invalid_parameters"), Some("amount"))
    );
    b["amount"] = json!("1.0");
    b["destination"].as_object_mut().unwrap().remove("to_address");
    let (_, e) = create(&sim, Some("v2"), &b).await;
    assert_eq!(e["source"]["key"], "destination.to_address");
    let resp = reqwest::Client::new()
        .post(format!("{}/v0/transfers", sim.base_url()))
        .header("Api-Key", sim.api_key())
        .header("Idempotency-Key", "v3")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.json::<Value>().await.unwrap()["code"], "invalid_json");
    assert_eq!(sim.created(), 0);
    // A rejected body was not saved: the key still works.
    assert_eq!(create(&sim, Some("v1"), &body("1.0", "r")).await.0, 201);
}

#[tokio::test]
async fn progression_lookup_fail_and_list() {
    // Long steps, so a slow machine cannot move a state on behind the test's back.
    let sim = started(SimOptions { step_ms: STEP_MS, ..SimOptions::default() }).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, t) =
            create(&sim, Some(&format!("key-{i}")), &body("5.0", &format!("ref-{i}"))).await;
        ids.push(t["id"].as_str().unwrap().to_string());
        sim.advance(10);
    }
    let path = format!("/transfers/{}", ids[0]);
    assert_eq!(get(&sim, &path).await.1["state"], "funds_received");
    sim.advance(STEP_MS);
    assert_eq!(get(&sim, &path).await.1["state"], "payment_submitted");
    sim.advance(STEP_MS);
    let (status, done) = get(&sim, &path).await;
    assert_eq!(status, 200);
    assert_eq!(done["state"], "payment_processed");
    let hash = done["receipt"]["destination_tx_hash"].as_str().unwrap().to_string();
    assert_eq!(hash.len(), 66);
    assert_ne!(done["updated_at"], done["created_at"]);

    assert!(sim.fail(&ids[1], "returned by the bank"));
    assert_eq!(get(&sim, &format!("/transfers/{}", ids[1])).await.1["state"], "error");
    let (status, e) = get(&sim, "/transfers/nope").await;
    assert_eq!((status, e["code"].as_str()), (404, Some("not_found")));

    let (_, page) = get(&sim, "/transfers?limit=2").await;
    assert_eq!(page["count"], 2);
    let got: Vec<&str> =
        page["data"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(got, vec![ids[2].as_str(), ids[1].as_str()]);
    let (_, rest) = get(&sim, &format!("/transfers?limit=2&starting_after={}", ids[1])).await;
    assert_eq!(rest["count"], 1);
    assert_eq!(rest["data"][0]["id"], ids[0].as_str());
    let (_, by_hash) = get(&sim, &format!("/transfers?tx_hash={hash}")).await;
    assert_eq!(by_hash["count"], 1);
    let (_, errored) = get(&sim, "/transfers?state=error").await;
    assert_eq!(errored["data"][0]["id"], ids[1].as_str());
    let (_, recent) = get(&sim, &format!("/transfers?updated_after_ms={}", sim.now_ms() + 1)).await;
    assert_eq!(recent["count"], 0);
    let (status, _) =
        get(&sim, &format!("/transfers?starting_after={}&updated_after_ms=1", ids[1])).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn faults() {
    let sim = started(SimOptions::default()).await;
    sim.fault_next_create(Fault::ServerErrorAfterCreate);
    let (status, _) = create(&sim, Some("f1"), &body("3.0", "ref-f")).await;
    assert_eq!(status, 500);
    assert_eq!(sim.created(), 1);
    let (status, replay) = create(&sim, Some("f1"), &body("3.0", "ref-f")).await;
    assert_eq!(status, 201);
    assert_eq!(replay["client_reference_id"], "ref-f");
    assert_eq!(sim.created(), 1);

    sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    assert_eq!(create(&sim, Some("f2"), &body("3.0", "ref-b")).await.0, 500);
    assert_eq!(sim.created_with_reference("ref-b"), 0);
    assert_eq!(create(&sim, Some("f2"), &body("3.0", "ref-b")).await.0, 201);
    assert_eq!(sim.created_with_reference("ref-b"), 1);

    sim.fault_next_create(Fault::DelayAfterCreate(2_000));
    let client = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let err = client
        .post(format!("{}/v0/transfers", sim.base_url()))
        .header("Api-Key", sim.api_key())
        .header("Idempotency-Key", "f3")
        .json(&body("4.0", "ref-d"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert_eq!(sim.created_with_reference("ref-d"), 1);

    sim.fault_next_create(Fault::ResetAfterCreate);
    let sent = reqwest::Client::new()
        .post(format!("{}/v0/transfers", sim.base_url()))
        .header("Api-Key", sim.api_key())
        .header("Idempotency-Key", "f4")
        .json(&body("4.0", "ref-r"))
        .send()
        .await;
    assert!(sent.is_err());
    assert_eq!(create(&sim, Some("f4"), &body("4.0", "ref-r")).await.0, 201);
    assert_eq!(sim.created_with_reference("ref-r"), 1);
}

#[tokio::test]
async fn auth_required() {
    let sim = started(SimOptions::default()).await;
    let resp = reqwest::Client::new()
        .get(format!("{}/v0/transfers", sim.base_url()))
        .bearer_auth(sim.api_key())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401, "Bridge wants Api-Key, not Bearer");
    let e: Value = resp.json().await.unwrap();
    assert!(e["code"].is_string() && e["message"].is_string());
    let resp = reqwest::Client::new()
        .get(format!("{}/v0/transfers", sim.base_url()))
        .header("Api-Key", "wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
}

/// Bridge refuses, before making anything, a transfer out of a wallet it does not know (or of
/// another customer), in a currency the wallet does not hold, without the `initiation` a wallet
/// requires (or with one it does not take), or above the wallet's balance; the wallet's answer says
/// what it holds and that it requires initiation (apidocs.bridge.xyz, "move money").
#[tokio::test]
async fn a_transfer_out_of_a_wallet_follows_the_wallets_rules() {
    let sim = started(SimOptions::default()).await;
    sim.add_bridge_wallet("cust_bob", "wallet_usdb", "usdb");
    let refused = |e: &Value, field: &str| assert_eq!(e["source"]["key"], field, "{e}");
    let mut unknown = body("1.0", "ref-u");
    unknown["source"]["bridge_wallet_id"] = json!("wallet_nobody");
    let (status, e) = create(&sim, Some("u"), &unknown).await;
    assert_eq!((status, &e["code"]), (400, &json!("not_found")), "{e}");
    refused(&e, "source.bridge_wallet_id");
    let mut bobs = body("1.0", "ref-b");
    bobs["source"]["bridge_wallet_id"] = json!("wallet_usdb");
    let (status, e) = create(&sim, Some("b1"), &bobs).await;
    assert_eq!(status, 400, "another customer's wallet: {e}");
    bobs["on_behalf_of"] = json!("cust_bob");
    let (status, e) = create(&sim, Some("b2"), &bobs).await;
    assert_eq!(status, 400, "the wallet holds usdb: {e}");
    refused(&e, "source.currency");
    bobs["source"]["currency"] = json!("usdb");
    let (status, t) = create(&sim, Some("b3"), &bobs).await;
    assert_eq!(status, 201, "usdb out, usdc to the recipient: {t}");

    assert!(sim.require_bridge_initiation("wallet_usdb"));
    let (status, wallet) = get(&sim, "/customers/cust_bob/wallets/wallet_usdb").await;
    assert_eq!((status, &wallet["initiation_required"]), (200, &json!(true)), "{wallet}");
    assert_eq!(wallet["balances"][0]["currency"], "usdb");
    let (status, e) = create(&sim, Some("b4"), &bobs).await;
    assert_eq!(status, 400, "{e}");
    refused(&e, "initiation");
    bobs["initiation"] = json!({"attestations": {"sca": {"outcome": "sca_used"}}});
    let (status, _) = create(&sim, Some("b5"), &bobs).await;
    assert_eq!(status, 201);
    let mut alices = body("1.0", "ref-a");
    alices["initiation"] = bobs["initiation"].clone();
    let (status, e) = create(&sim, Some("a1"), &alices).await;
    assert_eq!(status, 400, "a wallet without initiation_required takes none: {e}");

    let (_, wallet) = get(&sim, "/customers/cust_alice/wallets/wallet_1").await;
    let held = wallet["balances"][0]["balance"].as_str().unwrap().to_owned();
    let over = format!("{}.5", held.split('.').next().unwrap());
    let (status, e) = create(&sim, Some("a2"), &body(&over, "ref-over")).await;
    assert_eq!(status, 400, "{e}");
    refused(&e, "amount");
    assert_eq!(sim.created(), 2, "nothing refused was made");
    let (status, _) = get(&sim, "/customers/cust_alice/wallets/wallet_nobody").await;
    assert_eq!(status, 404);
}
