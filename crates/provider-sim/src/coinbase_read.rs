//! Coinbase CDP v2 reads: one transfer as it stands now, and the paged list with filters.

use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};

use crate::coinbase::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, error};
use crate::core::{Core, Req, SimObject, fake_tx_hash, iso, json_response, parse_iso};

/// The transfer as CDP shows it now: processing, then completed one step later (or failed).
fn render(core: &Core, o: &SimObject, now: u64) -> Value {
    let mut v = o.data.clone();
    if v["status"] == "quoted" {
        return v;
    }
    if let Some((reason, at)) = &o.failed {
        v["status"] = json!("failed");
        v["failureReason"] = json!(reason);
        v["updatedAt"] = json!(iso(*at));
    } else if core.steps(o.created_ms, now) >= 1 {
        let done = iso(o.created_ms + core.options.step_ms);
        v["status"] = json!("completed");
        v["completedAt"] = json!(done);
        v["updatedAt"] = json!(done);
        if let Some(network) = v["target"]["network"].as_str() {
            v["details"] = json!({"onchainTransactions": [{"transactionHash": fake_tx_hash(&o.id), "network": network}]});
        }
    }
    v
}

pub(crate) fn get(core: &Core, id: &str) -> Response {
    let valid = id.strip_prefix("transfer_").is_some_and(|u| {
        u.len() == 36
            && u.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase() || b == b'-')
    });
    if !valid {
        return error(400, "invalid_request", "transferId must match ^transfer_[a-f0-9-]{36}$.");
    }
    let now = core.now_ms();
    let st = core.lock();
    match st.object("transfer", id) {
        Some(o) => json_response(200, &render(core, o, now)),
        None => error(404, "not_found", &format!("Transfer {id} not found.")),
    }
}

#[allow(clippy::too_many_lines)]
// one provider endpoint's documented checks and answers, in the provider's order.
pub(crate) fn list(core: &Core, req: &Req) -> Response {
    let q: Map<String, Value> = req.query_pairs().into_iter().map(|(k, v)| (k, json!(v))).collect();
    let qs = |k: &str| q.get(k).and_then(Value::as_str);
    let page_size = match qs("pageSize").map(str::parse::<usize>) {
        None => DEFAULT_PAGE_SIZE,
        Some(Ok(n)) if (1..=MAX_PAGE_SIZE).contains(&n) => n,
        Some(_) => {
            return error(400, "invalid_request", "pageSize must be an integer from 1 to 100.");
        }
    };
    if qs("accountId").is_some()
        && (qs("sourceAccountId").is_some() || qs("targetAccountId").is_some())
    {
        return error(
            400,
            "invalid_request",
            "accountId cannot be combined with sourceAccountId or targetAccountId.",
        );
    }
    let mut bounds = Vec::new();
    for (name, field, after) in [
        ("createdAfter", "createdAt", true),
        ("createdBefore", "createdAt", false),
        ("updatedAfter", "updatedAt", true),
        ("updatedBefore", "updatedAt", false),
    ] {
        if let Some(t) = qs(name) {
            let Some(ms) = parse_iso(t) else {
                return error(
                    400,
                    "invalid_request",
                    &format!("{name} must be an ISO-8601 UTC time."),
                );
            };
            bounds.push((field, after, ms));
        }
    }
    let cursor = match qs("pageToken").filter(|t| !t.is_empty()) {
        None => None,
        Some(t) => match URL_SAFE_NO_PAD.decode(t).ok().and_then(|b| String::from_utf8(b).ok()) {
            Some(id) => Some(id),
            None => return error(400, "invalid_request", "Invalid pageToken."),
        },
    };
    let now = core.now_ms();
    let st = core.lock();
    let keep = |v: &Value| {
        let eq = |param: &str, got: &Value| qs(param).is_none_or(|want| got.as_str() == Some(want));
        let account = qs("accountId")
            .is_none_or(|a| v["source"]["accountId"] == a || v["target"]["accountId"] == a);
        account
            && eq("status", &v["status"])
            && eq("transferId", &v["transferId"])
            && eq("sourceAccountId", &v["source"]["accountId"])
            && eq("targetAccountId", &v["target"]["accountId"])
            && eq("sourceAsset", &v["sourceAsset"])
            && eq("targetAsset", &v["targetAsset"])
            && eq("targetAddress", &v["target"]["address"])
            && eq("targetEmail", &v["target"]["email"])
            && bounds.iter().all(|(field, after, ms)| {
                let t = v[*field].as_str().and_then(parse_iso).unwrap_or(0);
                if *after { t >= *ms } else { t <= *ms }
            })
    };
    // Newest first [INFERRED: the spec does not state the order].
    // The creation bounds read first from the object (what `createdAt` says), so a long history
    // is not rendered whole for each page.
    let created_within = |o: &&crate::core::SimObject| {
        bounds
            .iter()
            .filter(|(field, _, _)| *field == "createdAt")
            .all(|(_, after, ms)| if *after { o.created_ms >= *ms } else { o.created_ms <= *ms })
    };
    let all: Vec<Value> = st
        .newest_first("transfer", now)
        .into_iter()
        .filter(created_within)
        .map(|o| render(core, o, now))
        .filter(|v| keep(v))
        .collect();
    let start = match &cursor {
        None => 0,
        Some(id) => match all.iter().position(|v| v["transferId"] == id.as_str()) {
            Some(i) => i + 1,
            None => return error(400, "invalid_request", "Invalid pageToken."),
        },
    };
    let page: Vec<Value> = all.iter().skip(start).take(page_size).cloned().collect();
    let mut body = json!({ "transfers": page });
    if start + page_size < all.len() {
        let last = page.last().and_then(|v| v["transferId"].as_str()).unwrap_or_default();
        body["nextPageToken"] = json!(URL_SAFE_NO_PAD.encode(last));
    }
    json_response(200, &body)
}

/// `GET /v2/accounts/{accountId}/balances/{asset}`: the account's balance of one asset, `available`
/// and `total` alike (the simulator holds nothing back), denominated in the asset itself.
pub(crate) fn balance(core: &Core, account: &str, asset: &str) -> Response {
    if !crate::coinbase::account_id_ok(account) {
        return error(400, "invalid_request", "accountId must be `account_` followed by a UUID.");
    }
    let (name, decimals) = match asset {
        "usdc" => ("USD Coin", 6),
        "eurc" => ("Euro Coin", 6),
        "usd" | "eur" => ("Fiat", 2),
        _ => return error(404, "not_found", &format!("No balance of asset {asset}.")),
    };
    let kind = if decimals == 2 { "fiat" } else { "crypto" };
    let held = crate::core::decimal_of_e18(core.lock().held(asset), decimals);
    json_response(
        200,
        &json!({"asset": {"symbol": asset, "type": kind, "name": name, "decimals": decimals},
        "amount": {asset: {"available": held, "total": held}}}),
    )
}
