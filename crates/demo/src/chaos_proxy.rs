//! A JSON-RPC proxy that injects faults at random on every method: answers lost after the node acted, answers late or past the client's budget, connections closed or reset before forwarding, reads answered as a replica some blocks behind would, and outages in which new connections are refused.
//!
//! The harness proxy of rail-evm applies one armed rule at a time, which suits tests that aim a
//! fault at one request; a chaos run needs independent random decisions per request from several
//! processes at once, hence this one.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use payoutd_domain::EvmAddress;
use payoutd_rail_evm::{RPC_CALL_TIMEOUT_MS, decode_raw};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use payoutd_testkit::http1::{forward, methods_of, read_request};
use payoutd_testkit::lagging::forward_behind;

use crate::rng::Rng;

/// The method whose lost answers pay twice in a naive system; it gets its own, higher rates.
pub const SEND_METHOD: &str = "eth_sendRawTransaction";
/// Per-mille chances for a request carrying [`SEND_METHOD`]: about one in four is hit.
pub const SEND_RATES: FaultRates = FaultRates {
    lost_answer: 120,
    slow_answer: 40,
    timeout: 10,
    closed: 40,
    reset: 40,
    lagging: 0,
};
/// Per-mille chances for every other method (receipts, nonces, blocks, fees, chain id):
/// about one in sixteen is hit. Slow answers and timeouts are rarer than losses because each
/// stalls a worker's whole (sequential) tick: one in a thousand reads times out.
/// One read in ten of those a proof rests on (receipts, nonces, the head) is answered as a replica
/// `LAGGING_BLOCKS` behind would: an endpoint balancing its requests over nodes at other heights.
pub const READ_RATES: FaultRates = FaultRates {
    lost_answer: 25,
    slow_answer: 15,
    timeout: 1,
    closed: 10,
    reset: 10,
    lagging: 100,
};
/// How far behind the node the lagging replica stands (the issue's measurement: one node 6 behind).
pub const LAGGING_BLOCKS: u64 = 6;
/// The requests a lagging replica never answers: sends, which a replica passes on to the network.
/// Every read may be answered from behind (heads, blocks, nonces, balances, receipts, statuses).
const NEVER_LAGGING_METHODS: [&str; 2] = ["eth_sendRawTransaction", "sendTransaction"];
pub const SLOW_ANSWER_MS_MIN: u64 = 100;
/// Well inside payoutd's RPC budget: slow, not lost.
pub const SLOW_ANSWER_MS_MAX: u64 = 1_500;
/// Past payoutd's RPC budget: the node acted, payoutd sees a timeout ("outcome unknown").
pub const TIMEOUT_ANSWER_MS: u64 = RPC_CALL_TIMEOUT_MS + 1_000;
/// A node outage (listener closed, open connections cut) starts this often...
pub const OUTAGE_EVERY_SECS_MIN: u64 = 10;
pub const OUTAGE_EVERY_SECS_MAX: u64 = 25;
/// ...and lasts this long: shorter than payoutd's connect budget would hide nothing, since
/// a closed port is refused at once.
pub const OUTAGE_MS_MIN: u64 = 500;
pub const OUTAGE_MS_MAX: u64 = 3_000;
/// Upstream budget; longer than any client timeout so the proxy never decides the outcome.
const UPSTREAM_TIMEOUT_MS: u64 = 60_000;
const LISTEN_BACKLOG: u32 = 1_024;
const REBIND_ATTEMPTS: u32 = 50;
const REBIND_PAUSE_MS: u64 = 20;
const PER_MILLE: u64 = 1_000;
/// Sends remembered per (wallet, nonce) for diagnostics; older ones are forgotten.
const SEND_HISTORY_MAX: usize = 40;
const NODE_ANSWER_MAX_CHARS: usize = 80;

/// Per-mille chances of each fault for one request; the rest is forwarded untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultRates {
    /// Forwarded, then the connection closed without an answer: the node acted, the client hears nothing.
    pub lost_answer: u64,
    /// Forwarded, answered [`SLOW_ANSWER_MS_MIN`]..=[`SLOW_ANSWER_MS_MAX`] late.
    pub slow_answer: u64,
    /// Forwarded, no answer before the client gives up: a timeout, outcome unknown.
    pub timeout: u64,
    /// Closed (FIN) without forwarding: the node never saw the request.
    pub closed: u64,
    /// Reset (RST) without forwarding.
    pub reset: u64,
    /// Forwarded, answered as a replica `LAGGING_BLOCKS` behind would (reads a proof rests on only).
    pub lagging: u64,
}

