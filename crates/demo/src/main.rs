//! payoutd's main job end to end: a real node, the real binary on SQLite, every payout asked for twice or in bursts, lost and slow node answers, a SIGKILL, then the chain itself counted.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;

use payoutd_demo::chain::Coin;
use payoutd_demo::report::{Checks, Deposit};
use payoutd_demo::rng::random_bytes;
use payoutd_demo::server::{self, ETH, USDC};

mod cli;
mod node;
mod scenarios;
mod start;
mod verdict;
mod watch;
use cli::Args;
use start::{Nodes, Service};
use verdict::Verdict;
use watch::{Asked, watch};

/// Interval mining: anvil's automine stalls under load (its blocks stop coming while requests queue).
const BLOCK_TIME_SECS: u64 = 1;
/// Credited to the merchant's ledger: 10 ETH and 1M USDC cover 5,000 payouts of either.
const ETH_DEPOSIT_WEI: u128 = 10_000_000_000_000_000_000;
const USDC_DEPOSIT: u128 = 1_000_000_000_000;
/// Gas for a few thousand transfers at anvil's fees, on top of what the payouts send.
const HOT_WALLET_GAS_MARGIN_WEI: u128 = 1_000_000_000_000_000_000;
const MERCHANT_NAME: &str = "Demo Platform";
/// Every payout must be final within this many seconds of the first submission. A run takes
/// about 90 s, most of it the harness proxy's per-call latency (see the report).
const DEADLINE_SECS: u64 = 180;
/// payoutd is killed once this share of the payouts is paid while others are signed and in
/// flight: mid-way for the pipeline, and (with paced submissions) for intake too.
const KILL_AT_PAID_PERCENT: usize = 12;
const READY_TIMEOUT_SECS: u64 = 30;
/// The near-duplicate twin must leave `requested` within this long (one policy pass).
const REVIEW_WAIT_SECS: u64 = 20;
const POLL_MS: u64 = 300;
const PROGRESS_EVERY_SECS: u64 = 3;
/// Statuses after which the demo stops waiting for a payout (needs_attention waits for a person).
const SETTLED: &[&str] = &["paid", "failed", "needs_attention", "rejected", "canceled"];
const DEPOSITS: &[Deposit<'static>] = &[
    Deposit { asset: ETH, coin: Coin::Eth, amount: ETH_DEPOSIT_WEI },
    Deposit { asset: USDC, coin: Coin::Usdc, amount: USDC_DEPOSIT },
];

/// Solana payouts beside the EVM ones: a tenth of them, at most this many.
const SOLANA_PAYOUTS_MAX: usize = 200;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    payoutd_demo::report::set_prefix("demo");
    let args = Args::parse();
    // SIGINT is the demo's own way to end (Ctrl-C after the summary stops payoutd gracefully, and in a
    // terminal it reaches the children anyway); SIGTERM drops the run, which kills the children.
    payoutd_demo::signals::run_until_stopped(
        "payoutd-demo",
        run(args),
        payoutd_demo::signals::terminated(),
    )
    .await
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    let bin = server::payoutd_bin()?;
    // A fresh SQLite file each run: the database is the state the kill must not corrupt.
    let work = server::fresh_work_dir(".demo")?;
    let run_tag = u32::from_be_bytes(random_bytes()?);
    let mut checks = Checks::default();
    let nodes = Nodes::start(&args).await?;
    let mut service = Service::start(&args, &nodes, bin, &work, run_tag, &mut checks).await?;
    let mut asked = Asked::ask(&service, &nodes, args.payouts, run_tag, &mut checks).await?;
    let watched = watch(&mut service, &mut asked, args.payouts, started).await?;
    let verdict = Verdict {
        nodes: &nodes,
        service: &service,
        asked: &asked,
        watched: &watched,
        to_pay: args.payouts,
        work: &work,
    };
    let ok = verdict.judge(&args, run_tag, started, &mut checks).await?;
    if !args.exit {
        let _ = tokio::signal::ctrl_c().await;
    }
    // Ctrl-C in a terminal has reached payoutd too; SIGTERM then is harmless, and needed otherwise.
    service.payoutd.stop().await;
    drop(service);
    drop(nodes);
    Ok(ok)
}
