//! A small client of payoutd's HTTP API that retries through a restarting server, as a careful merchant integration would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// One request's budget; payoutd answers 408 itself after 15 s, so this only catches a hung socket.
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;
/// How long one logical request keeps retrying: long enough to ride out a SIGKILL and restart.
pub const RETRY_WINDOW_SECS: u64 = 60;
pub const RETRY_PAUSE_MS: u64 = 200;
/// One below the list maximum (100): at the maximum payoutd reports no next page (see the report).
pub const LIST_PAGE_SIZE: u32 = 99;
/// Bound on pages read for one status snapshot (100 per page): far above any demo size.
pub const LIST_PAGES_MAX: u32 = 1_000;
const READY_POLL_MS: u64 = 50;

/// An answer that payoutd meant (not a transport failure or a restart in progress).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    /// `Idempotent-Replayed: true`: the answer of an earlier identical request.
    pub replayed: bool,
    pub body: Value,
}

impl Reply {
    /// The last segment of a problem+json `type`, e.g. `idempotency-key-reused`.
    pub fn problem_slug(&self) -> &str {
        self.body
            .get("type")
            .and_then(Value::as_str)
            .and_then(|t| t.rsplit('/').next())
            .unwrap_or("")
    }

    pub fn str_field(&self, name: &str) -> &str {
        self.body.get(name).and_then(Value::as_str).unwrap_or("")
    }
}

/// Who a request is sent as.
#[derive(Debug, Clone, Copy)]
pub enum As {
    Merchant,
    Operator,
}

pub struct Api {
    http: reqwest::Client,
    base: String,
    merchant_key: String,
    operator_key: String,
    /// Requests sent again after a transport error or a 5xx/408: the restart shows up here.
    retries: AtomicU64,
}

/// Answers that say "not now" rather than "no": a POST is safe to repeat because every
/// one carries an idempotency key.
fn retryable(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

impl Api {
    pub fn new(base: String, merchant_key: String, operator_key: String) -> anyhow::Result<Api> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
            .build()?;
        Ok(Api { http, base, merchant_key, operator_key, retries: AtomicU64::new(0) })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Sends until payoutd gives a meaningful answer or [`RETRY_WINDOW_SECS`] pass.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        who: As,
    ) -> anyhow::Result<Reply> {
        let key = match who {
            As::Merchant => &self.merchant_key,
            As::Operator => &self.operator_key,
        };
        let url = format!("{}{path}", self.base);
        let deadline = Instant::now() + Duration::from_secs(RETRY_WINDOW_SECS);
        loop {
            let mut request = self.http.request(method.clone(), &url).bearer_auth(key);
            if let Some(body) = body {
                request = request.json(body);
            }
            let failure = match request.send().await {
                Ok(response) if !retryable(response.status()) => {
                    let status = response.status();
                    let replayed = response
                        .headers()
                        .get("idempotent-replayed")
                        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
                    // The body can still be cut off by a kill; that is a transport failure too.
                    match response.bytes().await {
                        Ok(bytes) => {
                            let body = if bytes.is_empty() {
                                Value::Null
                            } else {
                                serde_json::from_slice(&bytes).unwrap_or(Value::Null)
                            };
                            return Ok(Reply { status, replayed, body });
                        }
                        Err(e) => format!("body lost: {e}"),
                    }
                }
                Ok(response) => format!("HTTP {}", response.status()),
                Err(e) => format!("transport: {e}"),
            };
            if Instant::now() > deadline {
                bail!("{method} {path}: no answer within {RETRY_WINDOW_SECS} s (last: {failure})");
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MS)).await;
        }
    }

    pub async fn post(&self, path: &str, body: &Value, who: As) -> anyhow::Result<Reply> {
        self.send(Method::POST, path, Some(body), who).await
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Reply> {
        self.send(Method::GET, path, None, As::Merchant).await
    }

    /// True once `/readyz` answers 200 (database reachable); one try, no retries.
    pub async fn ready(&self) -> bool {
        let url = format!("{}/readyz", self.base);
        matches!(self.http.get(url).send().await, Ok(r) if r.status().is_success())
    }

    /// Waits until [`Api::ready`], for at most `timeout_secs`.
    pub async fn wait_ready(&self, timeout_secs: u64) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(timeout_secs);
        while !self.ready().await {
            anyhow::ensure!(
                Instant::now() < deadline,
                "payoutd not ready within {timeout_secs} s (see serve.log)"
            );
            tokio::time::sleep(Duration::from_millis(READY_POLL_MS)).await;
        }
        Ok(())
    }

    /// Every payout of the merchant: id -> status, read page by page.
    pub async fn statuses(&self) -> anyhow::Result<HashMap<String, String>> {
        let mut out = HashMap::new();
        let mut cursor: Option<String> = None;
        for _ in 0..LIST_PAGES_MAX {
            let path = match &cursor {
                Some(c) => format!("/v1/payouts?limit={LIST_PAGE_SIZE}&cursor={c}"),
                None => format!("/v1/payouts?limit={LIST_PAGE_SIZE}"),
            };
            let reply = self.get(&path).await?;
            if reply.status != StatusCode::OK {
                bail!("GET {path}: {} {}", reply.status, reply.body);
            }
            let data =
                reply.body.get("data").and_then(Value::as_array).context("list without data")?;
            for p in data {
                let id = p.get("id").and_then(Value::as_str).context("payout without id")?;
                let status =
                    p.get("status").and_then(Value::as_str).context("payout without status")?;
                out.insert(id.to_owned(), status.to_owned());
            }
            match reply.body.get("next_cursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok(out),
            }
        }
        bail!("more than {LIST_PAGES_MAX} pages of payouts")
    }
}
