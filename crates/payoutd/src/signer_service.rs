//! `payoutd signer`: the reference service of payoutd's signer protocol (docs/signer-protocol.md), holding Solana hot wallet keys in a process of their own and signing for whoever bears its token.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use payoutd_api::problem::Problem;
use payoutd_domain::{ApiKey, ApiKeyHash};
use payoutd_rail_solana::{SIGNER_MESSAGE_BYTES_MAX, SolanaKey};
use serde::Deserialize;

/// A request body read at most: the message (base64 of at most `SIGNER_MESSAGE_BYTES_MAX` bytes)
/// and the other members with room.
pub const SIGNER_REQUEST_BYTES_MAX: usize = 16 * 1024;
/// The bearer token's shortest length, as for payoutd's other tokens.
pub const SIGNER_TOKEN_CHARS_MIN: usize = 24;

/// The keys this service signs with, by address, and the token it answers.
pub struct SignerService {
    keys: HashMap<String, SolanaKey>,
    token: ApiKeyHash,
}

impl SignerService {
    pub fn new(keys: Vec<SolanaKey>, token: &ApiKey) -> SignerService {
        SignerService {
            keys: keys.into_iter().map(|k| (k.pubkey().to_string(), k)).collect(),
            token: token.hash(),
        }
    }

    /// The addresses it signs for.
    pub fn addresses(&self) -> Vec<&str> {
        self.keys.keys().map(String::as_str).collect()
    }
}

/// `POST /v1/sign` (the protocol) and `GET /healthz`.
pub fn router(service: Arc<SignerService>) -> Router {
    Router::new()
        .route("/v1/sign", post(sign))
        .route("/healthz", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(SIGNER_REQUEST_BYTES_MAX))
        .with_state(service)
}

/// Proof that the caller bears the service's token.
struct Caller;

impl FromRequestParts<Arc<SignerService>> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        service: &Arc<SignerService>,
    ) -> Result<Caller, Problem> {
        let presented = payoutd_api::bearer(parts)?;
        if payoutd_api::key_hash_eq(&presented.hash(), &service.token) {
            Ok(Caller)
        } else {
            Err(Problem::unauthorized("not this signer's token"))
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignRequest {
    scheme: String,
    public_key: String,
    message: String,
}

async fn sign(
    _caller: Caller,
    State(service): State<Arc<SignerService>>,
    body: axum::body::Bytes,
) -> Response {
    match signature(&service, &body) {
        Ok(signature) => Json(serde_json::json!({ "signature": signature })).into_response(),
        Err(problem) => problem.into_response(),
    }
}

/// The base64 signature the request asks for, or why not; nothing is signed on a refusal.
fn signature(service: &SignerService, body: &[u8]) -> Result<String, Problem> {
    let request: SignRequest =
        serde_json::from_slice(body).map_err(|e| Problem::malformed_json(e.to_string()))?;
    if request.scheme != "ed25519" {
        return Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unsupported-scheme",
            "This signer signs ed25519 only",
            format!("scheme {:?}", request.scheme),
        ));
    }
    let Some(key) = service.keys.get(&request.public_key) else {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            "unknown-key",
            "This signer holds no such key",
            format!("no key for {}", request.public_key),
        ));
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    let message = b64
        .decode(request.message.as_bytes())
        .map_err(|e| Problem::invalid(format!("message is not base64: {e}")))?;
    if message.is_empty() || message.len() > SIGNER_MESSAGE_BYTES_MAX {
        return Err(Problem::invalid(format!(
            "message of {} bytes: 1 to {SIGNER_MESSAGE_BYTES_MAX}",
            message.len()
        )));
    }
    tracing::info!(public_key = %request.public_key, message_bytes = message.len(), "signed");
    Ok(b64.encode(key.sign_message(&message).as_ref()))
}

/// Reads the key files, then serves `listen` until `shutdown`.
pub async fn serve(
    listen: &str,
    key_files: &[String],
    token: &str,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use anyhow::Context;
    anyhow::ensure!(
        token.trim().len() >= SIGNER_TOKEN_CHARS_MIN,
        "PAYOUTD_SIGNER_TOKEN must be at least {SIGNER_TOKEN_CHARS_MIN} characters"
    );
    let mut keys = Vec::with_capacity(key_files.len());
    for path in key_files {
        let text = crate::config_secrets::read_key_file(path)
            .with_context(|| format!("key file {path}"))?;
        keys.push(SolanaKey::parse(&text).with_context(|| format!("key in {path}"))?);
    }
    let service = Arc::new(SignerService::new(keys, &ApiKey::presented(token.trim())));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(listen = %listener.local_addr()?, wallets = ?service.addresses(), "payoutd signer running");
    payoutd_api::serve_router_with_limits(
        listener,
        router(service),
        payoutd_api::ServeLimits::default(),
        shutdown,
    )
    .await?;
    Ok(())
}
