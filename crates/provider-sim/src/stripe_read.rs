//! Stripe reads: one transfer or payout as it stands now, and the newest-first lists with cursors and filters.

use axum::response::Response;
use serde_json::{Value, json};

use crate::core::{Core, Req, SimObject, json_response};
use crate::stripe::{error, invalid, with_request_id};

/// The object as Stripe shows it now.
fn render(core: &Core, o: &SimObject, now: u64) -> Value {
    let mut v = o.data.clone();
    if o.kind == "payout" {
        let status = match (&o.failed, core.steps(o.created_ms, now)) {
            (Some(_), _) => "failed",
            (None, 0) => "pending",
            (None, 1) => "in_transit",
            (None, _) => "paid",
        };
        v["status"] = json!(status);
        if let Some((reason, _)) = &o.failed {
            v["failure_code"] = json!(reason);
            v["failure_message"] = json!(format!("The payout failed: {reason}."));
            v["failure_balance_transaction"] = json!(format!("txn_fail_{}", &o.id[3..]));
        }
    } else if let Some((reason, at)) = &o.failed {
        // A failed transfer is reported as a full reversal.
        let amount = v["amount"].clone();
        let reversal = json!({"id": format!("trr_{}", &o.id[3..]), "object": "transfer_reversal", "amount": amount,
            "balance_transaction": format!("txn_rev_{}", &o.id[3..]), "created": at / 1000, "currency": v["currency"],
            "destination_payment_refund": format!("pyr_{}", &o.id[3..]), "metadata": {"payoutd_sim_reason": reason},
            "source_refund": null, "transfer": o.id});
        v["amount_reversed"] = amount;
        v["reversed"] = json!(true);
        v["reversals"]["data"] = json!([reversal]);
    }
    v
}

pub(crate) fn get(core: &Core, kind: &str, id: &str) -> Response {
    let now = core.now_ms();
    let st = core.lock();
    match st.object(kind, id) {
        Some(o) => with_request_id(json_response(200, &render(core, o, now))),
        None => error(
            404,
            "invalid_request_error",
            Some("resource_missing"),
            &format!("No such {kind}: '{id}'"),
            Some("id"),
        ),
    }
}

#[allow(clippy::too_many_lines)]
// one provider endpoint's documented checks and answers, in the provider's order.
pub(crate) fn list(core: &Core, req: &Req, kind: &str) -> Response {
    let q = req.query_pairs();
    let qget = |n: &str| q.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let limit = match qget("limit").map(|l| l.parse::<usize>()) {
        None => 10,
        Some(Ok(l)) if (1..=100).contains(&l) => l,
        Some(_) => {
            return invalid(None, "Invalid limit: must be an integer from 1 to 100.", "limit");
        }
    };
    let mut created_bounds = Vec::new();
    for (k, v) in &q {
        let op = match k.as_str() {
            "created" => "eq",
            "created[gt]" => "gt",
            "created[gte]" => "gte",
            "created[lt]" => "lt",
            "created[lte]" => "lte",
            _ => continue,
        };
        let Ok(t) = v.parse::<i64>() else {
            return invalid(None, &format!("Invalid integer: {v}"), k);
        };
        created_bounds.push((op, t));
    }
    let (after, before) = (qget("starting_after"), qget("ending_before"));
    if after.is_some() && before.is_some() {
        return invalid(
            None,
            "You may only specify one of these parameters: starting_after, ending_before.",
            "ending_before",
        );
    }
    let now = core.now_ms();
    let st = core.lock();
    let all: Vec<Value> =
        st.newest_first(kind, now).into_iter().map(|o| render(core, o, now)).collect();
    let keep = |v: &Value| {
        let created = v["created"].as_i64().unwrap_or(0);
        let field_ok =
            |name: &str| qget(name).is_none_or(|want| v[name].as_str() == Some(want.as_str()));
        field_ok("transfer_group")
            && field_ok("destination")
            && field_ok("status")
            && created_bounds.iter().all(|(op, t)| match *op {
                "eq" => created == *t,
                "gt" => created > *t,
                "gte" => created >= *t,
                "lt" => created < *t,
                _ => created <= *t,
            })
    };
    let position = |cursor: &str, param: &str| {
        all.iter().position(|v| v["id"] == cursor).ok_or_else(|| {
            invalid(Some("resource_missing"), &format!("No such {kind}: '{cursor}'"), param)
        })
    };
    let (data, has_more) = if let Some(c) = after {
        let i = match position(&c, "starting_after") {
            Ok(i) => i,
            Err(r) => return r,
        };
        let rest: Vec<&Value> = all[i + 1..].iter().filter(|v| keep(v)).collect();
        (rest.iter().take(limit).map(|v| (*v).clone()).collect::<Vec<_>>(), rest.len() > limit)
    } else if let Some(c) = before {
        let i = match position(&c, "ending_before") {
            Ok(i) => i,
            Err(r) => return r,
        };
        let newer: Vec<&Value> = all[..i].iter().filter(|v| keep(v)).collect();
        let start = newer.len().saturating_sub(limit);
        (newer[start..].iter().map(|v| (*v).clone()).collect(), start > 0)
    } else {
        let rest: Vec<&Value> = all.iter().filter(|v| keep(v)).collect();
        (rest.iter().take(limit).map(|v| (*v).clone()).collect(), rest.len() > limit)
    };
    with_request_id(json_response(
        200,
        &json!({"object": "list", "data": data, "has_more": has_more, "url": format!("/v1/{kind}s")}),
    ))
}

/// `GET /v1/balance`: the platform's funds per currency it has used, all `available` (the
/// simulator settles charges at once); transfers and payouts draw on it, a reversal gives back.
pub(crate) fn balance(core: &Core) -> Response {
    let st = core.lock();
    // The platform's default currency is listed before anything moved it.
    let usd = "usd".to_owned();
    let mut currencies: Vec<&String> = st.purse.keys().chain(std::iter::once(&usd)).collect();
    currencies.sort();
    currencies.dedup();
    let funds = |c: &String| json!({"amount": i64::try_from(st.held(c)).unwrap_or(i64::MAX), "currency": c, "source_types": {"card": i64::try_from(st.held(c)).unwrap_or(i64::MAX)}});
    let available: Vec<Value> = currencies.iter().map(|c| funds(c)).collect();
    let pending: Vec<Value> = currencies
        .iter()
        .map(|c| json!({"amount": 0, "currency": c, "source_types": {"card": 0}}))
        .collect();
    json_response(
        200,
        &json!({"object": "balance", "available": available, "pending": pending, "livemode": false}),
    )
}
