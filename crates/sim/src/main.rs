//! `payoutd-sim --seeds N`: runs N seeds and prints one line per seed and a summary line.

use std::time::Instant;

use clap::Parser;
use payoutd_sim::parallel::{default_jobs, run_seeds};
use payoutd_sim::{Defect, Options, SimStore, Totals, quiet_simulated_crashes};

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
    /// Turn on one deliberate bug to watch the simulator catch it (an unknown name lists them all).
    #[arg(long)]
    defect: Option<String>,
    /// Failovers that lose an EVM or Solana attempt lose the send guard's record of it half the
    /// time too.
    #[arg(long)]
    guard_losses: bool,
}

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
    let options = Options {
        steps: cli.steps.clamp(1, 100_000),
        defect,
        store,
        guard_losses: cli.guard_losses,
    };
    let started = Instant::now();
    let mut totals = Totals::default();
    let jobs = cli.jobs.unwrap_or_else(default_jobs);
    run_seeds(cli.start..cli.start + cli.seeds, &options, jobs, |report| {
        println!("{}", report.line());
        if !report.violations.is_empty() || cli.trace {
            for v in &report.violations {
                println!("  VIOLATION seed={}: {v}", report.seed);
            }
            for line in &report.trace {
                println!("  | {line}");
            }
        }
        totals.add(&report);
    })?;
    let rate = cli.seeds as f64 / started.elapsed().as_secs_f64();
    println!("sim: {} jobs={jobs} seeds_per_s={rate:.2}", totals.line());
    if totals.violations > 0 {
        std::process::exit(1);
    }
    Ok(())
}
