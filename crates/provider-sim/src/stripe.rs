//! Stripe: transfers and payouts (form bodies), lookups, lists, Idempotency-Key replays of the saved status and body.

use axum::http::HeaderValue;
use axum::response::Response;
use base64::Engine;
use serde_json::{Map, Value, json};

use crate::Fault;
use crate::core::{
    Core, IdemCheck, Req, Saved, SimObject, answer_created, json_response, raw_response,
};

/// The platform's starting balance per currency, in minor units.
pub const PLATFORM_BALANCE: i64 = 1_000_000_000_000;
const CURRENCIES: &[&str] = &[
    "usd", "eur", "gbp", "cad", "aud", "nzd", "jpy", "chf", "sek", "nok", "dkk", "pln", "czk",
    "huf", "ron", "bgn", "mxn", "brl", "sgd", "hkd", "inr", "thb", "myr", "aed",
];
const TRANSFER_PARAMS: &[&str] = &[
    "amount",
    "currency",
    "description",
    "destination",
    "source_transaction",
    "source_type",
    "transfer_group",
];
const PAYOUT_PARAMS: &[&str] = &[
    "amount",
    "currency",
    "description",
    "destination",
    "method",
    "source_type",
    "statement_descriptor",
];
const MAX_METADATA_KEYS: usize = 50;

pub(crate) fn error(
    status: u16,
    kind: &str,
    code: Option<&str>,
    message: &str,
    param: Option<&str>,
) -> Response {
    let mut e = Map::new();
    e.insert("type".into(), json!(kind));
    e.insert("message".into(), json!(message));
    if let Some(c) = code {
        e.insert("code".into(), json!(c));
        e.insert(
            "doc_url".into(),
            json!(format!("https://stripe.com/docs/error-codes/{}", c.replace('_', "-"))),
        );
    }
    if let Some(p) = param {
        e.insert("param".into(), json!(p));
    }
    with_request_id(json_response(status, &json!({ "error": e })))
}

pub(crate) fn invalid(code: Option<&str>, message: &str, param: &str) -> Response {
    error(400, "invalid_request_error", code, message, Some(param))
}

pub(crate) fn with_request_id(mut r: Response) -> Response {
    let id = format!("req_{}", &uuid::Uuid::new_v4().simple().to_string()[..14]);
    r.headers_mut().insert("request-id", HeaderValue::from_str(&id).expect("ascii"));
    r
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", &uuid::Uuid::new_v4().simple().to_string()[..24])
}

fn auth_ok(core: &Core, req: &Req) -> bool {
    if core.bearer_ok(&req.headers) {
        return true;
    }
    // Basic auth with the key as the user name is also accepted by Stripe.
    let basic = req.header("authorization").and_then(|v| v.strip_prefix("Basic "));
    let decoded = basic.and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
    decoded.is_some_and(|d| {
        String::from_utf8_lossy(&d).split(':').next() == Some(core.options.api_key.as_str())
    })
}

pub async fn handle(core: &Core, req: Req) -> Response {
    if !auth_ok(core, &req) {
        let message = match req.header("authorization") {
            None => {
                "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."
            }
            Some(_) => "Invalid API Key provided.",
        };
        return error(401, "invalid_request_error", None, message, None);
    }
    let segs: Vec<String> =
        req.segments("/v1/").unwrap_or_default().into_iter().map(str::to_string).collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    match (req.method.as_str(), segs.as_slice()) {
        ("POST", ["transfers"]) => create(core, req, "transfer").await,
        ("POST", ["payouts"]) => create(core, req, "payout").await,
        ("GET", ["transfers"]) => crate::stripe_read::list(core, &req, "transfer"),
        ("GET", ["payouts"]) => crate::stripe_read::list(core, &req, "payout"),
        ("GET", ["transfers", id]) => crate::stripe_read::get(core, "transfer", id),
        ("GET", ["payouts", id]) => crate::stripe_read::get(core, "payout", id),
        ("GET", ["balance"]) => crate::stripe_read::balance(core),
        _ => error(
            404,
            "invalid_request_error",
            None,
            &format!("Unrecognized request URL ({}: {}).", req.method, req.path),
            None,
        ),
    }
}

