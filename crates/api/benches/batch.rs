//! Batch benchmark: lines per second of one 10,000-line payout batch over HTTP on PostgreSQL,
//! beside the same number of single POSTs from concurrent clients, in the same run; then a
//! 100,000-line CSV payroll streamed, with the process's peak memory beside its memory before.

use std::sync::Arc;
use std::time::Instant;

use payoutd_api::AppState;
use payoutd_domain::{Amount, AssetCode, AssetRegistry, DepositKey};
use payoutd_engine::{Engine, SystemClock};
use payoutd_testkit::db::fresh_postgres;
use serde_json::{Value, json};

const LINES: u32 = 10_000;
/// Lines of the streamed CSV payroll.
const CSV_LINES: u32 = 100_000;
/// The merchant's intake limit here: the run's 120,000 payouts within a minute.
const PAYOUTS_PER_MINUTE: u32 = 1_000_000;
/// What the streamed payroll may add to a process (the memory benchmark's aim for a whole process).
const PROCESS_RSS_AIM_MIB: u64 = 64;
/// Clients posting single payouts at once.
const CLIENTS: u32 = 16;
const USDC: &str = "evm:31337/USDC";

fn line(prefix: &str, n: u32) -> Value {
    json!({"external_id": format!("{prefix}-{n:08}"), "asset": USDC, "amount": "1", "destination": format!("0x{:040x}", 0x1000_0000u64 + u64::from(n))})
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
// the benchmark's phases in the order it prints them.
async fn main() {
    let db = fresh_postgres().await;
    // A platform paying 100,000-line payrolls raises the per-merchant minute limit (60,000 by
    // default): past it, a batch's further lines are refused with `rate-limited`.
    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development())
        .with_intake_rate(PAYOUTS_PER_MINUTE);
    let (merchant, key) = engine.create_merchant("bench", [7; 32]).await.unwrap();
    let usdc = AssetCode::parse(USDC).unwrap().0;
    engine
        .deposit(
            &merchant,
            &usdc,
            Amount::from_u128(1_000_000_000),
            DepositKey::parse("bench-fund").unwrap(),
        )
        .await
        .unwrap();
    let state = AppState::new(engine.clone(), None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
    });
    let http = reqwest::Client::new();
    let key = key.expose().to_owned();

    let batch = json!({"payouts": (0..LINES).map(|n| line("batch", n)).collect::<Vec<_>>()});
    let started = Instant::now();
    let reply = http
        .post(format!("{base}/v1/payout_batches"))
        .bearer_auth(&key)
        .json(&batch)
        .send()
        .await
        .unwrap();
    let status = reply.status();
    let body: Value = reply.json().await.unwrap();
    let batch_secs = started.elapsed().as_secs_f64();
    assert_eq!(status.as_u16(), 201, "{}", body["detail"]);
    assert_eq!(body["created"], LINES);
    let id = body["id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let view: Value = http
        .get(format!("{base}/v1/payout_batches/{id}"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let read_secs = started.elapsed().as_secs_f64();
    assert_eq!(view["lines"].as_array().unwrap().len(), LINES as usize);
    let started = Instant::now();
    let again: Value = http
        .post(format!("{base}/v1/payout_batches"))
        .bearer_auth(&key)
        .json(&batch)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let replay_secs = started.elapsed().as_secs_f64();
    assert_eq!(again["existing"], LINES);

    let started = Instant::now();
    let clients = (0..CLIENTS).map(|c| {
        let (http, base, key) = (http.clone(), base.clone(), key.clone());
        tokio::spawn(async move {
            for n in (c..LINES).step_by(CLIENTS as usize) {
                let mut body = line("single", n);
                body["idempotency_key"] = body["external_id"].take();
                body.as_object_mut().unwrap().remove("external_id");
                let r = http
                    .post(format!("{base}/v1/payouts"))
                    .bearer_auth(&key)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 201);
            }
        })
    });
    for c in clients.collect::<Vec<_>>() {
        c.await.unwrap();
    }
    let single_secs = started.elapsed().as_secs_f64();

    let batch_rate = f64::from(LINES) / batch_secs;
    let single_rate = f64::from(LINES) / single_secs;
    println!(
        "batch: lines={LINES} secs={batch_secs:.2} lines_per_s={batch_rate:.0} (resubmitted whole: {:.0} lines/s; read back: {read_secs:.2} s)",
        f64::from(LINES) / replay_secs
    );
    println!(
        "single POSTs: payouts={LINES} clients={CLIENTS} secs={single_secs:.2} per_s={single_rate:.0}"
    );
    println!("batch/single: {:.2}", batch_rate / single_rate);
    csv_payroll(&http, &base, &key).await;
}

/// The 100,000-line CSV, posted whole by the client; its answer read a chunk at a time, never held.
async fn csv_payroll(http: &reqwest::Client, base: &str, key: &str) {
    let mut csv = String::from("external_id,asset,amount,destination\n");
    for n in 0..CSV_LINES {
        let destination = 0x2000_0000u64 + u64::from(n);
        csv.push_str(&format!("payroll-{n:08},{USDC},1,0x{destination:040x}\n"));
    }
    let body_mib = csv.len() as f64 / (1024.0 * 1024.0);
    let before_mib = rss_kib("VmRSS") / 1024;
    // Writing 5 to clear_refs sets the peak (VmHWM) back to the present size.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let started = Instant::now();
    let mut reply = http
        .post(format!("{base}/v1/payout_batches"))
        .bearer_auth(key)
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status().as_u16(), 201);
    let (mut answer_bytes, mut tail) = (0usize, Vec::new());
    while let Some(chunk) = reply.chunk().await.unwrap() {
        answer_bytes += chunk.len();
        tail.extend_from_slice(&chunk);
        let keep_from = tail.len().saturating_sub(256);
        tail.drain(..keep_from);
    }
    let secs = started.elapsed().as_secs_f64();
    let peak_mib = rss_kib("VmHWM") / 1024;
    let tail = String::from_utf8_lossy(&tail);
    assert!(
        tail.ends_with(&format!(r#""created":{CSV_LINES},"existing":0,"failed":0}}"#)),
        "{tail}"
    );
    println!(
        "csv batch: lines={CSV_LINES} secs={secs:.2} lines_per_s={:.0} answer_mib={:.0} body_mib={body_mib:.1}",
        f64::from(CSV_LINES) / secs,
        answer_bytes as f64 / (1024.0 * 1024.0)
    );
    let growth_mib = peak_mib.saturating_sub(before_mib);
    let verdict = if growth_mib <= PROCESS_RSS_AIM_MIB { "within" } else { "NOT within" };
    println!(
        "csv batch memory: rss_before_mib={before_mib} peak_rss_mib={peak_mib} growth_mib={growth_mib} ({verdict} {PROCESS_RSS_AIM_MIB} MiB; server and client in one process, the client holding the {body_mib:.1} MiB body)"
    );
}

/// A line of /proc/self/status, in KiB.
fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
