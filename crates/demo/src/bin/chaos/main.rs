//! The chaos run: one `payoutd serve` (API only) and several `payoutd worker` processes on one PostgreSQL, SIGKILLed and restarted at random, paying from two hot wallets through a node proxy that loses, delays and refuses; the chain alone says what was paid.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use payoutd_demo::api::{Api, As};
use payoutd_demo::chain::{self, Coin, Scan, Signature};
use payoutd_demo::chaos_proxy::{self, ChaosProxy};
use payoutd_demo::failover::{FAILOVERS_MIN, FailoverReport, Failovers};
use payoutd_demo::fleet::{self, Fleet, FleetReport};
use payoutd_demo::intake::{self, Outcome, Pacing, Planned};
use payoutd_demo::pg::Database;
use payoutd_demo::providers::ProviderSide;
use payoutd_demo::report::{
    Checks, Deposit, RailCount, count_by_status, format_counts, ledger_checks, say,
};
use payoutd_demo::rng::{Rng, count_in, random_bytes};
use payoutd_demo::server::{self, ChainSetup, ETH, Launcher, Payoutd, TOKEN_SUPPLY, USDC};
use payoutd_demo::solana::SolanaSide;
use payoutd_demo::webhooks::PaidWebhooks;
use payoutd_domain::Amount;
use payoutd_rail_evm::{EvmRpc, SigningKey};
use payoutd_testkit::{
    ANVIL_CHAIN_ID, ANVIL_KEY_0, ANVIL_KEY_1, ANVIL_KEY_2, Anvil, AnvilOptions,
    TEST_TOKEN_DECIMALS, deploy_test_token,
};
use reqwest::StatusCode;
use serde_json::json;

mod verdict;
mod watch;
use verdict::{judge, summary};
use watch::{Watch, stuck_nonce_history, watch};

/// The CI size: a couple of minutes on two cores.
const PAYOUTS_DEFAULT: usize = 300;
const PAYOUTS_MIN: usize = 20;
const PAYOUTS_MAX: usize = 20_000;
const WORKERS_DEFAULT: usize = 3;
const WORKERS_MAX: usize = 8;
/// The proxy's fault rates as named in `chaos_proxy`, in percent (0: kills only, no node faults).
const FAULT_PERCENT_DEFAULT: u64 = 100;
const FAULT_PERCENT_MAX: u64 = 400;
/// Interval mining: anvil's automine stalls under load.
const BLOCK_TIME_SECS: u64 = 1;
/// Hot wallets: anvil's default accounts 1 and 2; account 0 deploys and funds the token.
const HOT_WALLET_KEYS: [&str; 2] = [ANVIL_KEY_1, ANVIL_KEY_2];
const HOT_WALLET_KEY_ENVS: [&str; 2] =
    ["PAYOUTD_CHAOS_HOT_WALLET_KEY_A", "PAYOUTD_CHAOS_HOT_WALLET_KEY_B"];
/// Credited to the merchant: 100 ETH and 100M USDC cover 20,000 payouts of either.
const ETH_DEPOSIT_WEI: u128 = 100_000_000_000_000_000_000;
const USDC_DEPOSIT: u128 = 100_000_000_000_000;
const DEPOSITS: &[Deposit<'static>] = &[
    Deposit { asset: ETH, coin: Coin::Eth, amount: ETH_DEPOSIT_WEI },
    Deposit { asset: USDC, coin: Coin::Usdc, amount: USDC_DEPOSIT },
];
const MERCHANT_NAME: &str = "Chaos Platform";
/// Solana payouts beside the EVM ones: a tenth of them, at most this many.
const SOLANA_PAYOUTS_MAX: usize = 500;
/// How long the Solana payouts may take to settle once the EVM ones have.
const SOLANA_SETTLE_SECS: u64 = 120;
/// Merchants in flight at once, and a new business event every this many ms: 300 arrive over ~8 s.
const PACING: Pacing = Pacing { concurrency: 16, pace_ms: 25 };
/// One payout in this many is sent as a burst of identical concurrent requests.
const BURST_ONE_IN: usize = 40;
/// `payoutd serve` is SIGKILLed once, when this share of the payouts exists and merchants are still submitting.
const SERVE_KILL_AT_PERCENT: usize = 40;
/// Every payout must be final within base + per-payout time of the first submission.
const DEADLINE_BASE_SECS: u64 = 120;
const DEADLINE_PER_PAYOUT_MS: u64 = 100;
const READY_TIMEOUT_SECS: u64 = 30;
const POLL_MS: u64 = 500;
const INCIDENTS_SHOWN: usize = 10;
/// A plateau of paid payouts this long gets the node's pool printed (diagnostics).
const STALL_REPORT_AFTER_SECS: u64 = 15;
const PROGRESS_EVERY_SECS: u64 = 5;
/// Final states that pass: paid, or waiting for a person (reported by count).
const FINAL_OK: &[&str] = &["paid", "held_for_review", "needs_attention"];
/// Final states that fail the run: payoutd gave up on a payout while the node was healthy.
const FINAL_GIVEN_UP: &[&str] = &["failed", "canceled", "rejected"];

