//! The Circle W3S simulator against its documented contract, with real RSA-OAEP entity secret ciphertexts.

use std::time::Duration;

use base64::Engine;
use payoutd_provider_sim::{
    CIRCLE_SIM_ENTITY_SECRET_HEX, Fault, ProviderKind, ProviderSim, SimOptions,
};
use rsa::pkcs8::DecodePublicKey;
use rsa::{Oaep, RsaPublicKey};
use serde_json::{Value, json};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;
const STEP_MS: u64 = 60_000;
const WALLET: &str = payoutd_provider_sim::CIRCLE_SIM_WALLET_ID;

/// rand 0.9's thread RNG behind the rand_core 0.6 traits rsa 0.9 wants.
struct Rng;
impl rsa::rand_core::RngCore for Rng {
    fn next_u32(&mut self) -> u32 {
        rand::random()
    }
    fn next_u64(&mut self) -> u64 {
        rand::random()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        rand::RngCore::fill_bytes(&mut rand::rng(), dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rsa::rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
impl rsa::rand_core::CryptoRng for Rng {}

/// A fresh ciphertext of `secret` under the key the simulator publishes.
async fn ciphertext(sim: &ProviderSim, secret: &[u8]) -> String {
    let (status, v) = get(sim, "/config/entity/publicKey").await;
    assert_eq!(status, 200);
    let pem = v["data"]["publicKey"].as_str().unwrap();
    assert!(pem.starts_with("-----BEGIN PUBLIC KEY-----"));
    let key = RsaPublicKey::from_public_key_pem(pem).unwrap();
    let ct = key.encrypt(&mut Rng, Oaep::new::<sha2::Sha256>(), secret).unwrap();
    base64::engine::general_purpose::STANDARD.encode(ct)
}

async fn body(sim: &ProviderSim, key: &str, amount: &str, reference: &str) -> Value {
    json!({"idempotencyKey": key, "entitySecretCiphertext": ciphertext(sim, &hex::decode(CIRCLE_SIM_ENTITY_SECRET_HEX).unwrap()).await,
        "walletId": WALLET, "tokenId": "7adb2b7d-c9cd-4a2b-9c1f-3f4e5d6c7b8a",
        "destinationAddress": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "amounts": [amount], "feeLevel": "MEDIUM", "refId": reference})
}

async fn create(sim: &ProviderSim, body: &Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/w3s/developer/transactions/transfer", sim.base_url()))
        .bearer_auth(sim.api_key())
        .json(body)
        .send()
        .await
        .expect("send");
    (resp.status().as_u16(), resp.json().await.expect("json"))
}

async fn get(sim: &ProviderSim, path: &str) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/w3s{path}", sim.base_url()))
        .bearer_auth(sim.api_key())
        .send()
        .await
        .expect("send");
    (resp.status().as_u16(), resp.json().await.expect("json"))
}

fn key() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[tokio::test]
async fn create_replay_conflict_window_and_ciphertexts() {
    let sim = ProviderSim::start(ProviderKind::Circle).await;
    let k = key();
    let first_body = body(&sim, &k, "1.50", "ref-1").await;
    let (status, first) = create(&sim, &first_body).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["data"]["state"], "INITIATED");
    let id = first["data"]["id"].as_str().unwrap().to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok());

    // The same ciphertext again is refused, even for the very same request.
    let (status, e) = create(&sim, &first_body).await;
    assert_eq!((status, e["code"].as_i64()), (400, Some(156004)));
    assert_eq!(
        e["message"],
        "Reusing an entity secret ciphertext is not allowed. Please re-encrypt the entity secret to generate new ciphertext."
    );

    // Same key, fresh ciphertext: the original response.
    let (status, replay) = create(&sim, &body(&sim, &k, "1.50", "ref-1").await).await;
    assert_eq!(status, 201);
    assert_eq!(replay, first);
    assert_eq!(sim.created(), 1);

    // Same key, another amount: "treated as the same request and the original response will be
    // returned" (Circle compares no body); nothing new is created.
    let (status, replay) = create(&sim, &body(&sim, &k, "2.00", "ref-1").await).await;
    assert_eq!(status, 201);
    assert_eq!(replay, first);
    assert_eq!(sim.created(), 1);

    let mut wrong = body(&sim, &key(), "1.50", "ref-x").await;
    wrong["entitySecretCiphertext"] = json!(ciphertext(&sim, &[7u8; 32]).await);
    let (status, e) = create(&sim, &wrong).await;
    assert_eq!((status, e["code"].as_i64()), (400, Some(156013)));
    assert_eq!(sim.created(), 1);

    sim.advance(DAY_MS + 1);
    let (status, again) = create(&sim, &body(&sim, &k, "1.50", "ref-1").await).await;
    assert_eq!(status, 201);
    assert_ne!(again["data"]["id"], id.as_str());
    assert_eq!(sim.created_with_reference("ref-1"), 2);
}

#[tokio::test]
async fn validation() {
    let sim = ProviderSim::start(ProviderKind::Circle).await;
    let mut b = body(&sim, "not-a-uuid", "1", "r").await;
    assert_eq!(create(&sim, &b).await.1["code"], 2);
    b = body(&sim, &key(), "0", "r").await;
    assert_eq!(create(&sim, &b).await.1["code"], 155221);
    b = body(&sim, &key(), "1", "r").await;
    b.as_object_mut().unwrap().remove("feeLevel");
    assert_eq!(create(&sim, &b).await.1["code"], 155231);
    b = body(&sim, &key(), "1", "r").await;
    b["walletAddress"] = json!("0xabc");
    assert_eq!(create(&sim, &b).await.1["code"], 155244);
    assert_eq!(sim.created(), 0);
}

