//! Bridge (bridge.xyz) v0 transfers: JSON bodies, required Idempotency-Key (24 h, then 422), lookups, cursor lists.

use axum::response::Response;
use serde_json::{Value, json};

use crate::Fault;
use crate::coinbase::canonical;
use crate::core::{
    Core, IdemCheck, Req, Saved, SimObject, answer_created, fake_tx_hash, iso, json_response,
    positive_decimal, raw_response,
};

/// The status of a successful create. [INFERRED: the stored docs do not show it; adapters should accept any 2xx.]
pub const CREATED_STATUS: u16 = 201;
const CRYPTO_RAILS: &[&str] = &[
    "ethereum",
    "base",
    "solana",
    "polygon",
    "arbitrum",
    "optimism",
    "avalanche_c_chain",
    "stellar",
    "tron",
];
/// Source rails Bridge pulls the funds from itself ("Bridge wallet" and "prefunded account"); a
/// transfer from any other source answers deposit instructions and waits in `awaiting_funds`.
const BRIDGE_WALLET_RAIL: &str = "bridge_wallet";
const SELF_FUNDED_RAILS: &[&str] = &[BRIDGE_WALLET_RAIL, "prefunded"];
const DEFAULT_LIMIT: usize = 10;
/// The decimals Bridge writes balances with.
const BALANCE_DECIMALS: u32 = 6;
const MAX_LIMIT: usize = 100;

/// A Bridge wallet of the developer account: whose it is, the one currency it holds (a Bridge
/// wallet holds `usdb` and pays it out as `usdc`), and whether its transfers need an `initiation`.
#[derive(Clone, Debug)]
pub struct Wallet {
    pub customer: String,
    pub currency: String,
    pub initiation_required: bool,
}

fn error(status: u16, code: &str, message: &str, key: Option<&str>) -> Response {
    let mut body = json!({"code": code, "message": message});
    if let Some(k) = key {
        body["source"] = json!({"key": k});
    }
    json_response(status, &body)
}

fn invalid(key: &str) -> Response {
    error(400, "invalid_parameters", "Malformed or invalid field values", Some(key))
}

pub async fn handle(core: &Core, req: Req) -> Response {
    if req.header("api-key") != Some(core.options.api_key.as_str()) {
        return error(401, "unauthorized", "Missing or invalid Api-Key header", None);
    }
    let segs: Vec<String> =
        req.segments("/v0/").unwrap_or_default().into_iter().map(str::to_string).collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    match (req.method.as_str(), segs.as_slice()) {
        ("POST", ["transfers"]) => match create_now(core, &req) {
            Ok((fault, success, error_answer)) => {
                answer_created(fault, &req.conn, success, error_answer).await
            }
            Err(r) => r,
        },
        ("GET", ["transfers"]) => list(core, &req, None),
        // "Get all transfers" of one customer (apidocs.bridge.xyz, customers): the same paging.
        ("GET", ["customers", customer, "transfers"]) => list(core, &req, Some(customer)),
        ("GET", ["transfers", id]) => get(core, id),
        ("GET", ["customers", customer, "wallets", wallet]) => wallet_of(core, customer, wallet),
        _ => error(404, "not_found", &format!("No route for {} {}", req.method, req.path), None),
    }
}

fn validate(body: &Value) -> Result<(), Response> {
    let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    if !body["amount"].as_str().is_some_and(positive_decimal) {
        return Err(invalid("amount"));
    }
    if s(&body["on_behalf_of"]).is_none() {
        return Err(invalid("on_behalf_of"));
    }
    for side in ["source", "destination"] {
        for field in ["payment_rail", "currency"] {
            if s(&body[side][field]).is_none() {
                return Err(invalid(&format!("{side}.{field}")));
            }
        }
    }
    if body["source"]["payment_rail"] == BRIDGE_WALLET_RAIL
        && s(&body["source"]["bridge_wallet_id"]).is_none()
    {
        return Err(invalid("source.bridge_wallet_id"));
    }
    let rail = body["destination"]["payment_rail"].as_str().unwrap_or_default();
    if CRYPTO_RAILS.contains(&rail) && s(&body["destination"]["to_address"]).is_none() {
        return Err(invalid("destination.to_address"));
    }
    if !CRYPTO_RAILS.contains(&rail) && s(&body["destination"]["external_account_id"]).is_none() {
        return Err(invalid("destination.external_account_id"));
    }
    if body.get("client_reference_id").is_some_and(|c| !c.is_string() && !c.is_null()) {
        return Err(invalid("client_reference_id"));
    }
    if body.get("dry_run").is_some_and(|d| d == true) {
        return Err(error(
            400,
            "bad_request",
            "dry_run is not supported by the simulator",
            Some("dry_run"),
        ));
    }
    Ok(())
}

