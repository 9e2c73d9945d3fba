//! Memory benchmark: a real `payoutd worker` paying a backlog of waiting payouts beside as many settled ones on PostgreSQL and anvil, and a real `payoutd serve --api-only` taking them in and answering reads; prints each process's peak resident memory beside the aim.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::Parser;
use payoutd_domain::Amount;
use payoutd_rail_evm::SigningKey;
use payoutd_testkit::{
    ANVIL_CHAIN_ID, ANVIL_KEY_0, Anvil, AnvilOptions, TEST_TOKEN_DECIMALS, deploy_test_token,
};
use serde_json::json;
use tokio::task::JoinSet;

use payoutd_demo::api::{Api, As};
use payoutd_demo::chain::start_anvil;
use payoutd_demo::intake;
use payoutd_demo::pg::Database;
use payoutd_demo::report::say;
use payoutd_demo::rng::{count_in, random_bytes};
use payoutd_demo::server::{
    self, ChainSetup, ETH, HOT_WALLET_KEY_ENV, Payoutd, TOKEN_SUPPLY, USDC,
};
use payoutd_demo::signals;

/// The aim per process, in MiB of peak resident memory.
const PEAK_RSS_AIM_MIB: u64 = 64;
const PAYOUTS_DEFAULT: usize = 100_000;
/// Credited to the merchant: far more than the payouts sum to.
const ETH_DEPOSIT_WEI: u128 = 1_000_000_000_000_000_000_000;
/// Payout i pays this plus i wei, each to its own address (`intake::destination`): the
/// near-duplicate policy holds none.
const PAYOUT_AMOUNT_BASE_WEI: u128 = 1_000_000;
/// Names the run in destinations (each run has its own database and node).
const RUN_TAG: u32 = 0x4d45_4d00;
/// Creates in flight while filling.
const SUBMIT_IN_FLIGHT: usize = 16;
/// The worker must pay a backlog within this many seconds per 1,000 payouts.
const PAY_SECS_PER_THOUSAND_MAX: u64 = 30;
const READY_TIMEOUT_SECS: u64 = 30;
const POLL_MS: u64 = 1_000;
/// Reads the API answers while the worker pays: a page of this many payouts at a time.
const READ_PAGE_LIMIT: u32 = 100;
/// Block states and blocks of transactions anvil keeps (`--prune-history`, `--transaction-block-keeper`):
/// payoutd reads at most a few blocks back. With the states alone pruned, anvil still held every
/// transaction and was killed for memory (23 GiB) after 100,000 transfers, taking the next payouts in.
const ANVIL_STATES_KEPT: &str = "256";
/// Intake limits raised past what filling asks (the defaults would answer 429).
const LIMITS_TOML: &str =
    "payouts_per_merchant_per_minute = 10000000\nrequests_per_second_per_key = 1000000\n";

