//! An HTTP/1.1 JSON-RPC proxy in front of a node that can lose, delay or refuse requests on demand, and counts requests per method.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Largest request accepted (headers plus body); a raw transaction is far smaller.
pub const PROXY_REQUEST_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Upstream budget; longer than any client timeout so the proxy never decides the outcome.
const PROXY_UPSTREAM_TIMEOUT_MS: u64 = 60_000;
const PROXY_READ_CHUNK_BYTES: usize = 16 * 1024;

/// What happens to a request that matches the active rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Forward,
    /// Forward to the node, then close the connection without answering: the node acted,
    /// the client sees a transport error.
    DropResponse,
    /// Forward, then hold the answer back this long: with a shorter client budget, the
    /// node acted and the client sees a timeout.
    DelayResponse {
        delay_ms: u64,
    },
    /// Close the connection without forwarding: the node never sees the request.
    Refuse,
}

/// Which requests get which fault, and how many times before it switches itself off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    pub fault: Fault,
    /// Only requests carrying this JSON-RPC method (any entry of a batch); `None` for all.
    pub method: Option<String>,
    /// Applies to this many matching requests, then the proxy forwards again; `None` for ever.
    pub times: Option<u32>,
}

impl FaultRule {
    pub fn all(fault: Fault) -> FaultRule {
        FaultRule { fault, method: None, times: None }
    }

    pub fn method(method: &str, fault: Fault) -> FaultRule {
        FaultRule { fault, method: Some(method.to_owned()), times: None }
    }

    pub fn times(self, times: u32) -> FaultRule {
        FaultRule { times: Some(times), ..self }
    }
}

struct State {
    upstream: reqwest::Url,
    http: reqwest::Client,
    rule: Mutex<Option<FaultRule>>,
    counts: Mutex<HashMap<String, u64>>,
}

impl State {
    fn fault_for(&self, methods: &[String]) -> Fault {
        let mut slot = self.rule.lock().unwrap();
        let Some(rule) = slot.as_mut() else { return Fault::Forward };
        if rule.method.as_ref().is_some_and(|m| !methods.contains(m)) {
            return Fault::Forward;
        }
        let fault = rule.fault;
        if let Some(times) = rule.times.as_mut() {
            *times = times.saturating_sub(1);
            if *times == 0 {
                *slot = None;
            }
        }
        fault
    }
}

/// The proxy; stops accepting (and drops open connections) when dropped.
pub struct FaultProxy {
    url: String,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 with a kernel-chosen port and forwards to `upstream`.
    /// Must be called inside a tokio runtime.
    pub async fn start(upstream: &str) -> FaultProxy {
        let upstream = reqwest::Url::parse(upstream).expect("upstream must be a URL");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(PROXY_UPSTREAM_TIMEOUT_MS))
            .build()
            .expect("HTTP client for the proxy");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy on 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let state = Arc::new(State { upstream, http, rule: Mutex::new(None), counts: Mutex::new(HashMap::new()) });
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        FaultProxy { url, state, task }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Replaces the active rule.
    pub fn set_rule(&self, rule: FaultRule) {
        *self.state.rule.lock().unwrap() = Some(rule);
    }

    /// Back to forwarding everything.
    pub fn clear(&self) {
        *self.state.rule.lock().unwrap() = None;
    }

    /// Requests received with this JSON-RPC method, whatever their fate.
    pub fn count(&self, method: &str) -> u64 {
        self.state.counts.lock().unwrap().get(method).copied().unwrap_or(0)
    }

    pub fn counts(&self) -> HashMap<String, u64> {
        self.state.counts.lock().unwrap().clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    // Owned here so that aborting this task also aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                // Answers are written in two parts; without NODELAY the second waits for a delayed ACK (~40 ms).
                let _ = stream.set_nodelay(true);
                connections.spawn(serve_connection(stream, Arc::clone(&state)));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

struct Request {
    body: Vec<u8>,
    close: bool,
}

async fn serve_connection(mut stream: TcpStream, state: Arc<State>) {
    let mut buffer = Vec::new();
    // Keep-alive: clients reuse pooled connections, so serve requests until the peer closes.
    while let Some(request) = read_request(&mut stream, &mut buffer).await {
        let methods = methods_of(&request.body);
        {
            let mut counts = state.counts.lock().unwrap();
            for method in &methods {
                *counts.entry(method.clone()).or_default() += 1;
            }
        }
        let fault = state.fault_for(&methods);
        if fault == Fault::Refuse {
            return;
        }
        let (status, body) = forward(&state, request.body).await;
        match fault {
            Fault::DropResponse => return,
            Fault::DelayResponse { delay_ms } => tokio::time::sleep(Duration::from_millis(delay_ms)).await,
            Fault::Forward | Fault::Refuse => {}
        }
        let head =
            format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
        if stream.write_all(head.as_bytes()).await.is_err() || stream.write_all(&body).await.is_err() {
            return;
        }
        if request.close {
            return;
        }
    }
}

async fn forward(state: &State, body: Vec<u8>) -> (String, Vec<u8>) {
    let sent = state
        .http
        .post(state.upstream.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(_) => return ("502 Bad Gateway".into(), Vec::new()),
    };
    let status = response.status();
    match response.bytes().await {
        Ok(bytes) => (format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or("")), bytes.to_vec()),
        Err(_) => ("502 Bad Gateway".into(), Vec::new()),
    }
}

/// Reads one request (Content-Length bodies only, which is what JSON-RPC clients send).
/// `None` when the peer closed or sent something this proxy does not handle.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(pos) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        if buffer.len() > PROXY_REQUEST_MAX_BYTES || !read_more(stream, buffer).await {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut content_length = 0usize;
    let mut close = false;
    for line in head.lines().skip(1) {
        let Some((name, value)) = line.split_once(':') else { continue };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        match name.as_str() {
            "content-length" => content_length = value.parse().ok()?,
            "connection" => close = value.eq_ignore_ascii_case("close"),
            "transfer-encoding" => return None,
            _ => {}
        }
    }
    if head_end + content_length > PROXY_REQUEST_MAX_BYTES {
        return None;
    }
    while buffer.len() < head_end + content_length {
        if !read_more(stream, buffer).await {
            return None;
        }
    }
    let body = buffer[head_end..head_end + content_length].to_vec();
    buffer.drain(..head_end + content_length);
    Some(Request { body, close })
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; PROXY_READ_CHUNK_BYTES];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// JSON-RPC method names in a body (one for a single call, several for a batch).
fn methods_of(body: &[u8]) -> Vec<String> {
    let method = |v: &Value| v.get("method").and_then(Value::as_str).map(str::to_owned);
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(calls)) => calls.iter().filter_map(method).collect(),
        Ok(call) => method(&call).into_iter().collect(),
        Err(_) => Vec::new(),
    }
}