/// Checks the params of a create; an error here is not saved under the idempotency key.
#[allow(clippy::too_many_lines)]
// one provider endpoint's documented checks and answers, in the provider's order.
fn validate(
    kind: &str,
    params: &[(String, String)],
    account: Option<&str>,
) -> Result<(i64, String), Response> {
    let allowed = if kind == "transfer" { TRANSFER_PARAMS } else { PAYOUT_PARAMS };
    let mut metadata = 0;
    for (k, v) in params {
        if let Some(mk) = k.strip_prefix("metadata[").and_then(|r| r.strip_suffix(']')) {
            metadata += 1;
            if mk.is_empty() || mk.len() > 40 || v.len() > 500 || metadata > MAX_METADATA_KEYS {
                return Err(invalid(
                    None,
                    "Invalid metadata: at most 50 keys, keys up to 40 characters, values up to 500 characters.",
                    "metadata",
                ));
            }
        } else if k != "expand[]" && !allowed.contains(&k.as_str()) {
            return Err(invalid(
                Some("parameter_unknown"),
                &format!("Received unknown parameter: {k}"),
                k,
            ));
        }
    }
    let get = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let missing =
        |p: &str| invalid(Some("parameter_missing"), &format!("Missing required param: {p}."), p);
    let amount = get("amount").ok_or_else(|| missing("amount"))?;
    let amount: i64 = amount.parse().map_err(|_| {
        invalid(Some("parameter_invalid_integer"), &format!("Invalid integer: {amount}"), "amount")
    })?;
    if amount < 1 {
        return Err(invalid(
            Some("parameter_invalid_integer"),
            "This value must be greater than or equal to 1.",
            "amount",
        ));
    }
    let currency = get("currency").ok_or_else(|| missing("currency"))?.to_ascii_lowercase();
    if !CURRENCIES.contains(&currency.as_str()) {
        return Err(invalid(
            None,
            &format!(
                "Invalid currency: {currency}. Stripe currently supports these currencies: {}",
                CURRENCIES.join(", ")
            ),
            "currency",
        ));
    }
    if let Some(st) = get("source_type").filter(|s| !["bank_account", "card", "fpx"].contains(s)) {
        return Err(invalid(
            None,
            &format!("Invalid source_type: must be one of bank_account, card or fpx (got {st})"),
            "source_type",
        ));
    }
    if kind == "transfer" {
        let dest = get("destination").ok_or_else(|| missing("destination"))?;
        if !dest.starts_with("acct_") {
            return Err(invalid(
                Some("resource_missing"),
                &format!("No such destination: '{dest}'"),
                "destination",
            ));
        }
    } else {
        if let Some(m) = get("method").filter(|m| !["standard", "instant"].contains(m)) {
            return Err(invalid(
                None,
                &format!("Invalid method: must be one of standard or instant (got {m})"),
                "method",
            ));
        }
        if get("statement_descriptor").is_some_and(|s| s.chars().count() > 22) {
            return Err(invalid(
                None,
                "The statement descriptor must be at most 22 characters.",
                "statement_descriptor",
            ));
        }
        if let Some(a) = account.filter(|a| !a.starts_with("acct_")) {
            return Err(error(
                403,
                "invalid_request_error",
                Some("account_invalid"),
                &format!(
                    "The provided key does not have access to account '{a}' (or that account does not exist)."
                ),
                None,
            ));
        }
    }
    Ok((amount, currency))
}

async fn create(core: &Core, req: Req, kind: &'static str) -> Response {
    match create_now(core, &req, kind) {
        Step::Done(r) => r,
        Step::Answer(fault, success, error_answer) => {
            answer_created(fault, &req.conn, success, error_answer).await
        }
    }
}

/// A create's answer, or the parts of an answer a fault decides between.
enum Step {
    Done(Response),
    Answer(Option<Fault>, Response, Response),
}