/// payoutd's memory with a large backlog: N payouts paid, then N more waiting, then paid by a fresh
/// worker while the API answers reads.
#[derive(Parser)]
#[command(name = "payoutd-memory")]
struct Args {
    /// Payouts settled first, and as many then waiting.
    #[arg(long, value_name = "N", default_value_t = PAYOUTS_DEFAULT, value_parser = count_in(1_000, 1_000_000))]
    payouts: usize,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    payoutd_demo::report::set_prefix("memory");
    let args = Args::parse();
    let created = async {
        let tag = format!("memory{:08x}", u32::from_be_bytes(random_bytes()?));
        Database::create_for_a_benchmark(&tag).await
    };
    let db = match created.await {
        Ok(db) => db,
        Err(e) => {
            eprintln!("payoutd-memory: error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    // Stopped by a signal, the run is dropped, which kills anvil and the payoutd processes (an
    // hour's run is often stopped by hand); the database is dropped either way.
    let code = signals::run_until_stopped(
        "payoutd-memory",
        async { run(&db, args.payouts).await.map(|()| true) },
        signals::terminated_or_interrupted(),
    )
    .await;
    if let Err(e) = db.drop_now().await {
        say(format!("could not drop database: {e:#}"));
    }
    code
}

/// What the run leaves running: anvil, the API process, the merchant's client, and the
/// configuration file the workers read.
struct World {
    anvil: Anvil,
    serve: Payoutd,
    api: Arc<Api>,
    config: PathBuf,
}

async fn run(db: &Database, payouts: usize) -> anyhow::Result<()> {
    let mut world = start(db).await?;
    let _analyzing = match db.autovacuum_runs().await? {
        true => None,
        false => {
            say(format!(
                "this PostgreSQL runs without autovacuum: ANALYZE every {}s in its place",
                payoutd_demo::pg::ANALYZE_EVERY_SECS
            ));
            Some(db.analyze_in_place_of_autovacuum())
        }
    };
    // 1. A backlog paid: N payouts taken in, then a worker pays them all.
    let started = Instant::now();
    submit(&world.api, 0, payouts).await?;
    say(format!("{payouts} payouts taken in over HTTP in {:.1}s", started.elapsed().as_secs_f64()));
    let first = pay_backlog(db, &world, payouts, "worker-1.log").await?;
    let mib = |kib: u64| kib.div_ceil(1024);
    say(format!(
        "worker over {payouts} waiting (none settled): peak {} MiB, paid in {:.1}s",
        mib(first.peak_kib),
        first.secs
    ));
    // 2. N more waiting beside the N settled, paid by a fresh worker while the API answers reads,
    // on a fresh anvil holding the first one's state: anvil keeps memory for every transfer it
    // mined (15 GiB after 100,000, pruned or not), and this machine cannot hold twice that.
    restart_anvil(&mut world).await?;
    let started = Instant::now();
    submit(&world.api, payouts, payouts).await?;
    say(format!("{payouts} more taken in over HTTP in {:.1}s", started.elapsed().as_secs_f64()));
    let second = pay_backlog(db, &world, 2 * payouts, "worker-2.log").await?;
    let api_peak_kib = peak_rss_kib(world.serve.pid().context("serve pid")?)?;
    world.serve.stop().await;
    say(format!(
        "worker over {payouts} waiting and {payouts} settled: peak {} MiB, paid in {:.1}s, {} API reads meanwhile",
        mib(second.peak_kib),
        second.secs,
        second.reads
    ));
    say(format!(
        "api (--api-only) through {} creates and the reads: peak {} MiB",
        2 * payouts,
        mib(api_peak_kib)
    ));
    let peak = |kib: u64| if mib(kib) <= PEAK_RSS_AIM_MIB { "within" } else { "OVER" };
    say(format!(
        "payouts_waiting={payouts} payouts_settled={payouts} worker_peak_rss_mib={} ({} the aim) api_peak_rss_mib={} ({} the aim) aim_mib={PEAK_RSS_AIM_MIB}",
        mib(second.peak_kib),
        peak(second.peak_kib),
        mib(api_peak_kib),
        peak(api_peak_kib)
    ));
    Ok(())
}

/// anvil's options: interval mining, and recent states and blocks only.
fn anvil_options() -> AnvilOptions {
    // anvil keeps every block's state in memory unless told not to: about 19 GiB after 100,000
    // transfers, which this machine cannot hold twice over. Recent states are all payoutd reads.
    let extra_args =
        ["--prune-history", ANVIL_STATES_KEPT, "--transaction-block-keeper", ANVIL_STATES_KEPT]
            .map(str::to_owned)
            .to_vec();
    AnvilOptions { extra_args, ..AnvilOptions::block_time_secs(1) }
}

/// Moves the chain to a fresh anvil: the old one's state (accounts, nonces, the head and the
/// blocks it kept) dumped, written beside the configuration and loaded by the new one at its
/// start (anvil's `anvil_loadState` call refuses a body of this size), and the workers'
/// configuration pointed at it. The API process runs no rail and never calls the node.
async fn restart_anvil(world: &mut World) -> anyhow::Result<()> {
    let old_url = world.anvil.url().to_owned();
    let head_before = world.anvil.rpc().block_number().await.context("head before the move")?;
    let dump: String =
        world.anvil.rpc().call("anvil_dumpState", json!([])).await.context("anvil_dumpState")?;
    let gzipped = hex::decode(dump.trim_start_matches("0x")).context("anvil's dump is hex")?;
    let mut state = Vec::new();
    flate2::read::GzDecoder::new(gzipped.as_slice())
        .read_to_end(&mut state)
        .context("anvil's dump is gzip")?;
    let state_file = world.config.with_file_name("anvil-state.json");
    std::fs::write(&state_file, &state)?;
    let mut options = anvil_options();
    options.extra_args.extend(["--load-state".to_owned(), state_file.display().to_string()]);
    let (anvil, rpc) = start_anvil(options).await?;
    let head_after = rpc.block_number().await.context("head after the move")?;
    ensure!(
        head_after >= head_before,
        "the fresh anvil is at block {head_after}, the old one was at {head_before}"
    );
    let text = std::fs::read_to_string(&world.config)?;
    std::fs::write(&world.config, text.replace(&old_url, anvil.url()))?;
    say(format!(
        "chain moved to a fresh anvil on {} at block {head_after} ({} MiB of state)",
        anvil.url(),
        state.len() / (1024 * 1024)
    ));
    world.anvil = anvil;
    Ok(())
}

/// anvil with a test token (the configuration's second asset), the schema, a merchant with money,
/// and `payoutd serve --api-only`.
async fn start(db: &Database) -> anyhow::Result<World> {
    let (anvil, rpc) = start_anvil(anvil_options()).await?;
    let key = SigningKey::from_hex(ANVIL_KEY_0)?;
    let token = deploy_test_token(&rpc, &key, Amount::from_u128(TOKEN_SUPPLY))
        .await
        .context("deploy the test token")?;
    let work = server::fresh_work_dir(".memory")?;
    let setup = ChainSetup {
        chain_id: ANVIL_CHAIN_ID,
        rpc_url: anvil.url(),
        token,
        eth_code: ETH,
        usdc_code: USDC,
        usdc_decimals: TEST_TOKEN_DECIMALS,
    };
    let config = work.join("payoutd.toml");
    let wallets = server::key_envs_toml(&[HOT_WALLET_KEY_ENV]);
    std::fs::write(
        &config,
        LIMITS_TOML.to_owned() + &server::config_toml_with(&setup, Some(&db.url), Some(&wallets)),
    )?;
    let operator_key = format!("memory-operator-{}", hex::encode(random_bytes::<16>()?));
    let env = vec![
        ("PAYOUTD_OPERATOR_KEY".to_owned(), operator_key.clone()),
        (HOT_WALLET_KEY_ENV.to_owned(), ANVIL_KEY_0.to_owned()),
        ("PAYOUTD_LOG".to_owned(), "warn".to_owned()),
    ];
    let mut serve = Payoutd::new(server::payoutd_bin()?, &work, config.clone(), env).api_only();
    serve.cli(&["migrate"]).await?;
    let merchant = serve.cli(&["merchant", "create", "Memory Platform"]).await?;
    let merchant_id = merchant["id"].as_str().context("merchant id")?.to_owned();
    let merchant_key = merchant["api_key"].as_str().context("merchant api_key")?.to_owned();
    let amount = ETH_DEPOSIT_WEI.to_string();
    serve
        .cli(&[
            "deposit",
            "--merchant",
            &merchant_id,
            "--asset",
            ETH,
            "--amount",
            &amount,
            "--idempotency-key",
            "memory-funding-eth",
        ])
        .await?;
    let addr = serve.start().await?;
    let api = Arc::new(Api::new(format!("http://{addr}"), merchant_key, operator_key)?);
    api.wait_ready(READY_TIMEOUT_SECS).await?;
    say(format!(
        "anvil on {}, PostgreSQL database {}, payoutd serve --api-only on {addr} (pid {})",
        anvil.url(),
        db.name,
        serve.pid().unwrap_or(0)
    ));
    Ok(World { anvil, serve, api, config })
}

/// Payouts `first..first + count`, `SUBMIT_IN_FLIGHT` at a time; each must be created.
async fn submit(api: &Arc<Api>, first: usize, count: usize) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(first as u64));
    let end = (first + count) as u64;
    let mut tasks = JoinSet::new();
    for _ in 0..SUBMIT_IN_FLIGHT {
        let (api, next) = (Arc::clone(api), Arc::clone(&next));
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    return anyhow::Ok(());
                }
                let body = json!({"idempotency_key": format!("memory-{i:08}"), "asset": ETH,
                    "amount": (PAYOUT_AMOUNT_BASE_WEI + u128::from(i)).to_string(), "destination": intake::destination(RUN_TAG, u32::try_from(i).expect("at most 2,000,000 payouts")).to_string()});
                let reply = api.post("/v1/payouts", &body, As::Merchant).await?;
                ensure!(reply.status.is_success(), "payout {i}: {} {}", reply.status, reply.problem_slug());
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// One worker's run over a backlog.
struct Paid {
    peak_kib: u64,
    secs: f64,
    reads: u64,
}

/// A fresh `payoutd worker` until `paid_total` payouts are paid, the API read meanwhile; its peak
/// resident memory read just before it stops.
async fn pay_backlog(
    db: &Database,
    world: &World,
    paid_total: usize,
    log: &str,
) -> anyhow::Result<Paid> {
    let started = Instant::now();
    let worker = world.serve.launcher().spawn_worker(log)?;
    let pid = worker.id().context("worker pid")?;
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader =
        tokio::spawn(read_while(Arc::clone(&world.api), Arc::clone(&stop), Arc::clone(&reads)));
    let deadline = started
        + Duration::from_secs(PAY_SECS_PER_THOUSAND_MAX * (paid_total as u64).div_ceil(1_000));
    // A count that does not come back in time (a loaded machine) is read again at the next poll:
    // the run is judged by the last count read, at the deadline at the latest.
    let mut paid = 0;
    while paid < paid_total && Instant::now() <= deadline {
        match db.query("SELECT count(*) FROM payouts WHERE status = 'paid'").await {
            Ok(text) => paid = text.trim().parse::<usize>()?,
            Err(e) => say(format!("could not count the paid payouts at this poll: {e:#}")),
        }
        if paid < paid_total {
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }
    let peak_kib = peak_rss_kib(pid)?;
    stop.store(true, Ordering::Relaxed);
    reader.await??;
    server::terminate(worker).await;
    ensure!(paid >= paid_total, "{paid} of {paid_total} payouts paid at the deadline (see {log})");
    Ok(Paid {
        peak_kib,
        secs: started.elapsed().as_secs_f64(),
        reads: reads.load(Ordering::Relaxed),
    })
}

/// The merchant's first pages of payouts, again and again, until told to stop.
async fn read_while(
    api: Arc<Api>,
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        for path in [
            format!("/v1/payouts?limit={READ_PAGE_LIMIT}"),
            format!("/v1/payouts?status=paid&limit={READ_PAGE_LIMIT}"),
        ] {
            let reply = api.get(&path).await?;
            ensure!(reply.status.is_success(), "GET {path}: {}", reply.status);
            reads.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// The process's peak resident set (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("no VmHWM line")?;
    line.split_whitespace().nth(1).context("VmHWM value")?.parse().context("VmHWM in kB")
}