/// payoutd's chaos run: payoutd processes killed and restarted, node faults, every payout counted
/// on the chains and at the providers.
#[derive(Parser)]
#[command(name = "payoutd-chaos")]
struct Args {
    /// Business events to pay.
    #[arg(long, value_name = "N", default_value_t = PAYOUTS_DEFAULT, value_parser = count_in(PAYOUTS_MIN, PAYOUTS_MAX))]
    payouts: usize,
    /// Worker processes.
    #[arg(long, value_name = "W", default_value_t = WORKERS_DEFAULT, value_parser = count_in(1, WORKERS_MAX))]
    workers: usize,
    /// The node faults' rates, in percent of those named in the fault proxy (0: kills only).
    #[arg(long, value_name = "P", default_value_t = FAULT_PERCENT_DEFAULT, value_parser = clap::value_parser!(u64).range(0..=FAULT_PERCENT_MAX))]
    fault_percent: u64,
    /// The seed of the run's faults and kills (a random one when absent; the run prints it).
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Every payout must be final this long after the first submission (by default from the size).
    #[arg(long, value_name = "D")]
    deadline_secs: Option<u64>,
    /// Keep the run's database and its `.chaos/` directory afterwards.
    #[arg(long)]
    keep: bool,
    /// Run on the highly available cluster of `scripts/ha` (which `scripts/chaos` starts) and
    /// SIGKILL its leader's PostgreSQL and Patroni several times under load.
    #[arg(long)]
    db_failover: bool,
}

/// `scripts/ha`, as `scripts/chaos` names it.
const HA_SCRIPT_ENV: &str = "PAYOUTD_HA_SCRIPT";
/// What failovers add to the deadline: each stops every write for up to a Patroni ttl or two.
const DEADLINE_DB_FAILOVER_SECS: u64 = 150;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    payoutd_demo::report::set_prefix("chaos");
    let args = Args::parse();
    payoutd_demo::signals::run_until_stopped(
        "payoutd-chaos",
        run(args),
        payoutd_demo::signals::terminated_or_interrupted(),
    )
    .await
}

