//! The OpenAPI document names every route the router serves, and every operation that takes a key
//! documents the 401 it can answer.

use payoutd_api::ApiDoc;
use serde_json::Value;
use utoipa::OpenApi;

/// Every (method, path) the router serves under /v1, kept beside `payoutd_api::router`.
const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/payouts"),
    ("get", "/v1/payouts"),
    ("get", "/v1/payouts/{id}"),
    ("post", "/v1/payouts/{id}/cancel"),
    ("post", "/v1/payouts/{id}/approve"),
    ("post", "/v1/payouts/{id}/reject"),
    ("post", "/v1/payouts/{id}/resolve"),
    ("get", "/v1/payouts/{id}/attempts"),
    ("get", "/v1/incidents"),
    ("post", "/v1/incidents/{id}/resolve"),
    ("post", "/v1/webhook_endpoints"),
    ("get", "/v1/webhook_endpoints"),
    ("delete", "/v1/webhook_endpoints/{id}"),
    ("post", "/v1/webhook_endpoints/{id}/rotate_secret"),
    ("get", "/v1/events"),
    ("get", "/v1/events/{id}"),
    ("get", "/v1/events/{id}/deliveries"),
    ("post", "/v1/events/{id}/redispatch"),
    ("post", "/v1/transfers"),
    ("get", "/v1/transfers/{id}"),
    ("post", "/v1/merchants/{id}/api_keys"),
    ("get", "/v1/merchants/{id}/api_keys"),
    ("delete", "/v1/api_keys/{id}"),
    ("post", "/v1/payout_batches"),
    ("get", "/v1/payout_batches/{id}"),
    ("get", "/v1/balances"),
    ("get", "/v1/statements"),
    ("post", "/v1/deposits"),
];

#[test]
fn every_route_is_documented_with_its_401() {
    let doc: Value = serde_json::to_value(ApiDoc::openapi()).unwrap();
    let mut missing = Vec::new();
    let mut without_401 = Vec::new();
    for (method, path) in ROUTES {
        match doc["paths"][*path].get(*method) {
            None => missing.push(format!("{method} {path}")),
            Some(op) => {
                if op.get("security").is_some() && op["responses"].get("401").is_none() {
                    without_401.push(format!("{method} {path}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "routes missing from the OpenAPI document: {missing:?}");
    assert!(
        without_401.is_empty(),
        "operations that take a key but document no 401: {without_401:?}"
    );
    let documented: usize =
        doc["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(
        documented,
        ROUTES.len(),
        "the document names an operation the router does not serve"
    );
}

#[test]
fn the_limits_the_server_enforces_are_in_the_schemas() {
    let doc: Value = serde_json::to_value(ApiDoc::openapi()).unwrap();
    let schema = |name: &str| doc["components"]["schemas"][name]["properties"].clone();
    let amount_pattern = "^[1-9][0-9]{0,77}$";
    for name in ["CreatePayoutBody", "CreateDepositBody", "CreateTransferBody", "BatchLineBody"] {
        assert_eq!(schema(name)["amount"]["pattern"], amount_pattern, "{name}.amount");
    }
    let payout = schema("CreatePayoutBody");
    assert_eq!(
        (
            payout["idempotency_key"]["minLength"].as_u64(),
            payout["idempotency_key"]["maxLength"].as_u64()
        ),
        (Some(8), Some(128))
    );
    assert_eq!(payout["idempotency_key"]["pattern"], "^[!-~]+$", "printable ASCII without spaces");
    assert_eq!(schema("CreateTransferBody")["idempotency_key"]["maxLength"].as_u64(), Some(64));
    assert_eq!(schema("BatchLineBody")["external_id"]["minLength"].as_u64(), Some(8));
    assert_eq!(schema("CreateEndpointBody")["url"]["maxLength"].as_u64(), Some(2048));
    let list = doc["paths"]["/v1/payouts"]["get"]["parameters"].as_array().unwrap();
    let limit = list.iter().find(|p| p["name"] == "limit").unwrap();
    assert_eq!(
        (limit["schema"]["minimum"].as_u64(), limit["schema"]["maximum"].as_u64()),
        (Some(1), Some(100))
    );
    let batch = &doc["paths"]["/v1/payout_batches"]["post"];
    assert!(
        batch["requestBody"]["content"].get("text/csv").is_some(),
        "the CSV form is documented"
    );
    assert!(batch["responses"].get("413").is_some());
}
