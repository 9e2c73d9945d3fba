//! Intake benchmark: new payouts/s and replays/s over real HTTP against PostgreSQL, beside pgbench running a fixed plain intake transaction and the replay lookup.
//!
//! Each client presents its own API key (two per merchant), so the per-key request limit (1,000/s
//! by default) stays in the path without being what is measured. Replays are also run through the
//! engine alone (no HTTP) and each phase's CPU is read per request for payoutd's process and for
//! PostgreSQL, so the gap to pgbench is split by where the time goes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use payoutd_api::AppState;
use payoutd_domain::{
    Amount, ApiKey, AssetCode, AssetRegistry, DepositKey, Metadata, PayoutKey, PayoutRequest,
};
use payoutd_engine::{Engine, Replay, SystemClock};
use payoutd_testkit::db::fresh_postgres;

/// Concurrent clients, for payoutd and for pgbench alike.
const CLIENTS_DEFAULT: usize = 16;
/// Merchants the clients spread over (client i uses merchant i % MERCHANTS).
const MERCHANTS: usize = 8;
const PHASE_SECONDS: u64 = 10;
const WARMUP_SECONDS: u64 = 2;
/// Aims, as shares of pgbench's rate for the same work in the same run.
const CREATE_AIM_PERCENT: f64 = 60.0;
const REPLAY_AIM_PERCENT: f64 = 30.0;

/// A minimal keep-alive HTTP/1.1 client, so the load generator costs little CPU next to the server
/// (pgbench, on the other side of the comparison, is a lean C client too).
struct LeanClient {
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
    addr: std::net::SocketAddr,
}

impl LeanClient {
    async fn connect(addr: std::net::SocketAddr) -> LeanClient {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        LeanClient { stream: tokio::io::BufReader::new(stream), addr }
    }

    /// POSTs a JSON body; returns (status, whether `idempotent-replayed: true` was present).
    async fn post(&mut self, path: &str, bearer: &str, body: &str) -> (u16, bool) {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {bearer}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes()).await.unwrap();
        let mut line = String::new();
        self.stream.read_line(&mut line).await.unwrap();
        let status: u16 =
            line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("status line");
        let (mut length, mut replayed) = (0usize, false);
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.unwrap();
            let header = line.trim_end().to_ascii_lowercase();
            if header.is_empty() {
                break;
            }
            if let Some(v) = header.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            replayed |= header == "idempotent-replayed: true";
        }
        let mut body = vec![0u8; length];
        self.stream.read_exact(&mut body).await.unwrap();
        (status, replayed)
    }
}

/// CPU seconds (user + system) this process has used so far, from /proc.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds PostgreSQL has used so far: every live `postgres` process, plus what the postmaster
/// has collected from backends that already exited (pgbench's connections end with its run).
fn postgres_cpu_seconds() -> f64 {
    let mut total = 0.0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(") ") else { continue };
        if !head.ends_with("(postgres") {
            continue;
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        // utime, stime, and the exited children's cutime, cstime (non-zero only for the postmaster).
        total += (ticks(11) + ticks(12) + ticks(13) + ticks(14)) / 100.0;
    }
    total
}

/// CPU per request of payoutd's process and of PostgreSQL over one phase, in microseconds.
struct CpuPer {
    process_us: f64,
    postgres_us: f64,
}

struct CpuMark(f64, f64);

impl CpuMark {
    fn now() -> CpuMark {
        CpuMark(process_cpu_seconds(), postgres_cpu_seconds())
    }
    fn per(&self, requests: f64) -> CpuPer {
        let now = CpuMark::now();
        CpuPer {
            process_us: (now.0 - self.0) / requests * 1e6,
            postgres_us: (now.1 - self.1) / requests * 1e6,
        }
    }
}

fn clients() -> usize {
    std::env::var("BENCH_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CLIENTS_DEFAULT)
        .clamp(1, 256)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx].as_secs_f64() * 1000.0
}

struct Phase {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
    count: u64,
    /// Requests finished by the slowest client: keys 0..this exist for every client.
    min_per_client: u64,
}