/// The node, the token and the database around the run; the database is dropped whatever happens.
#[allow(clippy::too_many_lines)]
// the run's phases in the order it prints them.
async fn run(args: Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    let seed = match args.seed {
        Some(seed) => seed,
        None => u64::from_be_bytes(random_bytes()?),
    };
    let run_tag = u32::from_be_bytes(random_bytes()?);
    let bin = server::payoutd_bin()?;
    let work = server::fresh_work_dir(".chaos")?;

    let (anvil, rpc) = chain::start_anvil(AnvilOptions::block_time_secs(BLOCK_TIME_SECS)).await?;
    let funder = SigningKey::from_hex(ANVIL_KEY_0)?;
    let wallets = HOT_WALLET_KEYS
        .iter()
        .map(|k| SigningKey::from_hex(k).map(|k| k.address()))
        .collect::<Result<Vec<_>, _>>()?;
    let token = deploy_test_token(&rpc, &funder, Amount::from_u128(TOKEN_SUPPLY))
        .await
        .context("deploy the test token")?;
    for wallet in &wallets {
        chain::fund_token(
            &rpc,
            &funder,
            token,
            *wallet,
            Amount::from_u128(TOKEN_SUPPLY / wallets.len() as u128),
        )
        .await?;
    }
    // The hot wallets have sent nothing yet: every transaction of theirs from here on is payoutd's.
    let first_block = rpc.block_number().await? + 1;
    say(format!(
        "seed {seed}; anvil on {} (--block-time {BLOCK_TIME_SECS}); test ERC-20 {token}; hot wallets {} (anvil keys 1 and 2)",
        anvil.url(),
        wallets.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    ));

    let solana = SolanaSide::start(None).await?;
    say(format!(
        "Solana node on {}; hot wallet {}; SPL token {}",
        solana.rpc_url,
        solana.hot_wallet(),
        solana.mint
    ));
    let providers = ProviderSide::start().await;
    say(format!("payment providers simulated at {}", providers.urls()));

    let db = Database::create_for_chaos(&format!("{run_tag:08x}")).await?;
    say(format!("PostgreSQL database {} (fresh)", db.name));
    let ctx = Ctx {
        args: &args,
        seed,
        run_tag,
        bin,
        work,
        anvil: &anvil,
        rpc,
        token,
        wallets,
        first_block,
        db: &db,
        solana: &solana,
        providers: &providers,
        started,
    };
    let outcome = chaos(ctx).await;
    if args.keep {
        // stderr: the last line of stdout stays the counts.
        eprintln!("payoutd-chaos: kept database {} ({}) and .chaos/", db.name, db.url);
    } else if let Err(e) = db.drop_now().await {
        say(format!("could not drop database: {e:#}"));
    }
    outcome
}

struct Ctx<'a> {
    args: &'a Args,
    seed: u64,
    run_tag: u32,
    bin: std::path::PathBuf,
    work: std::path::PathBuf,
    anvil: &'a Anvil,
    rpc: EvmRpc,
    token: payoutd_domain::EvmAddress,
    wallets: Vec<payoutd_domain::EvmAddress>,
    first_block: u64,
    db: &'a Database,
    solana: &'a SolanaSide,
    providers: &'a ProviderSide,
    started: Instant,
}

