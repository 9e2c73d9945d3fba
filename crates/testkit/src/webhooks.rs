//! A webhook receiver for tests (records every request, fails on demand) and the reference Standard
//! Webhooks verifier (the npm `standardwebhooks` package, run with node), so our signatures are
//! checked by code we did not write.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

/// Where `scripts/install-tools` puts the reference verifier, relative to the workspace root.
pub const STANDARDWEBHOOKS_RELATIVE: &str = ".tools/node_modules/standardwebhooks";

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub webhook_id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: String,
    /// The status the receiver answered.
    pub answered: u16,
    /// When it arrived, on this machine's clock: a receiver verifies a request as it arrives, so
    /// the reference verifier judges its timestamp against this moment, not against the time of
    /// a check run later.
    pub received_at_ms: i64,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("webhook bodies are JSON")
    }
}

#[derive(Default)]
struct Behaviour {
    received: Vec<Received>,
    /// Answer 500 to the first n requests of each webhook-id.
    fail_first: u32,
    seen: HashMap<String, u32>,
    /// Answer 503 to everything.
    down: bool,
    delay_ms: u64,
}

/// An HTTP server on 127.0.0.1 that records webhook requests.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    state: Arc<Mutex<Behaviour>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let state = Arc::new(Mutex::new(Behaviour::default()));
        let app = Router::new().route("/hook", post(receive)).with_state(state.clone());
        let listener =
            tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the receiver");
        let url = format!("http://{}/hook", listener.local_addr().expect("receiver address"));
        tokio::spawn(async move { axum::serve(listener, app).await.expect("the receiver serves") });
        Receiver { url, state }
    }

    pub fn fail_first(&self, tries: u32) {
        self.state.lock().unwrap().fail_first = tries;
    }

    pub fn set_down(&self, down: bool) {
        self.state.lock().unwrap().down = down;
    }

    pub fn set_delay_ms(&self, delay_ms: u64) {
        self.state.lock().unwrap().delay_ms = delay_ms;
    }

    /// Every request, answered 2xx or not, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// The requests answered 2xx.
    pub fn accepted(&self) -> Vec<Received> {
        self.received().into_iter().filter(|r| (200..300).contains(&r.answered)).collect()
    }
}

async fn receive(
    State(state): State<Arc<Mutex<Behaviour>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header =
        |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let webhook_id = header("webhook-id");
    let delay_ms = state.lock().unwrap().delay_ms;
    if delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    }
    let mut s = state.lock().unwrap();
    let seen = {
        let n = s.seen.entry(webhook_id.clone()).or_insert(0);
        *n += 1;
        *n
    };
    let status = if s.down {
        StatusCode::SERVICE_UNAVAILABLE
    } else if seen <= s.fail_first {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    };
    s.received.push(Received {
        webhook_id,
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body: String::from_utf8_lossy(&body).into_owned(),
        answered: status.as_u16(),
        received_at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
    });
    status
}

fn verifier_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(STANDARDWEBHOOKS_RELATIVE)
}

const VERIFY_JS: &str = r#"
const { Webhook } = require(process.argv[1]);
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const realNow = Date.now;
const results = input.map(({ secret, headers, body, receivedAtMs }) => {
  Date.now = () => receivedAtMs; // judged as the receiver would have judged it on arrival
  try { new Webhook(secret).verify(body, headers); return 'ok'; } catch (e) { return String(e.message || e); }
  finally { Date.now = realNow; }
});
process.stdout.write(JSON.stringify(results));
"#;

/// Verifies each request with the reference library and `secret`: `Ok` only if every one verifies.
pub fn verify_with_reference(secret: &str, requests: &[Received]) -> Result<(), String> {
    let dir = verifier_dir();
    if !dir.join("package.json").exists() {
        return Err(format!(
            "the reference verifier is missing at {}: run scripts/install-tools",
            dir.display()
        ));
    }
    let input: Vec<Value> = requests
        .iter()
        .map(|r| {
            json!({"secret": secret, "body": r.body, "receivedAtMs": r.received_at_ms, "headers": {
                "webhook-id": r.webhook_id, "webhook-timestamp": r.timestamp, "webhook-signature": r.signature}})
        })
        .collect();
    let mut child = std::process::Command::new("node")
        .args(["-e", VERIFY_JS, &dir.display().to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run node: {e}"))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin
            .write_all(serde_json::to_string(&input).expect("JSON").as_bytes())
            .map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("the verifier failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let results: Vec<String> =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("verifier output: {e}"))?;
    let failures: Vec<String> = results
        .iter()
        .zip(requests)
        .filter(|(r, _)| r.as_str() != "ok")
        .map(|(r, req)| format!("{}: {r}", req.webhook_id))
        .collect();
    if results.len() != requests.len() || !failures.is_empty() {
        return Err(format!(
            "{} of {} requests failed verification: {failures:?}",
            failures.len(),
            requests.len()
        ));
    }
    Ok(())
}