#[derive(Clone, Copy)]
enum Mode {
    /// New keys `{prefix}-{client}-{seq}`: every request creates a payout (201).
    Create(&'static str),
    /// Keys `bench-key-{client}-{seq % existing}` sent again: every request is a replay (200).
    Replay { existing_per_client: u64 },
}

const DESTINATION: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";

/// Runs one connection per client for `seconds`, each sending requests back to back.
async fn run_phase(
    addr: std::net::SocketAddr,
    keys: Arc<Vec<String>>,
    seconds: u64,
    mode: Mode,
) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients())
        .map(|client| {
            let (stop, failures, keys) = (stop.clone(), failures.clone(), keys.clone());
            tokio::spawn(async move {
                let mut http = LeanClient::connect(addr).await;
                let bearer = keys[client].clone();
                let mut latencies = Vec::with_capacity(64 * 1024);
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = match mode {
                        Mode::Create(prefix) => format!("{prefix}-{client}-{seq}"),
                        Mode::Replay { existing_per_client } => format!("bench-key-{client}-{}", seq % existing_per_client.max(1)),
                    };
                    let body = format!(
                        r#"{{"asset":"evm:31337/USDC","amount":"1000","destination":"{DESTINATION}","idempotency_key":"{key}"}}"#
                    );
                    let t = Instant::now();
                    let (status, replayed) = http.post("/v1/payouts", &bearer, &body).await;
                    latencies.push(t.elapsed());
                    let ok = match mode {
                        Mode::Create(_) => status == 201,
                        Mode::Replay { .. } => status == 200 && replayed,
                    };
                    if !ok {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    seq += 1;
                }
                latencies
            })
        })
        .collect();
    finish_phase(tasks, stop, failures, seconds, started).await
}

/// Replays through the engine alone, as the handler calls it (the key's merchant and the payout
/// under its key in one read), with no HTTP: what the database and the store's driver cost without the server.
async fn run_engine_replays(
    engine: Engine,
    keys: Arc<Vec<String>>,
    seconds: u64,
    existing_per_client: u64,
) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let asset = engine.assets().get("evm:31337/USDC").unwrap().clone();
    let destination = asset.parse_destination(DESTINATION).unwrap();
    let tasks: Vec<_> = (0..clients())
        .map(|client| {
            let (stop, failures, keys, engine) =
                (stop.clone(), failures.clone(), keys.clone(), engine.clone());
            let (asset, destination) = (asset.code.clone(), destination);
            tokio::spawn(async move {
                let presented = ApiKey::presented(&keys[client]);
                let mut latencies = Vec::with_capacity(64 * 1024);
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = PayoutKey::parse(&format!(
                        "bench-key-{client}-{}",
                        seq % existing_per_client.max(1)
                    ))
                    .unwrap();
                    let amount = Amount::parse("1000").unwrap();
                    let request = PayoutRequest::new(
                        key,
                        asset.clone(),
                        amount,
                        destination,
                        Metadata::empty(),
                    );
                    let t = Instant::now();
                    let (_, replay) =
                        engine.create_payout_with_api_key(&presented, request).await.unwrap();
                    latencies.push(t.elapsed());
                    if replay != Replay::Replayed {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    seq += 1;
                }
                latencies
            })
        })
        .collect();
    finish_phase(tasks, stop, failures, seconds, started).await
}

async fn finish_phase(
    tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>,
    stop: Arc<AtomicBool>,
    failures: Arc<AtomicU64>,
    seconds: u64,
    started: Instant,
) -> Phase {
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut min_per_client = u64::MAX;
    for t in tasks {
        let latencies = t.await.unwrap();
        min_per_client = min_per_client.min(latencies.len() as u64);
        all.extend(latencies);
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(failures.load(Ordering::Relaxed), 0, "every benchmark request must succeed");
    all.sort();
    Phase {
        per_second: all.len() as f64 / elapsed,
        p50_ms: percentile(&all, 0.50),
        p99_ms: percentile(&all, 0.99),
        count: all.len() as u64,
        min_per_client,
    }
}

fn pgbench(url: &str, script: &str, extra: &[&str]) -> f64 {
    let path =
        std::env::temp_dir().join(format!("payoutd-pgbench-{}.sql", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, script).unwrap();
    let output = std::process::Command::new("pgbench")
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &clients().to_string(),
            "-j",
            "2",
            "-T",
            &PHASE_SECONDS.to_string(),
            "-f",
        ])
        .arg(&path)
        .args(extra)
        .arg(url)
        .output()
        .expect("pgbench must be installed (postgresql-client)");
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "pgbench failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("tps = ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        })
        .expect("pgbench prints tps")
}