#[allow(clippy::too_many_lines)]
// the run's phases in the order it prints them.
async fn chaos(ctx: Ctx<'_>) -> anyhow::Result<bool> {
    let args = ctx.args;
    let mut rng = Rng::new(ctx.seed);
    let mut checks = Checks::default();

    // 1. The proxy between every payoutd process and the node (faults start with the workers).
    let proxy = ChaosProxy::start(ctx.anvil.url(), rng.fork(), args.fault_percent).await?;
    let (send_rates, read_rates) = proxy.rates();
    let proxy_url = proxy.url();
    let setup = ChainSetup {
        chain_id: ANVIL_CHAIN_ID,
        rpc_url: &proxy_url,
        token: ctx.token,
        eth_code: ETH,
        usdc_code: USDC,
        usdc_decimals: TEST_TOKEN_DECIMALS,
    };
    let api_config = ctx.work.join("api.toml");
    let worker_config = ctx.work.join("worker.toml");
    // The Solana node behind a proxy that loses some send answers after the node took the bytes,
    // in front of one that answers some status searches as a replica behind.
    let solana_lagging = ChaosProxy::lagging_only(&ctx.solana.rpc_url, rng.fork()).await?;
    solana_lagging.set_active(true);
    let solana_proxy = SolanaSide::faulty_proxy_to(&solana_lagging.url()).await;
    std::fs::write(
        &api_config,
        server::config_toml_with(&setup, Some(&ctx.db.url), None)
            + &ctx.solana.assets_toml()
            + &ctx.providers.assets_toml(),
    )?;
    std::fs::write(
        &worker_config,
        server::config_toml_with(
            &setup,
            Some(&ctx.db.url),
            Some(&server::key_envs_toml(&HOT_WALLET_KEY_ENVS)),
        ) + &ctx.solana.config_toml(solana_proxy.url())
            + &ctx.providers.config_toml(),
    )?;
    let log_level = std::env::var("PAYOUTD_LOG").unwrap_or_else(|_| "info".to_owned());

    // 2. The API process: no chains, so it never touches the node; workers do all the paying.
    let operator_key = format!("chaos-operator-{}", hex::encode(random_bytes::<16>()?));
    let serve_env = vec![
        ("PAYOUTD_OPERATOR_KEY".to_owned(), operator_key.clone()),
        ("PAYOUTD_LOG".to_owned(), log_level.clone()),
    ];
    let mut serve = Payoutd::new(ctx.bin.clone(), &ctx.work, api_config, serve_env).api_only();
    // One process creates the schema before several race to.
    serve.cli(&["migrate"]).await?;
    let merchant = serve.cli(&["merchant", "create", MERCHANT_NAME]).await?;
    let merchant_id = merchant["id"].as_str().context("merchant id")?.to_owned();
    let merchant_key = merchant["api_key"].as_str().context("merchant api_key")?.to_owned();
    let addr = serve.start().await?;
    let api = Arc::new(Api::new(format!("http://{addr}"), merchant_key, operator_key)?);
    api.wait_ready(READY_TIMEOUT_SECS).await?;
    for deposit in DEPOSITS {
        let body = json!({"merchant_id": merchant_id, "asset": deposit.asset, "amount": deposit.amount.to_string(),
            "idempotency_key": format!("chaos-funding-{}-{:08x}", deposit.asset.replace([':', '/'], "-"), ctx.run_tag)});
        let first = api.post("/v1/deposits", &body, As::Operator).await?;
        let again = api.post("/v1/deposits", &body, As::Operator).await?;
        checks.add(
            first.status == StatusCode::CREATED && again.status == StatusCode::OK && again.replayed,
            format!(
                "deposit of {} {} sent twice: {} then {} replayed={}",
                deposit.amount,
                deposit.asset,
                first.status.as_u16(),
                again.status.as_u16(),
                again.replayed
            ),
        );
    }

    // The merchant listens for payout.paid; the check at the end wants each paid payout announced.
    let webhooks = PaidWebhooks::register(&api).await?;
    say(format!("webhook receiver {} registered for payout.paid", webhooks.url()));

    // 3. The workers, killed and restarted at random while the node misbehaves.
    let mut worker_env: Vec<(String, String)> = HOT_WALLET_KEY_ENVS
        .iter()
        .zip(HOT_WALLET_KEYS)
        .map(|(e, k)| ((*e).to_owned(), k.to_owned()))
        .collect();
    worker_env.push(("PAYOUTD_LOG".to_owned(), log_level));
    worker_env.push(ctx.solana.key_env());
    worker_env.extend(ctx.providers.env());
    let launcher = Launcher::new(ctx.bin.clone(), &ctx.work, worker_config, worker_env);
    proxy.set_active(true);
    let fleet = Fleet::start(launcher, args.workers, rng.fork())?;
    let worker_kills = fleet.kill_counter();
    let stop_fleet = Arc::new(AtomicBool::new(false));
    let fleet_task = tokio::spawn(fleet.run(Arc::clone(&stop_fleet)));
    let failover_task = if args.db_failover {
        let script = std::env::var(HA_SCRIPT_ENV).with_context(|| {
            format!("--db-failover runs through scripts/chaos, which sets {HA_SCRIPT_ENV}")
        })?;
        let failovers = Failovers::new(script.into(), ctx.db, rng.fork());
        say(
            "database failovers: the cluster's leader SIGKILLed (PostgreSQL and Patroni) 2-6 s after the workers start, then 10-20 s after the cluster is whole again",
        );
        Some(tokio::spawn(failovers.run(Arc::clone(&stop_fleet))))
    } else {
        None
    };
    say(format!(
        "payoutd serve (API only, pid {}) on {}; {} payoutd workers on the same database; node calls through the chaos proxy {} (send faults {}‰, other methods {}‰, outages every {}-{} s unless faults are off); worker kills every {}-{} ms",
        serve.pid().unwrap_or(0),
        api.base(),
        args.workers,
        proxy_url,
        send_rates.total(),
        read_rates.total(),
        chaos_proxy::OUTAGE_EVERY_SECS_MIN,
        chaos_proxy::OUTAGE_EVERY_SECS_MAX,
        fleet::KILL_EVERY_MS_MIN,
        fleet::KILL_EVERY_MS_MAX,
    ));

    // 4a. Solana payouts, each asked for twice, paid while workers are killed.
    let (solana_plans, solana_ids) =
        SolanaSide::submit_share(&api, &merchant_id, ctx.run_tag, args.payouts, SOLANA_PAYOUTS_MAX)
            .await?;
    // 4b. Payouts through each payment provider, each asked for twice, paid while workers are killed.
    let provider_payouts = ctx.providers.submit(&api, &merchant_id, ctx.run_tag).await?;

    // 4c. The merchants: every request at least twice, some in bursts, retried through the serve kill.
    let bursts = args.payouts / BURST_ONE_IN;
    let plan = Arc::new(intake::plan(args.payouts, ctx.run_tag, ETH, USDC, 0, bursts));
    say(format!(
        "submitting {} payouts (half ETH, half USDC, each to its own address): each request twice, {bursts} as {} identical concurrent requests",
        plan.len(),
        intake::BURST_SIZE
    ));
    let deadline_secs = args
        .deadline_secs
        .unwrap_or(DEADLINE_BASE_SECS + DEADLINE_PER_PAYOUT_MS * args.payouts as u64 / 1_000)
        + if args.db_failover { DEADLINE_DB_FAILOVER_SECS } else { 0 };
    let watch = watch(&ctx, &api, &mut serve, &plan, &proxy, &worker_kills, deadline_secs).await?;

    // The Solana payouts settle while the workers (and their kills) still run.
    let settle_secs =
        SOLANA_SETTLE_SECS + if args.db_failover { DEADLINE_DB_FAILOVER_SECS } else { 0 };
    let solana_paid = SolanaSide::wait_settled(&api, &solana_ids, FINAL_OK, settle_secs).await?;
    SolanaSide::wait_settled(&api, &provider_payouts.all(), FINAL_OK, settle_secs).await?;

    // 5. Everything stops: workers (SIGTERM), faults; then the node is read directly.
    stop_fleet.store(true, Ordering::Relaxed);
    let fleet_report = fleet_task.await.context("fleet task")?;
    let failover_report = match failover_task {
        Some(task) => {
            let report = task.await.context("failover task")?;
            checks.add(
                report.failovers >= FAILOVERS_MIN && report.trouble.is_empty(),
                format!(
                    "database failovers: {} (at least {FAILOVERS_MIN}; longest {} ms) {:?}",
                    report.failovers, report.failover_ms_max, report.trouble
                ),
            );
            report
        }
        None => FailoverReport::default(),
    };
    proxy.set_active(false);
    // Before the drain: what the node holds if payouts are stuck.
    let mut pool_lines = Vec::new();
    if watch.timed_out {
        for wallet in &ctx.wallets {
            pool_lines.push(chain::pool_line(&ctx.rpc, *wallet).await);
            stuck_nonce_history(&ctx, &proxy, *wallet).await;
        }
    }
    let mut drained = true;
    let mut scan = Scan { first_block: ctx.first_block, ..Scan::default() };
    let mut per_wallet = Vec::new();
    for wallet in &ctx.wallets {
        let wallet_drained = chain::wait_pool_drained(&ctx.rpc, *wallet).await?;
        if !wallet_drained {
            // What the node still holds, and how that nonce was used: the check says why it failed.
            say(format!("not drained: {}", chain::pool_line(&ctx.rpc, *wallet).await));
            stuck_nonce_history(&ctx, &proxy, *wallet).await;
        }
        drained &= wallet_drained;
        let one = chain::scan(&ctx.rpc, *wallet, ctx.token, ctx.first_block).await?;
        per_wallet.push(format!("{wallet}={}", one.transfers.len()));
        scan.absorb(one);
    }
    say(format!("transfers per hot wallet: {}", per_wallet.join(" ")));
    let statuses = api.statuses().await?;
    let paid: BTreeSet<String> =
        statuses.iter().filter(|(_, s)| s.as_str() == "paid").map(|(id, _)| id.clone()).collect();
    webhooks.wait_for(&paid).await;
    let webhook_report = webhooks.report(&paid);
    say(webhook_report.line());
    verdict::webhook_checks(&webhook_report, &mut checks);
    let incidents =
        serve.launcher().cli_output(&["incidents"]).await.map(|o| {
            o.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect::<Vec<_>>()
        });

    let history = history(ctx.db).await;
    // The EVM verdict judges the EVM payouts; the Solana and provider ones are counted on their own below.
    let other_rail_ids: BTreeSet<&String> =
        solana_ids.values().chain(provider_payouts.ids()).collect();
    let evm_statuses: HashMap<String, String> = statuses
        .iter()
        .filter(|(id, _)| !other_rail_ids.contains(id))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let verdict = judge(&api, &plan, &watch, &evm_statuses, &scan, drained, &mut checks).await?;
    let mismatches = serve.launcher().balance_mismatches().await?;
    checks.add(
        mismatches.is_empty(),
        format!("every hot wallet's and provider account's balance is what the ledger says ({} balance_mismatch incidents: {mismatches:?})", mismatches.len()),
    );
    let solana = ctx.solana.rail_count(&solana_plans, solana_paid).await?;
    checks.add(
        solana.paid == solana.payouts
            && solana.duplicates == 0
            && solana.transfers_on_chain == solana.paid,
        format!(
            "Solana: {} ({} sends seen by the proxy, {} answers lost)",
            solana.line("solana"),
            solana_proxy.count("sendTransaction"),
            payoutd_demo::solana::LOST_ANSWERS
        ),
    );
    let prov = ctx.providers.rail_count(&provider_payouts, &statuses);
    checks.add(
        prov.paid == prov.payouts
            && prov.duplicates == 0
            && prov.transfers_on_chain == prov.paid
            && ctx.providers.created_in_all() == prov.transfers_on_chain,
        format!(
            "providers: {} (counted at the simulators, {} created in all and not declined)",
            prov.line("provider"),
            ctx.providers.created_in_all()
        ),
    );
    let routed = ctx.providers.routed(&provider_payouts);
    checks.add(
        routed == payoutd_demo::providers::CIRCLE_DECLINED,
        format!(
            "routing: {routed} Circle payouts whose transfer Circle declined were paid by Coinbase"
        ),
    );
    summary(
        &ctx,
        &watch,
        &fleet_report,
        (&proxy, &solana_lagging),
        &scan,
        &verdict,
        incidents,
        &history,
        &pool_lines,
        deadline_secs,
        &checks,
        &[("solana", solana), ("provider", prov)],
        &failover_report,
    );
    serve.stop().await;
    Ok(verdict.ok(&checks))
}

