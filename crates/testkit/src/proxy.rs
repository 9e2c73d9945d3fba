//! An HTTP/1.1 JSON-RPC proxy in front of a node that can lose, delay or refuse requests on demand, and counts requests per method.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::http1::{forward, methods_of, read_request};

/// Largest request accepted (headers plus body); a raw transaction is far smaller.
pub const PROXY_REQUEST_MAX_BYTES: usize = 16 * 1024 * 1024;
/// What a gateway without batch support answers to a batch (`Fault::NoBatches`).
const NO_BATCHES_ANSWER: &str = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch requests are not supported"}}"#;
/// Upstream budget; longer than any client timeout so the proxy never decides the outcome.
const PROXY_UPSTREAM_TIMEOUT_MS: u64 = 60_000;

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
    /// Answer a batch request with one JSON-RPC error object, without forwarding it, as gateways
    /// without batch support do; single calls are forwarded.
    NoBatches,
    /// Answer a single call with this JSON `result` (under the request's id), without forwarding:
    /// a node in a state the local one cannot be put in (a pruned history, a lagging index).
    Answer {
        result: &'static str,
    },
    /// Forward, then answer as a replica this many blocks behind the node would
    /// (`lagging::behind`): a load-balanced endpoint whose requests reach a node that lags.
    Behind {
        blocks: u64,
    },
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
        let state = Arc::new(State {
            upstream,
            http,
            rule: Mutex::new(None),
            counts: Mutex::new(HashMap::new()),
        });
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

/// `{"jsonrpc":"2.0","id":<the request's id>,"result":<result>}`.
fn canned_answer(request: &[u8], result: &str) -> Vec<u8> {
    let id = serde_json::from_slice::<serde_json::Value>(request)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(serde_json::Value::Null);
    let result: serde_json::Value = serde_json::from_str(result).expect("a canned result is JSON");
    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string().into_bytes()
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
        let is_batch = request.body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
        let (status, body) = if fault == Fault::NoBatches && is_batch {
            ("200 OK".to_owned(), NO_BATCHES_ANSWER.as_bytes().to_vec())
        } else if let Fault::Answer { result } = fault {
            ("200 OK".to_owned(), canned_answer(&request.body, result))
        } else if let Fault::Behind { blocks } = fault {
            crate::lagging::forward_behind(&state.http, &state.upstream, request.body, blocks).await
        } else {
            forward(&state.http, &state.upstream, request.body).await
        };
        match fault {
            Fault::DropResponse => return,
            Fault::DelayResponse { delay_ms } => {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await
            }
            Fault::Forward
            | Fault::Refuse
            | Fault::NoBatches
            | Fault::Answer { .. }
            | Fault::Behind { .. } => {}
        }
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(&body).await.is_err()
        {
            return;
        }
        if request.close {
            return;
        }
    }
}
