//! `payoutd-sim --seeds N`: runs N seeds and prints one line per seed and a summary line.

use std::time::Instant;

use clap::Parser;
use payoutd_sim::parallel::{default_jobs, run_seeds};
use payoutd_sim::{Defect, Options, SimStore, quiet_simulated_crashes};

#[derive(Parser)]
#[command(about = "Deterministic simulation of payoutd's pipeline under faults")]
struct Cli {
    /// How many seeds to run.
    #[arg(long, default_value_t = 50)]
    seeds: u64,
    /// First seed (a violation prints its seed; `--start S --seeds 1` replays it).
    #[arg(long, default_value_t = 1)]
    start: u64,
    /// Steps per seed.
    #[arg(long, default_value_t = 250)]
    steps: usize,
    /// Print the event trace of every seed, not only of failing ones.
    #[arg(long)]
    trace: bool,
    /// The store the engine runs on: `sqlite` (an in-memory database per seed, the default) or `postgres` (a fresh
    /// database per seed on `PAYOUTD_TEST_PG_URL`).
    #[arg(long, default_value = "sqlite")]
    store: String,
    /// Seeds run at once, each on its own thread (default: one per CPU). Reports print in seed order.
    #[arg(long)]
    jobs: Option<usize>,
    /// Turn on one deliberate bug to watch the simulator catch it (resign-on-timeout,
    /// fresh-nonce-on-retry, recredit-on-unknown, unconditional-update,
    /// provider-retry-refusal-is-proof, provider-dead-at-window, durable-nonce-unclaimed,
    /// verdict-without-proof, unresolved-not-escalated,
    /// duplicates-unreported, second-transfers-unreported, caps-unchecked-at-signing,
    /// send-guard-ignored, verdict-books-wallet-nothing).
    #[arg(long)]
    defect: Option<String>,
}

#[allow(clippy::too_many_lines)]
// the simulation's steps in the order a seed runs them, so a seed's schedule reads top to bottom.
fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    quiet_simulated_crashes();
    let defect = match cli.defect.as_deref() {
        None => None,
        Some(name) => Some(Defect::parse(name).ok_or_else(|| {
            let known: Vec<&str> = Defect::ALL.iter().map(|(_, n)| *n).collect();
            anyhow::anyhow!("unknown defect {name:?} (one of: {})", known.join(", "))
        })?),
    };
    let store = match cli.store.as_str() {
        "sqlite" => SimStore::Sqlite,
        "postgres" => SimStore::Postgres,
        other => anyhow::bail!("unknown store {other:?} (sqlite or postgres)"),
    };
    let options = Options { steps: cli.steps.clamp(1, 100_000), defect, store };
    let started = Instant::now();
    let (mut payouts, mut faults, mut foreign, mut next_attempts, mut violations) =
        (0usize, 0u64, 0u64, 0u64, 0usize);
    let (
        mut provider_payouts,
        mut provider_next_attempts,
        mut durable_payouts,
        mut provider_seconds,
    ) = (0usize, 0u64, 0usize, 0usize);
    let mut double_transfers = 0usize;
    let mut lost_attempts = 0usize;
    let jobs = cli.jobs.unwrap_or_else(default_jobs);
    run_seeds(cli.start..cli.start + cli.seeds, &options, jobs, |report| {
        println!(
            "seed={} payouts={} faults={} crashes={} foreign_sends={} attempts_after_death={} transfers={} solana_transfers={} solana_attempts_after_death={} durable_payouts={} provider_payouts={} provider_paid={} provider_attempts_after_death={} provider_routed={} provider_seconds={} double_transfers={} lost_attempts={} violations={}",
            report.seed,
            report.payouts,
            report.faults,
            report.crashes,
            report.foreign_sends,
            report.attempts_after_death,
            report.transfers,
            report.solana_transfers,
            report.solana_attempts_after_death,
            report.durable_payouts,
            report.provider_payouts,
            report.provider_paid,
            report.provider_attempts_after_death,
            report.provider_routed,
            report.provider_seconds,
            report.double_transfers,
            report.lost_attempts,
            report.violations.len()
        );
        if !report.violations.is_empty() || cli.trace {
            for v in &report.violations {
                println!("  VIOLATION seed={}: {v}", report.seed);
            }
            for line in &report.trace {
                println!("  | {line}");
            }
        }
        payouts += report.payouts;
        faults += report.faults;
        foreign += report.foreign_sends;
        next_attempts += report.attempts_after_death;
        provider_payouts += report.provider_payouts;
        durable_payouts += report.durable_payouts;
        provider_next_attempts += report.provider_attempts_after_death;
        provider_seconds += report.provider_seconds;
        double_transfers += report.double_transfers;
        lost_attempts += report.lost_attempts;
        violations += report.violations.len();
    })?;
    let rate = cli.seeds as f64 / started.elapsed().as_secs_f64();
    println!(
        "sim: seeds={} jobs={jobs} payouts={payouts} faults={faults} foreign_sends={foreign} attempts_after_death={next_attempts} durable_payouts={durable_payouts} provider_payouts={provider_payouts} provider_attempts_after_death={provider_next_attempts} provider_seconds={provider_seconds} double_transfers={double_transfers} lost_attempts={lost_attempts} violations={violations} seeds_per_s={rate:.2}",
        cli.seeds
    );
    if violations > 0 {
        std::process::exit(1);
    }
    Ok(())
}