/// What payoutd's database says it went through (diagnostics, never the verdict): events by
/// type (a payout that passed through needs_attention and was paid later shows here), node
/// transactions by kind, attempts per payout, incidents by kind and status.
async fn history(db: &Database) -> Vec<String> {
    let queries = [
        (
            "events",
            "SELECT string_agg(type || '=' || n, ' ' ORDER BY type) FROM (SELECT type, count(*) n FROM events GROUP BY type) t",
        ),
        (
            "transactions",
            "SELECT string_agg(kind || '=' || n, ' ' ORDER BY kind) FROM (SELECT kind, count(*) n FROM attempt_transactions GROUP BY kind) t",
        ),
        (
            "attempts",
            "SELECT count(*) || ' for ' || count(DISTINCT payout_id) || ' payouts, by status: ' || (SELECT string_agg(status || '=' || n, ' ' ORDER BY status) FROM (SELECT status, count(*) n FROM attempts GROUP BY status) s) FROM attempts",
        ),
        (
            "incidents",
            "SELECT coalesce(string_agg(kind || '/' || status || '=' || n, ' ' ORDER BY kind), 'none') FROM (SELECT kind, status, count(*) n FROM incidents GROUP BY kind, status) t",
        ),
    ];
    let mut out = Vec::new();
    for (name, sql) in queries {
        match db.query(sql).await {
            Ok(text) => out.push(format!("{name}: {}", text.trim())),
            Err(e) => out.push(format!("{name}: unreadable: {e:#}")),
        }
    }
    out
}
