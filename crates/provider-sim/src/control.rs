//! The simulator's own HTTP control endpoints (`/_sim/...`, no auth), for running it as a process.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::Fault;
use crate::core::{Core, json_response};

pub fn routes() -> Router<Arc<Core>> {
    Router::new()
        .route("/_sim/stats", get(stats))
        .route("/_sim/advance", post(advance))
        .route("/_sim/fault", post(fault))
}

async fn stats(State(core): State<Arc<Core>>) -> Response {
    let st = core.lock();
    json_response(
        200,
        &json!({"created": st.created, "by_reference": st.by_reference, "now_ms": core.now_ms()}),
    )
}

async fn advance(State(core): State<Arc<Core>>, body: String) -> Response {
    match serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v.get("ms").and_then(Value::as_u64))
    {
        Some(ms) => {
            core.advance(ms);
            json_response(200, &json!({"now_ms": core.now_ms()}))
        }
        None => json_response(400, &json!({"error": "expected {\"ms\": N}"})),
    }
}

/// `{"fault": "server_error_before_create"|"server_error_saved"|"unknown_error_after_create"|"server_error_after_create"|"reset_after_create"|{"delay_after_create_ms": N}}`
pub fn parse_fault(v: &Value) -> Option<Fault> {
    match v {
        Value::String(s) => match s.as_str() {
            "server_error_before_create" => Some(Fault::ServerErrorBeforeCreate),
            "server_error_after_create" => Some(Fault::ServerErrorAfterCreate),
            "server_error_saved" => Some(Fault::ServerErrorSaved),
            "unknown_error_after_create" => Some(Fault::UnknownErrorAfterCreate),
            "reset_after_create" => Some(Fault::ResetAfterCreate),
            _ => None,
        },
        Value::Object(m) => {
            m.get("delay_after_create_ms").and_then(Value::as_u64).map(Fault::DelayAfterCreate)
        }
        _ => None,
    }
}

async fn fault(State(core): State<Arc<Core>>, body: String) -> Response {
    match serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v.get("fault").and_then(parse_fault))
    {
        Some(f) => {
            core.push_fault(f);
            json_response(200, &json!({"queued": format!("{f:?}")}))
        }
        None => json_response(
            400,
            &json!({"error": "expected {\"fault\": \"server_error_before_create\"|\"server_error_after_create\"|\"reset_after_create\"|{\"delay_after_create_ms\": N}}"}),
        ),
    }
}