type Created = (Option<Fault>, Response, Response);

/// What Bridge refuses in a transfer out of one of its wallets, before making anything: an unknown
/// wallet or one of another customer, a source currency the wallet does not hold, an `initiation`
/// missing where the wallet requires it (or sent where it does not: "do not include initiation"),
/// and an amount above the wallet's balance. [INFERRED: Bridge documents `not_found` and
/// `invalid_parameters` (with the field in `source.key`) but no code for each of these cases.]
fn wallet_refusal(st: &crate::core::State, body: &Value) -> Option<Response> {
    if body["source"]["payment_rail"] != BRIDGE_WALLET_RAIL {
        return None;
    }
    let id = body["source"]["bridge_wallet_id"].as_str().unwrap_or_default();
    let Some(wallet) = st.bridge_wallets.get(id).filter(|w| body["on_behalf_of"] == w.customer)
    else {
        // "not_found": "A referenced resource does not exist" (transfer errors, a 400).
        return Some(error(
            400,
            "not_found",
            &format!("Bridge wallet {id} not found for this customer"),
            Some("source.bridge_wallet_id"),
        ));
    };
    let source_currency = body["source"]["currency"].as_str().unwrap_or_default();
    if !source_currency.eq_ignore_ascii_case(&wallet.currency) {
        return Some(error(
            400,
            "invalid_parameters",
            &format!("Bridge wallet {id} holds {}, not {source_currency}", wallet.currency),
            Some("source.currency"),
        ));
    }
    let initiation = body.get("initiation").filter(|i| !i.is_null());
    match (wallet.initiation_required, initiation) {
        (true, None) => {
            return Some(error(
                400,
                "invalid_parameters",
                "This wallet requires an initiation object",
                Some("initiation"),
            ));
        }
        (true, Some(i)) if !i.is_object() => return Some(invalid("initiation")),
        (false, Some(_)) => {
            return Some(error(
                400,
                "invalid_parameters",
                "This wallet does not accept an initiation object",
                Some("initiation"),
            ));
        }
        _ => {}
    }
    let wanted = body["amount"].as_str().and_then(crate::core::e18_of).unwrap_or(0);
    // [INFERRED: Bridge documents no code for a wallet short of the amount; its field error here.]
    if st.held(&wallet.currency) < wanted {
        return Some(error(
            400,
            "invalid_parameters",
            "The source wallet's balance is below the transfer's amount",
            Some("amount"),
        ));
    }
    None
}