/// The yardstick for creates: a plain intake transaction written here once and never changed with
/// payoutd (a conditional balance debit, the payout row, its journal and two ledger entries, its
/// event, committed together), so a change to payoutd's own intake cannot move what it is compared
/// with. pgbench reads `:word` inside string literals as a variable, hence chr(58) for the colons.
const PGBENCH_CREATE: &str = r#"
\set m random(1, 8)
\set k random(1, 1000000000000000)
BEGIN;
UPDATE balances SET available = available - 1000, held = held + 1000 WHERE merchant_id = 'mer_bench_' || :m::bigint AND asset = 'evm:31337/USDC' AND available >= 1000;
INSERT INTO payouts (id, merchant_id, idempotency_key, fingerprint, asset, amount, destination, metadata, status, version, created_at_ms, updated_at_ms) VALUES ('po_pgb_' || :k::bigint, 'mer_bench_' || :m::bigint, 'pgb-' || :k::bigint, 'fingerprint', 'evm:31337/USDC', 1000, '0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed', '{}', 'requested', 1, 0, 0);
INSERT INTO journals (id, kind, asset, reference, created_at_ms) VALUES ('jnl_pgb_' || :k::bigint, 'hold', 'evm:31337/USDC', 'po_pgb_' || :k::bigint, 0);
INSERT INTO ledger_entries (journal_id, account, asset, direction, amount) VALUES ('jnl_pgb_' || :k::bigint, 'mer_bench_' || :m::bigint || chr(58) || 'available', 'evm:31337/USDC', -1, 1000), ('jnl_pgb_' || :k::bigint, 'mer_bench_' || :m::bigint || chr(58) || 'held', 'evm:31337/USDC', 1, 1000);
INSERT INTO events (id, type, entity_id, merchant_id, payload, created_at_ms) VALUES ('ev_pgb_' || :k::bigint, 'payout.created', 'po_pgb_' || :k::bigint, 'mer_bench_' || :m::bigint, '{"id":"po"}', 0);
END;
"#;

/// The yardstick for replays: the key's merchant, then the payout under its key, as two statements
/// (payoutd asks both in one; the yardstick stays as written so that it does not move with payoutd).
const PGBENCH_REPLAY: &str = r#"
\set n random(1, :keys)
SELECT merchant_id FROM api_keys WHERE key_hash = lpad(((:n::bigint % 8) + 1)::text, 64, '0') AND revoked_at_ms IS NULL;
SELECT p.id, p.amount::text, p.status FROM payouts p JOIN bench_keys b ON p.merchant_id = b.merchant_id AND p.idempotency_key = b.idempotency_key WHERE b.n = :n::bigint;
"#;

