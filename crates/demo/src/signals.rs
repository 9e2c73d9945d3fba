//! Stopping the demo and chaos binaries by signal without orphaning their children.

use std::future::Future;
use std::process::ExitCode;

use tokio::signal::unix::{SignalKind, signal};

/// 128 + SIGTERM, as a shell reports a process ended by it.
pub const STOPPED_BY_SIGNAL_EXIT_CODE: u8 = 143;

/// Resolves on SIGTERM. A caller that races its work against this and drops the work when it
/// fires kills every child it holds: payoutd processes are spawned with `kill_on_drop` and the
/// anvil harness kills its node on drop, which the default SIGTERM action would skip.
pub async fn terminated() {
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            term.recv().await;
        }
        // No handler could be installed: never resolve, the default action stays in force.
        Err(_) => std::future::pending().await,
    }
}

/// SIGTERM or SIGINT (`kill -INT` aimed at this process alone, which its children would not see).
pub async fn terminated_or_interrupted() {
    tokio::select! {
        () = terminated() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Runs `run` to its end unless `stop` resolves first; then the run is dropped, which kills every
/// child it holds. Exit code: 0 when the run reports success, 1 on failure or error, 143 when stopped.
pub async fn run_until_stopped(
    program: &str,
    run: impl Future<Output = anyhow::Result<bool>>,
    stop: impl Future<Output = ()>,
) -> ExitCode {
    let outcome = tokio::select! {
        outcome = run => outcome,
        () = stop => {
            eprintln!("{program}: stopped by a signal; anvil and the payoutd processes are killed");
            return ExitCode::from(STOPPED_BY_SIGNAL_EXIT_CODE);
        }
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{program}: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