#[tokio::test]
async fn progression_lookup_fail_and_list() {
    // Long steps, so a slow machine cannot move a state on behind the test's back.
    let sim = ProviderSim::start_with(
        ProviderKind::Circle,
        SimOptions { step_ms: STEP_MS, ..SimOptions::default() },
    )
    .await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, t) = create(&sim, &body(&sim, &key(), "1.00", &format!("ref-{i}")).await).await;
        ids.push(t["data"]["id"].as_str().unwrap().to_string());
        sim.advance(10);
    }
    let path = format!("/transactions/{}", ids[0]);
    let (status, t) = get(&sim, &path).await;
    assert_eq!(status, 200);
    let tx = &t["data"]["transaction"];
    assert_eq!(tx["state"], "INITIATED");
    assert_eq!(tx["refId"], "ref-0");
    assert_eq!(tx["transactionType"], "OUTBOUND");
    assert!(tx["createDate"].as_str().unwrap().ends_with('Z'));
    assert!(tx.get("txHash").is_none());
    let mut seen = Vec::new();
    for _ in 0..5 {
        let (_, t) = get(&sim, &path).await;
        seen.push(t["data"]["transaction"]["state"].as_str().unwrap().to_string());
        if seen.len() == 3 {
            assert_eq!(t["data"]["transaction"]["txHash"].as_str().unwrap().len(), 66);
        }
        sim.advance(STEP_MS);
    }
    // CLEARED or QUEUED, by the transaction's id: Circle's two lists order them differently.
    let second = if ids[0].as_bytes()[0] % 2 == 0 { "CLEARED" } else { "QUEUED" };
    assert_eq!(seen, ["INITIATED", second, "SENT", "CONFIRMED", "COMPLETE"]);

    assert!(sim.fail(&ids[1], "INSUFFICIENT_NATIVE_TOKEN"));
    let (_, f) = get(&sim, &format!("/transactions/{}", ids[1])).await;
    assert_eq!(f["data"]["transaction"]["state"], "FAILED");
    assert_eq!(f["data"]["transaction"]["errorReason"], "INSUFFICIENT_NATIVE_TOKEN");
    let (status, e) = get(&sim, &format!("/transactions/{}", key())).await;
    assert_eq!((status, e["code"].as_i64()), (404, Some(156003)));

    let (_, page) = get(&sim, &format!("/transactions?walletIds={WALLET}&pageSize=2")).await;
    let got: Vec<&str> = page["data"]["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, vec![ids[2].as_str(), ids[1].as_str()]);
    let (_, next) = get(&sim, &format!("/transactions?pageSize=2&pageAfter={}", ids[1])).await;
    assert_eq!(next["data"]["transactions"][0]["id"], ids[0].as_str());
    let (_, asc) = get(&sim, "/transactions?order=ASC&pageSize=1").await;
    assert_eq!(asc["data"]["transactions"][0]["id"], ids[0].as_str());
    let (_, other) = get(&sim, "/transactions?walletIds=someone-else").await;
    assert!(other["data"]["transactions"].as_array().unwrap().is_empty());
    let (_, none) = get(&sim, "/transactions?from=2999-01-01T00:00:00Z").await;
    assert!(none["data"]["transactions"].as_array().unwrap().is_empty());
    let (status, e) = get(&sim, "/transactions?pageAfter=nope").await;
    assert_eq!((status, e["code"].as_i64()), (400, Some(156014)));
}

#[tokio::test]
async fn faults() {
    let sim = ProviderSim::start(ProviderKind::Circle).await;
    sim.fault_next_create(Fault::ServerErrorAfterCreate);
    let k = key();
    assert_eq!(create(&sim, &body(&sim, &k, "3", "ref-f").await).await.0, 500);
    assert_eq!(sim.created(), 1);
    let (status, replay) = create(&sim, &body(&sim, &k, "3", "ref-f").await).await;
    assert_eq!(status, 201);
    assert_eq!(replay["data"]["state"], "INITIATED");
    assert_eq!(sim.created(), 1);

    sim.fault_next_create(Fault::ServerErrorBeforeCreate);
    assert_eq!(create(&sim, &body(&sim, &key(), "3", "ref-b").await).await.0, 500);
    assert_eq!(sim.created_with_reference("ref-b"), 0);

    sim.fault_next_create(Fault::DelayAfterCreate(3_000));
    let client = reqwest::Client::builder().timeout(Duration::from_millis(1_000)).build().unwrap();
    let err = client
        .post(format!("{}/v1/w3s/developer/transactions/transfer", sim.base_url()))
        .bearer_auth(sim.api_key())
        .json(&body(&sim, &key(), "4", "ref-d").await)
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert_eq!(sim.created_with_reference("ref-d"), 1);

    sim.fault_next_create(Fault::ResetAfterCreate);
    let sent = reqwest::Client::new()
        .post(format!("{}/v1/w3s/developer/transactions/transfer", sim.base_url()))
        .bearer_auth(sim.api_key())
        .json(&body(&sim, &key(), "4", "ref-r").await)
        .send()
        .await;
    assert!(sent.is_err());
    assert_eq!(sim.created_with_reference("ref-r"), 1);
}

#[tokio::test]
async fn auth_required() {
    let sim = ProviderSim::start(ProviderKind::Circle).await;
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/w3s/transactions", sim.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let e: Value = resp.json().await.unwrap();
    assert!(e["code"].is_i64() && e["message"].is_string());
}