#[allow(clippy::too_many_lines)]
// one provider endpoint's documented checks and answers, in the provider's order.
fn create_now(core: &Core, req: &Req) -> Result<Created, Response> {
    let Some(key) = req.header("idempotency-key").filter(|k| !k.is_empty()).map(str::to_string)
    else {
        return Err(error(
            400,
            "bad_request",
            "Idempotency-Key header is required",
            Some("Idempotency-Key"),
        ));
    };
    let body: Value = serde_json::from_str(&req.body)
        .map_err(|_| error(400, "invalid_json", "The request body is not valid JSON", None))?;
    if !body.is_object() {
        return Err(error(400, "invalid_json", "The request body must be a JSON object", None));
    }
    let endpoint = format!("POST {}", req.path);
    let params = canonical(&body);
    let now = core.now_ms();
    let mut st = core.lock();
    if st.refuse_before_key_check() {
        return Err(invalid("to_address"));
    }
    match st.check_idem(&key, &endpoint, &params, now, core.options.key_window_ms) {
        // "any subsequent request with the same Idempotency-Key will return the original response"
        IdemCheck::Replay(saved) => return Err(raw_response(saved.status, saved.body)),
        IdemCheck::OtherParams | IdemCheck::OtherEndpoint => {
            return Err(error(
                400,
                "duplicate_record",
                "Idempotency key was reused with different parameters",
                None,
            ));
        }
        // "After the 24-hour window expires, reusing the same Idempotency-Key will result in a 422 Unprocessable Entity error."
        IdemCheck::Expired => {
            return Err(error(
                422,
                "unprocessable_entity",
                "Idempotency key has expired (older than 24 hours); use a new Idempotency-Key",
                None,
            ));
        }
        IdemCheck::New => {}
    }
    validate(&body)?;
    if let Some(refusal) = wallet_refusal(&st, &body) {
        return Err(refusal);
    }
    let fault = st.faults.pop_front();
    let server_error = || error(500, "internal_server_error", "An unexpected error occurred", None);
    if matches!(fault, Some(Fault::ServerErrorBeforeCreate | Fault::ServerErrorSaved)) {
        return Err(server_error());
    }
    let id = uuid::Uuid::new_v4().to_string();
    let amount = body["amount"].clone();
    let fee = body.get("developer_fee").cloned().unwrap_or(json!("0.0"));
    let dest_currency = body["destination"]["currency"].as_str().unwrap_or_default();
    let currency =
        if ["usd", "eur", "mxn"].contains(&dest_currency) { dest_currency } else { "usd" };
    let gas_fee = st.bridge_gas_fee.clone();
    let final_amount = match (&gas_fee, amount.as_str()) {
        (Some(gas), Some(a)) => json!(less(a, gas)),
        _ => amount.clone(),
    };
    let self_funded =
        body["source"]["payment_rail"].as_str().is_some_and(|r| SELF_FUNDED_RAILS.contains(&r));
    let mut data = json!({"id": id, "client_reference_id": body.get("client_reference_id").cloned().unwrap_or(Value::Null),
        "state": if self_funded { "funds_received" } else { "awaiting_funds" }, "on_behalf_of": body["on_behalf_of"], "amount": amount, "currency": currency,
        "developer_fee": fee, "source": body["source"], "destination": body["destination"],
        "receipt": {"initial_amount": amount, "developer_fee": fee, "exchange_fee": "0.0", "subtotal_amount": amount,
            "gas_fee": gas_fee.clone().unwrap_or_else(|| "0.0".to_owned()), "final_amount": final_amount,
            "url": format!("https://dashboard.bridge.xyz/transaction/{id}/receipt/sim")},
        "created_at": iso(now), "updated_at": iso(now)});
    if !self_funded {
        // Bridge waits for someone to send the amount to these instructions; the simulator's
        // sender never does.
        data["source_deposit_instructions"] = json!({"payment_rail": body["source"]["payment_rail"], "amount": amount,
            "currency": body["source"]["currency"], "to_address": "0x00000000000000000000000000000000000b1d6e", "deposit_message": format!("BRG{}", &id[..8])});
    }
    let reference = body["client_reference_id"].as_str().map(str::to_string);
    let source_currency =
        body["source"]["currency"].as_str().unwrap_or_default().to_ascii_lowercase();
    st.add_object(
        SimObject {
            id,
            kind: "transfer",
            created_ms: now,
            data: data.clone(),
            reference,
            failed: (!self_funded)
                .then(|| (format!("{}awaiting_funds", crate::core::BRIDGE_STATE_PREFIX), now)),
            // The whole amount leaves the wallet; Bridge's fees come out of it, not on top.
            took: vec![(
                source_currency,
                amount.as_str().and_then(crate::core::e18_of).unwrap_or(0),
            )],
        },
        core.options.objects_max,
    );
    // The saved answer is the created transfer, also after a 5xx fault: the transfer was committed.
    st.save_idem(
        &key,
        Saved { endpoint, params, status: CREATED_STATUS, body: data.to_string(), at_ms: now },
    );
    Ok((fault, json_response(CREATED_STATUS, &data), server_error()))
}

/// `a - b` for positive decimal texts, with the larger number of decimals (at most 18), never below zero.
fn less(a: &str, b: &str) -> String {
    let decimals = |t: &str| t.split_once('.').map_or(0, |(_, f)| f.len());
    let places = decimals(a).max(decimals(b)).min(18);
    let scaled = |t: &str| -> i128 {
        let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
        let frac: String = frac.chars().chain(std::iter::repeat('0')).take(places).collect();
        format!("{whole}{frac}").parse().unwrap_or(0)
    };
    let rest = (scaled(a) - scaled(b)).max(0);
    if places == 0 {
        return rest.to_string();
    }
    let p = 10i128.pow(places as u32);
    format!("{}.{:0width$}", rest / p, rest % p, width = places)
}

/// The transfer as Bridge shows it now: funds_received, payment_submitted, payment_processed, one per step; or the state it was put in (error, refunded, awaiting_funds, returned, ...).
fn render(core: &Core, o: &SimObject, now: u64) -> Value {
    let mut v = o.data.clone();
    let step = core.options.step_ms;
    if let Some((reason, at)) = &o.failed {
        // "error": "requires manual review or developer action". Bridge documents no reason field.
        v["state"] = match reason.strip_prefix(crate::core::BRIDGE_STATE_PREFIX) {
            Some(state) => json!(state),
            None if reason == crate::core::BRIDGE_REFUNDED => json!("refunded"),
            None => json!("error"),
        };
        v["updated_at"] = json!(iso(*at));
        return v;
    }
    let steps = core.steps(o.created_ms, now).min(2);
    v["state"] =
        json!(["funds_received", "payment_submitted", "payment_processed"][steps as usize]);
    v["updated_at"] = json!(iso(o.created_ms + steps * step));
    if steps == 2 && v["destination"]["to_address"].is_string() {
        v["receipt"]["destination_tx_hash"] = json!(fake_tx_hash(&o.id));
    }
    v
}

