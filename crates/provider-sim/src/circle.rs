//! Circle developer-controlled wallets (W3S): entity public key, transfer transactions with single-use entity secret ciphertexts, lookups, lists.

use std::sync::OnceLock;

use axum::response::Response;
use base64::Engine;
use rsa::pkcs8::DecodePrivateKey;
use rsa::{Oaep, RsaPrivateKey};
use serde_json::{Value, json};

use crate::Fault;
use crate::coinbase::canonical;
use crate::core::{
    Core, IdemCheck, MAX_CIPHERTEXTS, Req, Saved, SimObject, answer_created, fake_tx_hash,
    is_uuid_v4, iso, json_response, parse_iso, positive_decimal, raw_response,
};

/// The entity secret the simulator expects inside each entitySecretCiphertext (32 bytes, hex).
pub const CIRCLE_SIM_ENTITY_SECRET_HEX: &str =
    "08df64530eade3c8b13de60101f00918a2a7247414f498b47c92bb9b974feccf";
/// The simulator's entity key pair (RSA 2048, fixed test keys; never generated at run time).
pub const CIRCLE_SIM_PUBLIC_KEY_PEM: &str = include_str!("keys/circle_sim_public.pem");
const CIRCLE_SIM_PRIVATE_KEY_PEM: &str = include_str!("keys/circle_sim_private.pem");
/// The status of a successful create. [INFERRED: not read in the SDK; adapters should accept any 2xx.]
pub const CREATED_STATUS: u16 = 201;
const STATES: [&str; 5] = ["INITIATED", "QUEUED", "SENT", "CONFIRMED", "COMPLETE"];
/// The step at which a transaction is on chain (`SENT`): failing from there on, it spent its gas.
pub const SENT_STEP: u64 = 2;
const DEFAULT_PAGE_SIZE: usize = 10;
const MAX_PAGE_SIZE: usize = 50;
/// The blockchain reported for a transfer sent by walletId (the simulator's wallets live on a testnet).
pub(crate) const DEFAULT_BLOCKCHAIN: &str = "ETH-SEPOLIA";
/// The token the demo and the tests pay in (USDC, 6 decimals); any other token id is shown as an
/// unnamed 6-decimal token.
pub const CIRCLE_SIM_USDC_TOKEN_ID: &str = "7adb2b7d-c9cd-4c36-8d8b-0b0b5e0b8a4e";
/// The chain's native token (ETH, 18 decimals), which pays each transaction's network fee.
pub const CIRCLE_SIM_NATIVE_TOKEN_ID: &str = "979869da-9115-5f7d-917d-12d434e56ae7";
/// What each transaction costs the wallet in the native token (`networkFee`).
pub const CIRCLE_SIM_NETWORK_FEE: &str = "0.000021";

fn error(status: u16, code: i64, message: &str) -> Response {
    json_response(status, &json!({"code": code, "message": message}))
}

fn invalid(location: &str) -> Response {
    json_response(
        400,
        &json!({"code": 2, "message": "API parameter invalid",
        "errors": [{"error": "invalid", "message": format!("{location} is missing or invalid"), "location": location, "invalidValue": null, "constraints": {}}]}),
    )
}

fn private_key() -> &'static RsaPrivateKey {
    static KEY: OnceLock<RsaPrivateKey> = OnceLock::new();
    KEY.get_or_init(|| {
        RsaPrivateKey::from_pkcs8_pem(CIRCLE_SIM_PRIVATE_KEY_PEM)
            .expect("the embedded Circle test key parses")
    })
}

