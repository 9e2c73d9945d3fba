//! `payoutd-provider-sim <circle|coinbase|bridge|stripe> --port N [--api-key K]`: one simulator as a process; prints `{"base_url":...}` when ready.

use std::io::Write;

use clap::Parser;
use payoutd_provider_sim::{ProviderKind, ProviderSim, SimOptions};

#[derive(Parser)]
#[command(name = "payoutd-provider-sim", about = "Runs one payout provider simulator until killed")]
struct Args {
    /// circle, coinbase, bridge or stripe
    provider: ProviderKind,
    /// 0 = any free port
    #[arg(long, default_value_t = 0)]
    port: u16,
    #[arg(long, default_value = "sim-api-key")]
    api_key: String,
    /// How long idempotency keys are honoured
    #[arg(long, default_value_t = 24 * 60 * 60 * 1000)]
    key_window_ms: u64,
    /// Objects move one state forward per step
    #[arg(long, default_value_t = 1000)]
    step_ms: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let options = SimOptions {
        port: args.port,
        api_key: args.api_key,
        key_window_ms: args.key_window_ms,
        step_ms: args.step_ms,
        ..SimOptions::default()
    };
    let sim = ProviderSim::start_with(args.provider, options).await;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::json!({"base_url": sim.base_url()})).expect("write stdout");
    out.flush().expect("flush stdout");
    drop(out);
    std::future::pending::<()>().await;
}