impl FaultRates {
    pub fn total(&self) -> u64 {
        self.lost_answer + self.slow_answer + self.timeout + self.closed + self.reset + self.lagging
    }

    /// Every chance times `percent` / 100 (0 turns faults off); the total stays within 1000‰.
    pub fn scaled(&self, percent: u64) -> FaultRates {
        let f = |x: u64| x * percent / 100;
        let scaled = FaultRates {
            lost_answer: f(self.lost_answer),
            slow_answer: f(self.slow_answer),
            timeout: f(self.timeout),
            closed: f(self.closed),
            reset: f(self.reset),
            lagging: f(self.lagging),
        };
        if scaled.total() <= PER_MILLE {
            scaled
        } else {
            self.scaled(percent * PER_MILLE / scaled.total().max(1))
        }
    }
}

/// What happened to one request (or, for `Outage`, to the listener).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_rates_stay_per_mille() {
        assert_eq!(SEND_RATES.scaled(100), SEND_RATES);
        assert_eq!(SEND_RATES.scaled(0).total(), 0);
        assert!(SEND_RATES.scaled(1_000).total() <= PER_MILLE);
        assert!(READ_RATES.total() <= PER_MILLE && SEND_RATES.total() <= PER_MILLE);
    }

    #[test]
    fn a_send_body_is_decoded_to_signer_and_nonce() {
        assert_eq!(decode_hex("0aff"), Some(vec![0x0a, 0xff]));
        assert_eq!(decode_hex("0af"), None);
        assert!(
            raw_sends_of(br#"{"method":"eth_sendRawTransaction","params":["0x02"]}"#).is_empty()
        );
        assert!(
            raw_sends_of(br#"[{"method":"eth_sendRawTransaction","params":["0x02"]}]"#).is_empty()
        );
        assert_eq!(node_answer(br#"{"result":"0x1"}"#), "ok");
        assert_eq!(
            node_answer(br#"{"error":{"code":-32003,"message":"nonce too low"}}"#),
            "\"nonce too low\""
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injected {
    LostAnswer,
    SlowAnswer { delay_ms: u64 },
    Timeout,
    Closed,
    Reset,
    Lagging,
}

impl Injected {
    fn label(self) -> &'static str {
        match self {
            Injected::LostAnswer => "lost_answer",
            Injected::SlowAnswer { .. } => "slow_answer",
            Injected::Timeout => "timeout",
            Injected::Closed => "closed",
            Injected::Reset => "reset",
            Injected::Lagging => LAGGING_LABEL,
        }
    }
}

/// Label under which reads answered by the lagging replica are tallied.
pub const LAGGING_LABEL: &str = "lagging_read";

/// Label under which outages are tallied.
pub const OUTAGE_LABEL: &str = "outage";

struct Shared {
    send_rates: FaultRates,
    read_rates: FaultRates,
    outages: bool,
    upstream: reqwest::Url,
    http: reqwest::Client,
    rng: Mutex<Rng>,
    active: AtomicBool,
    requests: AtomicU64,
    by_kind: Mutex<BTreeMap<&'static str, u64>>,
    by_method: Mutex<BTreeMap<String, u64>>,
    started: Instant,
    /// (signer, nonce) -> what happened to each `eth_sendRawTransaction` carrying it.
    sends: Mutex<HashMap<(EvmAddress, u64), Vec<String>>>,
}

impl Shared {
    /// Notes the fate of each send in the request under its signer and nonce (decoded from the raw bytes).
    fn note_send(&self, body: &[u8], fate: &str) {
        for (signer, nonce, hash) in raw_sends_of(body) {
            let line = format!(
                "t={:.1}s {}… {fate}",
                self.started.elapsed().as_secs_f64(),
                &hash[..10.min(hash.len())]
            );
            let mut sends = self.sends.lock().unwrap();
            let list = sends.entry((signer, nonce)).or_default();
            if list.len() >= SEND_HISTORY_MAX {
                list.remove(0);
            }
            list.push(line);
        }
    }

    fn decide(&self, methods: &[String]) -> Option<Injected> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if !self.active.load(Ordering::Relaxed) {
            return None;
        }
        let rates = if methods.iter().any(|m| m == SEND_METHOD) {
            self.send_rates
        } else {
            self.read_rates
        };
        let mut rng = self.rng.lock().unwrap();
        let mut roll = rng.below(PER_MILLE);
        let mut pick = None;
        for (chance, fault) in [
            (rates.lost_answer, Injected::LostAnswer),
            (rates.slow_answer, Injected::SlowAnswer { delay_ms: 0 }),
            (rates.timeout, Injected::Timeout),
            (rates.closed, Injected::Closed),
            (rates.reset, Injected::Reset),
            (rates.lagging, Injected::Lagging),
        ] {
            if roll < chance {
                pick = Some(fault);
                break;
            }
            roll -= chance;
        }
        let fault = match pick? {
            Injected::SlowAnswer { .. } => Injected::SlowAnswer {
                delay_ms: rng.between(SLOW_ANSWER_MS_MIN, SLOW_ANSWER_MS_MAX),
            },
            Injected::Lagging
                if methods.iter().any(|m| NEVER_LAGGING_METHODS.contains(&m.as_str())) =>
            {
                return None;
            }
            other => other,
        };
        drop(rng);
        *self.by_kind.lock().unwrap().entry(fault.label()).or_default() += 1;
        let method = methods.first().cloned().unwrap_or_else(|| "?".to_owned());
        *self.by_method.lock().unwrap().entry(method).or_default() += 1;
        Some(fault)
    }
}

/// The proxy on a fixed loopback port (kept across outages); stops when dropped.
pub struct ChaosProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl ChaosProxy {
    /// Listens on 127.0.0.1 with a kernel-chosen port and forwards to `upstream`, with
    /// [`SEND_RATES`] and [`READ_RATES`] scaled by `fault_percent` (100: as named; 0: no
    /// request faults and no outages). Faults are off until [`ChaosProxy::set_active`].
    pub async fn start(upstream: &str, rng: Rng, fault_percent: u64) -> anyhow::Result<ChaosProxy> {
        let rates = (SEND_RATES.scaled(fault_percent), READ_RATES.scaled(fault_percent));
        ChaosProxy::start_with(upstream, rng, rates, fault_percent > 0)
    }

    /// A proxy whose only fault is the lagging replica, at [`READ_RATES`]' rate: in front of a node
    /// whose other faults another proxy makes (the Solana node's).
    pub async fn lagging_only(upstream: &str, rng: Rng) -> anyhow::Result<ChaosProxy> {
        let none = SEND_RATES.scaled(0);
        let lagging = FaultRates { lagging: READ_RATES.lagging, ..none };
        ChaosProxy::start_with(upstream, rng, (none, lagging), false)
    }

    fn start_with(
        upstream: &str,
        rng: Rng,
        (send_rates, read_rates): (FaultRates, FaultRates),
        outages: bool,
    ) -> anyhow::Result<ChaosProxy> {
        let upstream = reqwest::Url::parse(upstream).context("upstream URL")?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(UPSTREAM_TIMEOUT_MS))
            .build()?;
        let listener = bind("127.0.0.1:0".parse().expect("a socket address"))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            send_rates,
            read_rates,
            outages,
            upstream,
            http,
            rng: Mutex::new(rng),
            active: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            by_kind: Mutex::new(BTreeMap::new()),
            by_method: Mutex::new(BTreeMap::new()),
            started: Instant::now(),
            sends: Mutex::new(HashMap::new()),
        });
        let task = tokio::spawn(run(listener, addr, Arc::clone(&shared)));
        Ok(ChaosProxy { addr, shared, task })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The per-mille rates in force: (sends, other methods).
    pub fn rates(&self) -> (FaultRates, FaultRates) {
        (self.shared.send_rates, self.shared.read_rates)
    }

    /// On: random faults and outages. Off: every request forwarded (an outage in progress ends on time).
    pub fn set_active(&self, active: bool) {
        self.shared.active.store(active, Ordering::Relaxed);
    }

    /// Requests received, whatever their fate.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// Faults injected, by kind (outages included).
    pub fn by_kind(&self) -> BTreeMap<&'static str, u64> {
        self.shared.by_kind.lock().unwrap().clone()
    }

    /// Request faults by JSON-RPC method (the first of a batch).
    pub fn by_method(&self) -> BTreeMap<String, u64> {
        self.shared.by_method.lock().unwrap().clone()
    }

    /// What happened to each send of a transaction from `signer` at `nonce` (the last
    /// [`SEND_HISTORY_MAX`]): its fault, and the node's answer when it was forwarded.
    pub fn send_history(&self, signer: EvmAddress, nonce: u64) -> Vec<String> {
        self.shared.sends.lock().unwrap().get(&(signer, nonce)).cloned().unwrap_or_default()
    }

    pub fn faults(&self) -> u64 {
        self.shared.by_kind.lock().unwrap().values().sum()
    }
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A listener with SO_REUSEADDR, so that the same port can be bound again after an outage.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

fn next_outage(shared: &Shared) -> tokio::time::Instant {
    let secs = shared.rng.lock().unwrap().between(OUTAGE_EVERY_SECS_MIN, OUTAGE_EVERY_SECS_MAX);
    tokio::time::Instant::now() + Duration::from_secs(secs)
}

async fn run(first: TcpListener, addr: SocketAddr, shared: Arc<Shared>) {
    let mut listener = first;
    loop {
        let mut outage_at = next_outage(&shared);
        // Owned here: dropping it at an outage cuts every open connection.
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    // Answers are written in two parts; without NODELAY the second waits for a delayed ACK.
                    let _ = stream.set_nodelay(true);
                    connections.spawn(serve_connection(stream, Arc::clone(&shared)));
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                () = tokio::time::sleep_until(outage_at) => {
                    if shared.outages && shared.active.load(Ordering::Relaxed) {
                        break;
                    }
                    outage_at = next_outage(&shared);
                }
            }
        }
        // The outage: the port is closed (new connections refused) and open ones are cut.
        drop(listener);
        drop(connections);
        *shared.by_kind.lock().unwrap().entry(OUTAGE_LABEL).or_default() += 1;
        let outage_ms = shared.rng.lock().unwrap().between(OUTAGE_MS_MIN, OUTAGE_MS_MAX);
        tokio::time::sleep(Duration::from_millis(outage_ms)).await;
        let mut rebound = None;
        for _ in 0..REBIND_ATTEMPTS {
            match bind(addr) {
                Ok(l) => {
                    rebound = Some(l);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(REBIND_PAUSE_MS)).await,
            }
        }
        let Some(l) = rebound else {
            eprintln!(
                "chaos proxy: could not listen on {addr} again after an outage; the node stays unreachable"
            );
            return;
        };
        listener = l;
    }
}

async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let mut buffer = Vec::new();
    // Keep-alive: clients reuse pooled connections, so serve requests until the peer closes.
    while let Some(request) = read_request(&mut stream, &mut buffer).await {
        let methods = methods_of(&request.body);
        let is_send = methods.iter().any(|m| m == SEND_METHOD);
        let fault = shared.decide(&methods);
        if is_send && matches!(fault, Some(Injected::Closed | Injected::Reset)) {
            shared.note_send(
                &request.body,
                &format!("not forwarded ({})", fault.map_or("", Injected::label)),
            );
        }
        match fault {
            Some(Injected::Closed) => return,
            Some(Injected::Reset) => {
                // SO_LINGER 0: the close sends RST instead of FIN.
                let _ = stream.set_zero_linger();
                return;
            }
            _ => {}
        }
        let raw_body = if is_send { Some(request.body.clone()) } else { None };
        let (status, body) = if fault == Some(Injected::Lagging) {
            forward_behind(&shared.http, &shared.upstream, request.body, LAGGING_BLOCKS).await
        } else {
            forward(&shared.http, &shared.upstream, request.body).await
        };
        if let Some(raw_body) = raw_body {
            let fate = match fault {
                Some(f) => format!("node said {}; client got {}", node_answer(&body), f.label()),
                None => format!("node said {}", node_answer(&body)),
            };
            shared.note_send(&raw_body, &fate);
        }
        match fault {
            Some(Injected::LostAnswer) => return,
            Some(Injected::Timeout) => {
                tokio::time::sleep(Duration::from_millis(TIMEOUT_ANSWER_MS)).await;
                return;
            }
            Some(Injected::SlowAnswer { delay_ms }) => {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await
            }
            _ => {}
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

/// `(signer, nonce, hash)` of each raw transaction in an `eth_sendRawTransaction` body (one call or a batch).
fn raw_sends_of(body: &[u8]) -> Vec<(EvmAddress, u64, String)> {
    let Ok(value) = serde_json::from_slice::<Value>(body) else { return Vec::new() };
    let calls = match value {
        Value::Array(calls) => calls,
        call => vec![call],
    };
    calls.iter().filter_map(raw_send_in).collect()
}

fn raw_send_in(call: &Value) -> Option<(EvmAddress, u64, String)> {
    let hex = call.get("params")?.get(0)?.as_str()?.strip_prefix("0x")?;
    let raw = decode_hex(hex)?;
    let tx = decode_raw(&raw).ok()?;
    Some((tx.signer, tx.nonce, tx.hash.to_string()))
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

/// `ok` for a result, the error message otherwise (shortened).
fn node_answer(body: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<Value>(body) else { return "(no JSON)".to_owned() };
    match v.get("error").and_then(|e| e.get("message")).and_then(Value::as_str) {
        Some(message) => {
            format!("{:?}", message.chars().take(NODE_ANSWER_MAX_CHARS).collect::<String>())
        }
        None => "ok".to_owned(),
    }
}