fn entity_secret() -> Vec<u8> {
    (0..CIRCLE_SIM_ENTITY_SECRET_HEX.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&CIRCLE_SIM_ENTITY_SECRET_HEX[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Whether the ciphertext is base64 of RSA-OAEP-SHA256 over the raw entity secret.
fn ciphertext_ok(ciphertext: &str) -> bool {
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(ciphertext) else {
        return false;
    };
    private_key()
        .decrypt(Oaep::new::<sha2::Sha256>(), &bytes)
        .is_ok_and(|plain| plain == entity_secret())
}

pub async fn handle(core: &Core, req: Req) -> Response {
    if !core.bearer_ok(&req.headers) {
        return error(401, 401, "Malformed authorization. Are the headers properly formatted?");
    }
    let segs: Vec<String> =
        req.segments("/v1/w3s/").unwrap_or_default().into_iter().map(str::to_string).collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    match (req.method.as_str(), segs.as_slice()) {
        ("GET", ["config", "entity", "publicKey"]) => {
            json_response(200, &json!({"data": {"publicKey": CIRCLE_SIM_PUBLIC_KEY_PEM}}))
        }
        ("POST", ["developer", "transactions", "transfer"]) => match create_now(core, &req) {
            Ok((fault, success, error_answer)) => {
                answer_created(fault, &req.conn, success, error_answer).await
            }
            Err(r) => r,
        },
        ("POST", ["developer", "transactions", id, action @ ("accelerate" | "cancel")]) => {
            act_on(core, &req, id, action)
        }
        ("GET", ["transactions"]) => list(core, &req),
        ("GET", ["transactions", id]) => get(core, id),
        ("GET", ["wallets", id, "balances"]) => balances(core, &req, id),
        _ => error(404, 404, &format!("No route for {} {}", req.method, req.path)),
    }
}

fn validate(body: &Value) -> Result<(), Response> {
    let has = |k: &str| body[k].as_str().is_some_and(|s| !s.is_empty());
    if !body["idempotencyKey"].as_str().is_some_and(is_uuid_v4) {
        return Err(invalid("idempotencyKey"));
    }
    if !has("entitySecretCiphertext") {
        return Err(invalid("entitySecretCiphertext"));
    }
    match (has("walletId"), has("walletAddress")) {
        (true, true) => {
            return Err(error(
                400,
                155244,
                "Specify either walletId, or walletAddress and blockchain, not both.",
            ));
        }
        (false, false) => return Err(invalid("walletId")),
        (false, true) if !has("blockchain") => return Err(invalid("blockchain")),
        _ => {}
    }
    if !has("destinationAddress") {
        return Err(invalid("destinationAddress"));
    }
    let amounts_ok = body["amounts"].as_array().is_some_and(|a| {
        !a.is_empty() && a.iter().all(|x| x.as_str().is_some_and(positive_decimal))
    });
    if !amounts_ok {
        return Err(error(
            400,
            155221,
            "Invalid amounts: a list of positive decimal strings is required.",
        ));
    }
    if !(has("tokenId") || body["tokenAddress"].is_string() && has("blockchain")) {
        return Err(invalid("tokenId"));
    }
    match (has("feeLevel"), has("gasLimit")) {
        (false, false) => {
            return Err(error(400, 155231, "Either feeLevel or gasLimit is required."));
        }
        (true, true) => {
            return Err(error(
                400,
                155234,
                "Specify either feeLevel or the gas parameters, not both.",
            ));
        }
        _ => {}
    }
    if has("feeLevel")
        && !["LOW", "MEDIUM", "HIGH"].contains(&body["feeLevel"].as_str().unwrap_or_default())
    {
        return Err(invalid("feeLevel"));
    }
    Ok(())
}

type Created = (Option<Fault>, Response, Response);

/// A wallet the entity does not hold: 156001, HTTP 404 (error codes page).
fn unknown_wallet(wallet: &str) -> Response {
    error(404, 156001, &format!("Cannot find target wallet {wallet} in the system."))
}

/// A transfer the wallet cannot pay (developers.circle.com/wallets/error-codes): 155205, short of
/// the token when the fee is estimated, or 155201, short of the native token for the gas; both 400.
fn short_of(st: &crate::core::State, body: &Value) -> Option<Response> {
    let token = body["tokenId"].as_str().unwrap_or(CIRCLE_SIM_USDC_TOKEN_ID);
    let amount = body["amounts"][0].as_str().and_then(crate::core::e18_of).unwrap_or(0);
    let fee = crate::core::e18_of(CIRCLE_SIM_NETWORK_FEE).expect("a decimal");
    if st.held(token) < amount {
        return Some(error(
            400,
            155205,
            "Failed to execute this request on EVM due to insufficient token when estimating fee.",
        ));
    }
    (st.held(CIRCLE_SIM_NATIVE_TOKEN_ID) < fee)
        .then(|| error(400, 155201, "Not enough funds to fulfill the withdraw request."))
}

#[allow(clippy::too_many_lines)]
// one provider endpoint's documented checks and answers, in the provider's order.
fn create_now(core: &Core, req: &Req) -> Result<Created, Response> {
    let body: Value = serde_json::from_str(&req.body).map_err(|_| invalid("body"))?;
    if !body.is_object() {
        return Err(invalid("body"));
    }
    validate(&body)?;
    let ciphertext = body["entitySecretCiphertext"].as_str().unwrap_or_default().to_string();
    // Decrypted outside the lock: a private-key operation is slow in debug builds.
    let secret_ok = ciphertext_ok(&ciphertext);
    let key = body["idempotencyKey"].as_str().unwrap_or_default().to_string();
    let mut without_secret = body.clone();
    without_secret.as_object_mut().map(|m| m.remove("entitySecretCiphertext"));
    let (endpoint, params) = (format!("POST {}", req.path), canonical(&without_secret));
    let now = core.now_ms();
    let mut st = core.lock();
    if st.refuse_before_key_check() {
        return Err(invalid("destinationAddress"));
    }
    // "Each ciphertext is single-use. Reusing one causes the request to be rejected."
    if st.seen_ciphertexts.len() >= MAX_CIPHERTEXTS {
        st.seen_ciphertexts.clear();
    }
    if !st.seen_ciphertexts.insert(ciphertext) {
        return Err(error(
            400,
            156004,
            "Reusing an entity secret ciphertext is not allowed. Please re-encrypt the entity secret to generate new ciphertext.",
        ));
    }
    if !secret_ok {
        return Err(error(
            400,
            156013,
            "The entity secret ciphertext is invalid: it does not decrypt to the registered entity secret.",
        ));
    }
    match st.check_idem(&key, &endpoint, &params, now, core.options.key_window_ms) {
        // "If the same key is reused, it will be treated as the same request and the original response will be returned."
        // The ciphertext is left out of the comparison: a retry must carry a fresh one.
        // Circle's wording compares no body: a reused key, whatever else the request says, is "the
        // same request". (Its error 156020 "Please use a new idempotency key.", documented as a 403,
        // states no trigger; the adapter reads it as proving nothing at any status.)
        IdemCheck::Replay(saved) => return Err(raw_response(saved.status, saved.body)),
        IdemCheck::OtherParams | IdemCheck::OtherEndpoint => {
            let saved = st.saved(&key).cloned().expect("a key that conflicts is saved");
            return Err(raw_response(saved.status, saved.body));
        }
        // Circle states no retention window; past key_window_ms the simulator treats the key as new.
        IdemCheck::Expired | IdemCheck::New => {}
    }
    if let Some(wallet) = body["walletId"].as_str().filter(|w| !st.accounts.contains(*w)) {
        return Err(unknown_wallet(wallet));
    }
    if let Some(short) = short_of(&st, &body) {
        return Err(short);
    }
    let fault = st.faults.pop_front();
    let server_error = || error(500, -1, "Something went wrong.");
    if matches!(fault, Some(Fault::ServerErrorBeforeCreate | Fault::ServerErrorSaved)) {
        return Err(server_error());
    }
    let id = uuid::Uuid::new_v4().to_string();
    let wallet = body["walletId"].as_str().or(body["walletAddress"].as_str()).unwrap_or_default();
    let source_address = body["walletAddress"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| fake_tx_hash(wallet)[..42].to_string());
    let data = json!({"id": id, "blockchain": body["blockchain"].as_str().unwrap_or(DEFAULT_BLOCKCHAIN), "transactionType": "OUTBOUND",
        "createDate": iso(now), "updateDate": iso(now), "refId": body["refId"].as_str().unwrap_or(""), "amounts": body["amounts"],
        "destinationAddress": body["destinationAddress"], "sourceAddress": source_address, "walletId": body.get("walletId").cloned().unwrap_or(Value::Null),
        "tokenId": body.get("tokenId").cloned().unwrap_or(Value::Null), "feeLevel": body.get("feeLevel").cloned().unwrap_or(Value::Null),
        "operation": "TRANSFER", "custodyType": "DEVELOPER", "state": "INITIATED"});
    let reference = body["refId"].as_str().filter(|r| !r.is_empty()).map(str::to_string);
    if st.circle_unmonitored {
        st.unmonitored_ids.insert(id.clone());
    }
    // The amount and the network fee leave the wallet (given back if the transaction fails).
    let token = body["tokenId"].as_str().unwrap_or(CIRCLE_SIM_USDC_TOKEN_ID).to_owned();
    let amount = body["amounts"][0].as_str().and_then(crate::core::e18_of).unwrap_or(0);
    let fee = crate::core::e18_of(CIRCLE_SIM_NETWORK_FEE).expect("a decimal");
    st.add_object(
        SimObject {
            id: id.clone(),
            kind: "transaction",
            created_ms: now,
            data,
            reference,
            failed: None,
            took: vec![(token, amount), (CIRCLE_SIM_NATIVE_TOKEN_ID.to_owned(), fee)],
        },
        core.options.objects_max,
    );
    let answer = json!({"data": {"id": id, "state": "INITIATED"}});
    // The saved answer is the created transaction, also after a 5xx fault: the transaction was committed.
    st.save_idem(
        &key,
        Saved { endpoint, params, status: CREATED_STATUS, body: answer.to_string(), at_ms: now },
    );
    // Circle's error codes page: -1 with HTTP 400, "Something went wrong", an unknown error.
    let error_answer = if fault == Some(Fault::UnknownErrorAfterCreate) {
        error(400, -1, "Something went wrong.")
    } else {
        server_error()
    };
    Ok((fault, json_response(CREATED_STATUS, &answer), error_answer))
}

/// `POST /v1/w3s/developer/transactions/{id}/accelerate` and `.../cancel`: the body holds only
/// `idempotencyKey` (UUID v4) and a fresh `entitySecretCiphertext`; a repeated key answers the
/// first answer. "You can cancel a transaction in INITIATED, QUEUED, or SENT. You can accelerate a
/// transaction in SENT or STUCK" (transaction states and errors). Accelerate answers
/// `{"data":{"id"}}`, cancel `{"data":{"id","state"}}`.
fn act_on(core: &Core, req: &Req, id: &str, action: &str) -> Response {
    let Ok(body) = serde_json::from_str::<Value>(&req.body) else { return invalid("body") };
    let key = body["idempotencyKey"].as_str().unwrap_or_default().to_owned();
    if !crate::core::is_uuid_v4(&key) {
        return invalid("idempotencyKey");
    }
    let ciphertext = body["entitySecretCiphertext"].as_str().unwrap_or_default().to_owned();
    if !ciphertext_ok(&ciphertext) {
        return error(400, 156013, "The entity secret ciphertext is invalid.");
    }
    let (endpoint, params) = (format!("POST {}", req.path), key.clone());
    let now = core.now_ms();
    let mut st = core.lock();
    if !st.seen_ciphertexts.insert(ciphertext) {
        return error(400, 156004, "Reusing an entity secret ciphertext is not allowed.");
    }
    if let IdemCheck::Replay(saved) =
        st.check_idem(&key, &endpoint, &params, now, core.options.key_window_ms)
    {
        return raw_response(saved.status, saved.body);
    }
    let Some(o) = st.object("transaction", id) else {
        return error(404, 156003, "Transaction not found.");
    };
    let state = render(core, o, now, &st)["state"].as_str().unwrap_or_default().to_owned();
    let answer = match (action, state.as_str()) {
        ("accelerate", "SENT" | "STUCK") => {
            st.circle_accelerated.insert(id.to_owned());
            json!({"data": {"id": id}})
        }
        ("cancel", "INITIATED" | "CLEARED" | "QUEUED" | "SENT") => {
            if let Some(o) = st.objects.iter_mut().find(|o| o.id == id) {
                o.failed = Some((format!("{}CANCELLED", crate::core::CIRCLE_STATE_PREFIX), now));
            }
            st.give_back(id);
            json!({"data": {"id": id, "state": "CANCELLED"}})
        }
        // [INFERRED: Circle documents no code for an action in a state that does not allow it.]
        _ => {
            return error(400, 156030, &format!("Cannot {action} a transaction in state {state}."));
        }
    };
    let saved = Saved { endpoint, params, status: 200, body: answer.to_string(), at_ms: now };
    st.save_idem(&key, saved);
    json_response(200, &answer)
}

/// The transaction as Circle shows it now: INITIATED, QUEUED, SENT, (STUCK for the configured
/// steps,) CONFIRMED, COMPLETE, one per step (or FAILED, CANCELLED, DENIED).
fn render(core: &Core, o: &SimObject, now: u64, st: &crate::core::State) -> Value {
    let mut v = o.data.clone();
    let step = core.options.step_ms;
    let at = o.failed.as_ref().map_or(now, |(_, at)| *at);
    let taken = core.steps(o.created_ms, at);
    // An accelerated transaction is stuck no more: it is in a block at the next read.
    let stuck_steps = if st.circle_accelerated.contains(&o.id) { 0 } else { st.circle_stuck_steps };
    let stuck = (3..3 + stuck_steps).contains(&taken);
    let steps = (if taken >= 3 { taken.saturating_sub(stuck_steps).max(2) } else { taken }).min(4);
    // The states page and the SDK's enum order CLEARED and QUEUED differently: half the
    // transactions (by id) show CLEARED where the others show QUEUED, so both are read.
    let state = match STATES[steps as usize] {
        "QUEUED" if o.id.as_bytes().first().is_some_and(|b| b % 2 == 0) => "CLEARED",
        other => other,
    };
    v["state"] = json!(if stuck { "STUCK" } else { state });
    v["updateDate"] = json!(iso(o.created_ms + steps * step));
    if steps >= 2 {
        v["txHash"] = json!(fake_tx_hash(&o.id));
    }
    if steps >= 3 {
        v["blockHash"] = json!(fake_tx_hash(&format!("block-{}", o.id)));
        v["blockHeight"] = json!(1_000_000 + (o.created_ms / step) % 1_000_000);
        v["firstConfirmDate"] = json!(iso(o.created_ms + 3 * step));
        v["networkFee"] = json!(CIRCLE_SIM_NETWORK_FEE);
    }
    if let Some((reason, at)) = &o.failed {
        match reason.strip_prefix(crate::core::CIRCLE_STATE_PREFIX) {
            // Cancelled or denied before anything was spent: no fee to report.
            Some(state) => {
                v["state"] = json!(state);
                v.as_object_mut().map(|m| m.remove("networkFee"));
            }
            None => {
                v["state"] = json!("FAILED");
                v["errorReason"] = json!(reason);
                if taken >= SENT_STEP {
                    // Failed on chain: the gas is spent, and Circle reports it.
                    v["networkFee"] = json!(CIRCLE_SIM_NETWORK_FEE);
                }
            }
        }
        v["updateDate"] = json!(iso(*at));
    }
    v
}

fn get(core: &Core, id: &str) -> Response {
    let now = core.now_ms();
    let st = core.lock();
    match st.object("transaction", id) {
        Some(o) => json_response(200, &json!({"data": {"transaction": render(core, o, now, &st)}})),
        None => error(404, 156003, "Transaction not found."),
    }
}

#[allow(clippy::too_many_lines)]
// one provider endpoint's documented checks and answers, in the provider's order.
fn list(core: &Core, req: &Req) -> Response {
    let q = req.query_pairs();
    let qget = |n: &str| q.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    // "In case the specified value is higher than the allowed limit, the collection limit will be used."
    let asked = match qget("pageSize").map(|s| s.parse::<usize>()) {
        None => DEFAULT_PAGE_SIZE,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => return invalid("pageSize"),
    };
    let (after, before) = (qget("pageAfter"), qget("pageBefore"));
    if after.is_some() && before.is_some() {
        return invalid("pageBefore");
    }
    if after.iter().chain(before.iter()).any(|c| uuid::Uuid::parse_str(c).is_err()) {
        return error(400, 156014, "pageBefore and pageAfter must be UUIDs.");
    }
    let ascending = match qget("order").as_deref() {
        None | Some("DESC") => false,
        Some("ASC") => true,
        Some(_) => return invalid("order"),
    };
    let mut bounds = Vec::new();
    for (name, from) in [("from", true), ("to", false)] {
        if let Some(t) = qget(name) {
            let Some(ms) = parse_iso(&t) else {
                return invalid(name);
            };
            bounds.push((from, ms));
        }
    }
    let wallets: Option<Vec<String>> =
        qget("walletIds").map(|w| w.split(',').map(str::to_string).collect());
    let include_all = qget("includeAll").as_deref() == Some("true");
    let now = core.now_ms();
    let st = core.lock();
    let limit =
        if st.circle_page_cap == 0 { MAX_PAGE_SIZE } else { st.circle_page_cap.min(MAX_PAGE_SIZE) };
    let page_size = asked.min(limit);
    let mut objects = st.newest_first("transaction", now);
    if ascending {
        objects.reverse();
    }
    let keep = |o: &SimObject, v: &Value| {
        let eq = |param: &str, field: &str| {
            qget(param).is_none_or(|want| v[field].as_str() == Some(want.as_str()))
        };
        (include_all || !st.unmonitored_ids.contains(&o.id))
            && wallets.as_ref().is_none_or(|w| w.iter().any(|id| v["walletId"] == id.as_str()))
            && eq("blockchain", "blockchain")
            && eq("destinationAddress", "destinationAddress")
            && eq("state", "state")
            && eq("txHash", "txHash")
            && eq("operation", "operation")
            && eq("txType", "transactionType")
            && eq("custodyType", "custodyType")
            && bounds.iter().all(
                |(from, ms)| {
                    if *from { o.created_ms >= *ms } else { o.created_ms <= *ms }
                },
            )
    };
    let all: Vec<Value> = objects
        .into_iter()
        // The creation bounds first, read from the object: a long history is not rendered whole.
        .filter(|o| {
            bounds
                .iter()
                .all(|(from, ms)| if *from { o.created_ms >= *ms } else { o.created_ms <= *ms })
        })
        .filter_map(|o| Some(render(core, o, now, &st)).filter(|v| keep(o, v)))
        .collect();
    let position = |id: &str| all.iter().position(|v| v["id"] == id);
    // Read in the natural order (newest first), the items "after" an id under `order=ASC` are the
    // older ones: the page before it.
    let (after, before) = match (after, before) {
        (Some(c), None) if ascending && st.circle_page_after_natural => (None, Some(c)),
        other => other,
    };
    let page: Vec<Value> = match (after, before) {
        (Some(c), _) => match position(&c) {
            Some(i) => all[i + 1..].iter().take(page_size).cloned().collect(),
            None => Vec::new(),
        },
        (_, Some(c)) => match position(&c) {
            Some(i) => all[i.saturating_sub(page_size)..i].to_vec(),
            None => Vec::new(),
        },
        _ => all.iter().take(page_size).cloned().collect(),
    };
    json_response(200, &json!({"data": {"transactions": page}}))
}

/// `GET /wallets/{id}/balances`: the native token and every token the wallet used, native first,
/// paged like every Circle list (`pageSize` up to 50, `pageAfter` a token id).
fn balances(core: &Core, req: &Req, wallet_id: &str) -> Response {
    if !core.lock().accounts.contains(wallet_id) {
        return unknown_wallet(wallet_id);
    }
    let q = req.query_pairs();
    let qget = |n: &str| q.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let page_size = match qget("pageSize").map(|s| s.parse::<usize>()) {
        None => DEFAULT_PAGE_SIZE,
        Some(Ok(n)) if (1..=MAX_PAGE_SIZE).contains(&n) => n,
        Some(_) => return invalid("pageSize"),
    };
    let now = core.now_ms();
    let st = core.lock();
    let mut tokens: Vec<String> =
        st.purse.keys().filter(|t| t.as_str() != CIRCLE_SIM_NATIVE_TOKEN_ID).cloned().collect();
    tokens.sort();
    tokens.insert(0, CIRCLE_SIM_NATIVE_TOKEN_ID.to_owned());
    if !tokens.iter().any(|t| t == CIRCLE_SIM_USDC_TOKEN_ID) {
        tokens.push(CIRCLE_SIM_USDC_TOKEN_ID.to_owned());
    }
    let start = match qget("pageAfter") {
        Some(after) => match tokens.iter().position(|t| *t == after) {
            Some(i) => i + 1,
            None => tokens.len(),
        },
        None => 0,
    };
    let entry = |id: &String| {
        let native = id == CIRCLE_SIM_NATIVE_TOKEN_ID;
        let (symbol, name, decimals) = match id.as_str() {
            CIRCLE_SIM_NATIVE_TOKEN_ID => ("ETH-SEPOLIA", "Ethereum-Sepolia", 18),
            CIRCLE_SIM_USDC_TOKEN_ID => ("USDC", "USD Coin", 6),
            _ => ("TOKEN", "Simulated token", 6),
        };
        let mut token = json!({"id": id, "name": name, "blockchain": DEFAULT_BLOCKCHAIN, "decimals": decimals, "isNative": native,
            "symbol": symbol, "updateDate": iso(0), "createDate": iso(0)});
        if !native {
            token["standard"] = json!("ERC20");
            token["tokenAddress"] = json!(&fake_tx_hash(id)[..42]);
        }
        json!({"amount": crate::core::decimal_of_e18(st.held(id), decimals), "token": token, "updateDate": iso(now)})
    };
    let page: Vec<Value> = tokens.iter().skip(start).take(page_size).map(entry).collect();
    json_response(200, &json!({"data": {"tokenBalances": page}}))
}