#[tokio::main(flavor = "multi_thread")]
#[allow(clippy::too_many_lines)]
// the benchmark's phases in the order it prints them.
async fn main() {
    let db = fresh_postgres().await;
    // Loopback: no TLS on either side (payoutd's pool and pgbench alike), so both measure the database work.
    let url = format!("{}?sslmode=disable", db.url());
    let store = payoutd_store::PgStore::connect(&url).await.unwrap();
    let engine =
        Engine::new(Arc::new(store), Arc::new(SystemClock), AssetRegistry::local_development());
    let usdc = AssetCode::parse("evm:31337/USDC").unwrap().0;
    let mut merchants = Vec::new();
    for i in 0..MERCHANTS {
        let (id, key) =
            engine.create_merchant(&format!("bench-{i}"), [i as u8 + 1; 32]).await.unwrap();
        let fund = Amount::parse("1000000000000000000000000000000").unwrap();
        engine
            .deposit(&id, &usdc, fund, DepositKey::parse(&format!("fund-{i}")).unwrap())
            .await
            .unwrap();
        merchants.push((id, key));
    }
    // One key per client (client i on merchant i % MERCHANTS): the per-key limit is not the bound.
    let mut keys = Vec::new();
    for client in 0..clients() {
        let (merchant, first) = &merchants[client % MERCHANTS];
        let key = if client < MERCHANTS {
            first.expose().to_owned()
        } else {
            engine
                .create_api_key(merchant, [client as u8 + 100; 32])
                .await
                .unwrap()
                .1
                .expose()
                .to_owned()
        };
        keys.push(key);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = AppState::new(engine.clone(), None);
    tokio::spawn(async move {
        payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
    });
    let keys = Arc::new(keys);
    println!(
        "intake benchmark: {} concurrent clients, {MERCHANTS} merchants, {PHASE_SECONDS} s per phase, PostgreSQL at {}",
        clients(),
        payoutd_testkit::db::pg_admin_url()
    );
    run_phase(addr, keys.clone(), WARMUP_SECONDS, Mode::Create("warmup-key")).await;
    // What autovacuum does in a running database (this machine's server runs without it): the
    // tables' statistics. Without them the pool keeps the plans it made for empty tables, and a
    // key lookup walks a merchant's payouts through the listing index (19 ms at 50,000, measured).
    db.exec_raw("ANALYZE").await.unwrap();
    let mark = CpuMark::now();
    let creates = run_phase(addr, keys.clone(), PHASE_SECONDS, Mode::Create("bench-key")).await;
    let create_cpu = mark.per(creates.count as f64);
    // Replays: the same requests again (same key, same body) -> 200 Idempotent-Replayed.
    let existing = creates.min_per_client;
    let mark = CpuMark::now();
    let replays = run_phase(
        addr,
        keys.clone(),
        PHASE_SECONDS,
        Mode::Replay { existing_per_client: existing },
    )
    .await;
    let replay_cpu = mark.per(replays.count as f64);
    let mark = CpuMark::now();
    let engine_replays =
        run_engine_replays(engine.clone(), keys.clone(), PHASE_SECONDS, existing).await;
    let engine_replay_cpu = mark.per(engine_replays.count as f64);

    // Audited before pgbench adds its raw rows (which have no journals behind them).
    let audit = engine.store().audit_ledger().await.unwrap();
    assert!(audit.is_clean(), "ledger must stay clean under load: {audit:?}");

    // PostgreSQL's own rate for a plain intake transaction, on the same database, in the same run.
    for m in 1..=MERCHANTS {
        db.exec_raw(&format!(
            "INSERT INTO merchants (id, name, created_at_ms) VALUES ('mer_bench_{m}', 'pgbench', 0)"
        ))
        .await
        .unwrap();
        db.exec_raw(&format!("INSERT INTO api_keys (key_hash, merchant_id, created_at_ms) VALUES (lpad('{m}', 64, '0'), 'mer_bench_{m}', 0)")).await.unwrap();
        db.exec_raw(&format!("INSERT INTO balances (merchant_id, asset, available, held) VALUES ('mer_bench_{m}', 'evm:31337/USDC', 1000000000000000000000000000000, 0)")).await.unwrap();
    }
    let pg_create_tps = pgbench(&url, PGBENCH_CREATE, &[]);
    db.exec_raw("CREATE TABLE bench_keys AS SELECT row_number() OVER () AS n, merchant_id, idempotency_key FROM payouts").await.unwrap();
    db.exec_raw("CREATE UNIQUE INDEX ON bench_keys (n)").await.unwrap();
    let keys = db.scalar_raw("SELECT count(*) FROM bench_keys").await;
    let mark = CpuMark::now();
    let pg_replay_tps = pgbench(&url, PGBENCH_REPLAY, &["-D", &format!("keys={keys}")]);
    let pgbench_replay_cpu = mark.per(pg_replay_tps * PHASE_SECONDS as f64);

    println!(
        "payoutd creates : {:>8.0} /s  p50 {:>6.2} ms  p99 {:>6.2} ms  ({} payouts)",
        creates.per_second, creates.p50_ms, creates.p99_ms, creates.count
    );
    println!(
        "    CPU per create: payoutd process (server + load generator) {:.0} us, PostgreSQL {:.0} us",
        create_cpu.process_us, create_cpu.postgres_us
    );
    println!(
        "payoutd replays : {:>8.0} /s  p50 {:>6.2} ms  p99 {:>6.2} ms  ({} requests)",
        replays.per_second, replays.p50_ms, replays.p99_ms, replays.count
    );
    println!(
        "    CPU per replay: payoutd process (server + load generator) {:.0} us, PostgreSQL {:.0} us",
        replay_cpu.process_us, replay_cpu.postgres_us
    );
    println!(
        "engine replays  : {:>8.0} /s  p50 {:>6.2} ms  p99 {:>6.2} ms  (the handler's one lookup, no HTTP)",
        engine_replays.per_second, engine_replays.p50_ms, engine_replays.p99_ms
    );
    println!(
        "    CPU per replay: payoutd process {:.0} us, PostgreSQL {:.0} us",
        engine_replay_cpu.process_us, engine_replay_cpu.postgres_us
    );
    println!(
        "pgbench creates : {pg_create_tps:>8.0} /s  (a plain intake transaction, {} clients, -M prepared)",
        clients()
    );
    println!("pgbench replays : {pg_replay_tps:>8.0} /s");
    println!(
        "    CPU per replay: pgbench {:.0} us, PostgreSQL {:.0} us",
        pgbench_replay_cpu.process_us, pgbench_replay_cpu.postgres_us
    );
    let (create_vs, replay_vs) =
        (100.0 * creates.per_second / pg_create_tps, 100.0 * replays.per_second / pg_replay_tps);
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!(
        "bench: creates_per_s={:.0} replays_per_s={:.0} engine_replays_per_s={:.0} create_vs_pgbench={create_vs:.0}% (aim >= {CREATE_AIM_PERCENT}%: {}) \
         replay_vs_pgbench={replay_vs:.0}% (aim >= {REPLAY_AIM_PERCENT}%: {}) replay_vs_create={:.1}x ledger_clean={}",
        creates.per_second,
        replays.per_second,
        engine_replays.per_second,
        verdict(create_vs >= CREATE_AIM_PERCENT),
        verdict(replay_vs >= REPLAY_AIM_PERCENT),
        replays.per_second / creates.per_second,
        audit.is_clean()
    );
}