fn updated_ms(core: &Core, o: &SimObject, now: u64) -> u64 {
    match &o.failed {
        Some((_, at)) => *at,
        None => o.created_ms + core.steps(o.created_ms, now).min(2) * core.options.step_ms,
    }
}

fn get(core: &Core, id: &str) -> Response {
    let now = core.now_ms();
    let st = core.lock();
    match st.object("transfer", id) {
        Some(o) => json_response(200, &render(core, o, now)),
        None => error(404, "not_found", &format!("Transfer {id} not found"), None),
    }
}

/// The developer's transfers, or those of `customer` only (made on its behalf), newest first.
fn list(core: &Core, req: &Req, customer: Option<&str>) -> Response {
    let q = req.query_pairs();
    let qget = |n: &str| q.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let limit = match qget("limit").map(|l| l.parse::<usize>()) {
        None => DEFAULT_LIMIT,
        Some(Ok(l)) if (1..=MAX_LIMIT).contains(&l) => l,
        Some(_) => return invalid("limit"),
    };
    // "starting_after, ending_before, updated_before_ms and updated_after_ms are mutually exclusive"
    let exclusive = ["starting_after", "ending_before", "updated_after_ms", "updated_before_ms"];
    if exclusive.iter().filter(|n| qget(n).is_some()).count() > 1 {
        return error(
            400,
            "invalid_parameters",
            "starting_after, ending_before, updated_after_ms and updated_before_ms are mutually exclusive",
            None,
        );
    }
    let mut ms_bound = None;
    for (name, after) in [("updated_after_ms", true), ("updated_before_ms", false)] {
        if let Some(v) = qget(name) {
            let Ok(ms) = v.parse::<u64>() else {
                return invalid(name);
            };
            ms_bound = Some((after, ms));
        }
    }
    let now = core.now_ms();
    let st = core.lock();
    // Rendered only as far as a page needs: a busy account's history runs to 100,000s.
    let all: Vec<&SimObject> = st
        .newest_first("transfer", now)
        .into_iter()
        .filter(|o| customer.is_none_or(|c| o.data["on_behalf_of"] == c))
        .collect();
    let (state, tx_hash) = (qget("state"), qget("tx_hash"));
    let keep = |o: &&SimObject| -> bool {
        let updated = updated_ms(core, o, now);
        if !ms_bound.is_none_or(|(after, ms)| if after { updated > ms } else { updated < ms }) {
            return false;
        }
        if state.is_none() && tx_hash.is_none() {
            return true;
        }
        let v = render(core, o, now);
        state.as_ref().is_none_or(|s| v["state"] == s.as_str())
            && tx_hash.as_ref().is_none_or(|h| v["receipt"]["destination_tx_hash"] == h.as_str())
    };
    let position = |id: &str| all.iter().position(|o| o.id == id);
    let kept: Vec<&SimObject> = if let Some(c) = qget("starting_after") {
        let Some(i) = position(&c) else {
            return invalid("starting_after");
        };
        all[i + 1..].iter().copied().filter(keep).take(limit).collect()
    } else if let Some(c) = qget("ending_before") {
        let Some(i) = position(&c) else {
            return invalid("ending_before");
        };
        let newer: Vec<&SimObject> = all[..i].iter().copied().filter(keep).collect();
        newer[newer.len().saturating_sub(limit)..].to_vec()
    } else {
        all.iter().copied().filter(keep).take(limit).collect()
    };
    let data: Vec<Value> = kept.into_iter().map(|o| render(core, o, now)).collect();
    json_response(200, &json!({"count": data.len(), "data": data}))
}

/// `GET /v0/customers/{customerID}/wallets/{bridgeWalletID}`: the wallet with its balance of the
/// currency it holds, as a decimal string, and `initiation_required` where its transfers need one.
fn wallet_of(core: &Core, customer: &str, id: &str) -> Response {
    let st = core.lock();
    let Some(wallet) = st.bridge_wallets.get(id).filter(|w| w.customer == customer) else {
        return error(404, "not_found", &format!("Bridge wallet {id} not found"), None);
    };
    let balance = crate::core::decimal_of_e18(st.held(&wallet.currency), BALANCE_DECIMALS);
    let mut answer = json!({"id": id, "chain": "ethereum", "address": "0x00000000000000000000000000000000000b1d6e",
        "customer_id": customer, "created_at": iso(0), "updated_at": iso(0),
        "balances": [{"balance": balance, "currency": wallet.currency, "chain": "ethereum",
            "contract_address": "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"}]});
    if wallet.initiation_required {
        answer["initiation_required"] = json!(true);
    }
    json_response(200, &answer)
}