#[allow(clippy::too_many_lines)]
// one provider endpoint's documented checks and answers, in the provider's order.
fn create_now(core: &Core, req: &Req, kind: &'static str) -> Step {
    let Ok(params) = serde_urlencoded::from_str::<Vec<(String, String)>>(&req.body) else {
        return Step::Done(error(
            400,
            "invalid_request_error",
            None,
            "Invalid request body: expected application/x-www-form-urlencoded.",
            None,
        ));
    };
    let account = req.header("stripe-account").map(str::to_string);
    let endpoint = format!("POST {}", req.path);
    let mut sorted = params.clone();
    sorted.sort();
    let canonical = json!([sorted, account]).to_string();
    let key = req.header("idempotency-key").map(str::to_string);
    if key.as_ref().is_some_and(|k| k.is_empty() || k.len() > 255) {
        return Step::Done(error(
            400,
            "invalid_request_error",
            None,
            "Idempotency keys must be 1 to 255 characters long.",
            None,
        ));
    }
    let now = core.now_ms();
    let mut st = core.lock();
    if st.refuse_before_key_check() {
        return Step::Done(invalid(
            None,
            "Invalid destination: the account could not be validated",
            "destination",
        ));
    }
    if let Some(k) = &key {
        match st.check_idem(k, &endpoint, &canonical, now, core.options.key_window_ms) {
            IdemCheck::Replay(saved) => return Step::Done(replayed(saved, k)),
            IdemCheck::OtherParams => {
                let m = format!(
                    "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '{k}' if you meant to execute a different request."
                );
                return Step::Done(error(400, "idempotency_error", None, &m, None));
            }
            IdemCheck::OtherEndpoint => {
                let m = format!(
                    "Keys for idempotent requests can only be used for the same endpoint they were first used for ('{}' vs '{endpoint}'). Try using a key other than '{k}' if you meant to execute a different request.",
                    st.saved(k).map(|s| s.endpoint.clone()).unwrap_or_default()
                );
                return Step::Done(error(400, "idempotency_error", None, &m, None));
            }
            // Stripe prunes keys after 24 h and "generates a new request if a key is reused after the original is pruned".
            IdemCheck::Expired | IdemCheck::New => {}
        }
    }
    let (amount, currency) = match validate(kind, &params, account.as_deref()) {
        Ok(v) => v,
        Err(r) => return Step::Done(r),
    };
    // A connected account the platform does not have (Stripe documents no code for it; the one
    // it answers for an id it does not know).
    let destination = params.iter().find(|(k, _)| k == "destination").map(|(_, v)| v.as_str());
    if let Some(unknown) = destination.filter(|d| kind == "transfer" && !st.accounts.contains(*d)) {
        let m = format!("No such destination: '{unknown}'");
        return Step::Done(invalid(Some("resource_missing"), &m, "destination"));
    }
    // "balance_insufficient": the platform's available balance cannot cover the transfer.
    if st.held(&currency) < i128::from(amount) {
        return Step::Done(error(
            400,
            "invalid_request_error",
            Some("balance_insufficient"),
            "You have insufficient available funds in your Stripe account.",
            None,
        ));
    }
    let fault = st.faults.pop_front();
    if fault == Some(Fault::ServerErrorBeforeCreate) {
        return Step::Done(error(500, "api_error", None, "An unknown error occurred", None));
    }
    let save = |st: &mut crate::core::State, status: u16, body: String| {
        if let Some(k) = &key {
            st.save_idem(
                k,
                Saved {
                    endpoint: endpoint.clone(),
                    params: canonical.clone(),
                    status,
                    body,
                    at_ms: now,
                },
            );
        }
    };
    if fault == Some(Fault::ServerErrorSaved) {
        // Execution began and failed: the 500 is saved for the key, nothing was made.
        let body = json!({"error": {"type": "api_error", "message": "An unknown error occurred"}});
        save(&mut st, 500, body.to_string());
        return Step::Done(with_key(with_request_id(json_response(500, &body)), key.as_deref()));
    }
    if i128::from(amount) > st.held(&currency) {
        // Execution began, so this answer is saved for replays.
        let body = json!({"error": {"type": "invalid_request_error", "code": "balance_insufficient",
            "doc_url": "https://stripe.com/docs/error-codes/balance-insufficient",
            "message": "You have insufficient available funds in your Stripe account. Try adding funds directly to your available balance by creating Charges using the 4000000000000077 test card."}});
        save(&mut st, 400, body.to_string());
        return Step::Done(with_request_id(json_response(400, &body)));
    }
    let get = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let metadata: Map<String, Value> = params
        .iter()
        .filter_map(|(k, v)| {
            Some((k.strip_prefix("metadata[")?.strip_suffix(']')?.to_string(), json!(v)))
        })
        .collect();
    let reference = metadata.get("payoutd_reference").and_then(Value::as_str).map(str::to_string);
    let created = now / 1000;
    let (id, data, reference) = if kind == "transfer" {
        let id = new_id("tr");
        let data = json!({"id": id, "object": "transfer", "amount": amount, "amount_reversed": 0,
            "balance_transaction": new_id("txn"), "created": created, "currency": currency,
            "description": get("description"), "destination": get("destination"), "destination_payment": new_id("py"),
            "livemode": false, "metadata": metadata,
            "reversals": {"object": "list", "data": [], "has_more": false, "url": format!("/v1/transfers/{id}/reversals")},
            "reversed": false, "source_transaction": get("source_transaction"),
            "source_type": get("source_type").unwrap_or_else(|| "card".into()), "transfer_group": get("transfer_group")});
        (id, data, reference.or_else(|| get("transfer_group")))
    } else {
        let id = new_id("po");
        let data = json!({"id": id, "object": "payout", "amount": amount, "arrival_date": created + 86_400, "automatic": false,
            "balance_transaction": new_id("txn"), "created": created, "currency": currency, "description": get("description"),
            "destination": get("destination").unwrap_or_else(|| "ba_sim_default".into()), "failure_balance_transaction": null,
            "failure_code": null, "failure_message": null, "livemode": false, "metadata": metadata,
            "method": get("method").unwrap_or_else(|| "standard".into()), "original_payout": null,
            "reconciliation_status": "not_applicable", "reversed_by": null,
            "source_type": get("source_type").unwrap_or_else(|| "card".into()),
            "statement_descriptor": get("statement_descriptor"), "status": "pending", "type": "bank_account"});
        (id, data, reference)
    };
    st.add_object(
        SimObject {
            id,
            kind,
            created_ms: now,
            data: data.clone(),
            reference,
            failed: None,
            took: vec![(currency.clone(), i128::from(amount))],
        },
        core.options.objects_max,
    );
    let server_error =
        json!({"error": {"type": "api_error", "message": "An unknown error occurred"}});
    if fault == Some(Fault::ServerErrorAfterCreate) {
        // Stripe: "Retries with the same key return the saved response, including 500 errors."
        save(&mut st, 500, server_error.to_string());
    } else {
        save(&mut st, 200, data.to_string());
    }
    drop(st);
    let success = with_key(with_request_id(json_response(200, &data)), key.as_deref());
    let error_answer = if fault == Some(Fault::UnknownErrorAfterCreate) {
        // An error type Stripe documents nowhere (one added after the adapter was written).
        let unknown = json!({"error": {"type": "sim_undocumented_error", "message": "An error of a type the docs do not list"}});
        with_key(with_request_id(json_response(400, &unknown)), key.as_deref())
    } else {
        with_key(with_request_id(json_response(500, &server_error)), key.as_deref())
    };
    Step::Answer(fault, success, error_answer)
}

fn with_key(mut r: Response, key: Option<&str>) -> Response {
    if let Some(v) = key.and_then(|k| HeaderValue::from_str(k).ok()) {
        r.headers_mut().insert("idempotency-key", v);
    }
    r
}

fn replayed(saved: Saved, key: &str) -> Response {
    let mut r = with_key(with_request_id(raw_response(saved.status, saved.body)), Some(key));
    r.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    r
}
