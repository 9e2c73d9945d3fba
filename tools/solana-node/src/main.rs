//! A local Solana node for tests, the demo and the chaos run: surfpool's simulation network, offline, serving real Solana JSON-RPC on 127.0.0.1 until killed.

use std::net::TcpListener;
use std::time::Duration;

use clap::Parser;
use crossbeam_channel::{RecvTimeoutError, unbounded};
use surfpool_core::surfnet::svm::{SurfnetSvm, SurfnetSvmConfig};
use surfpool_types::{BlockProductionMode, RpcConfig, SimnetConfig, SimnetEvent, SurfpoolConfig};

/// How long the node may take to bind its servers before start-up is called failed.
const READY_TIMEOUT_MS: u64 = 120_000;
/// Mainnet's slot time; tests pass a shorter one so blockhashes expire and slots finalize sooner.
const SLOT_TIME_MS_DEFAULT: u64 = 400;

#[derive(Parser, Debug)]
#[command(about = "A local Solana node (surfpool, offline) serving JSON-RPC on 127.0.0.1 until killed")]
struct Args {
    /// JSON-RPC port on 127.0.0.1.
    #[arg(long)]
    port: u16,
    /// Milliseconds per slot; a recent blockhash stays valid for 150 blocks, a slot is finalized 31 slots later.
    #[arg(long, default_value_t = SLOT_TIME_MS_DEFAULT)]
    slot_time_ms: u64,
}

/// A free TCP port on 127.0.0.1 for the node's websocket server, which the tests never use.
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // Profiling re-runs every transaction instruction by instruction: off, as on a real validator.
    let svm_config = SurfnetSvmConfig { slot_time: args.slot_time_ms, instruction_profiling_enabled: false, ..SurfnetSvmConfig::default() };
    let (svm, events_rx, geyser_rx) = SurfnetSvm::new(svm_config)?;
    let config = SurfpoolConfig {
        simnets: vec![SimnetConfig {
            offline_mode: true,
            remote_rpc_url: None,
            slot_time: args.slot_time_ms,
            block_production_mode: BlockProductionMode::Clock,
            instruction_profiling_enabled: false,
            ..SimnetConfig::default()
        }],
        rpc: RpcConfig { bind_host: "127.0.0.1".into(), bind_port: args.port, ws_port: free_port()?, ..RpcConfig::default() },
        ..SurfpoolConfig::default()
    };
    let (commands_tx, commands_rx) = unbounded();
    let runloop = std::thread::Builder::new().name("surfnet".into()).spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
        if let Err(e) = runtime.block_on(surfpool_core::start_local_surfnet(svm, config, commands_tx, commands_rx, geyser_rx)) {
            eprintln!("solana-node: the node stopped: {e}");
            std::process::exit(1);
        }
    })?;

    let deadline = std::time::Instant::now() + Duration::from_millis(READY_TIMEOUT_MS);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match events_rx.recv_timeout(left) {
            Ok(SimnetEvent::CoreStarted(_)) => break,
            Ok(SimnetEvent::Aborted(why)) => return Err(format!("the node aborted at start: {why}").into()),
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => return Err("the node did not start in time".into()),
            Err(RecvTimeoutError::Disconnected) => return Err("the node stopped during start-up".into()),
        }
    }
    println!("{}", serde_json::json!({ "rpc_url": format!("http://127.0.0.1:{}", args.port) }));

    // The node reports every slot and transaction on this channel; read it so it does not grow.
    while !runloop.is_finished() {
        match events_rx.recv_timeout(Duration::from_secs(1)) {
            Ok(SimnetEvent::Aborted(why)) => return Err(format!("the node aborted: {why}").into()),
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    Err("the node stopped".into())
}
