//! circle simulator (not yet implemented).
use axum::response::Response;
use crate::core::{Core, Req, json_response};
pub const CIRCLE_SIM_ENTITY_SECRET_HEX: &str = "08df64530eade3c8b13de60101f00918a2a7247414f498b47c92bb9b974feccf";
pub async fn handle(_core: &Core, _req: Req) -> Response { json_response(404, &serde_json::json!({})) }
