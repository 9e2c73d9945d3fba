//! Stopping the demo and chaos binaries by signal without orphaning their children.

use tokio::signal::unix::{signal, SignalKind};

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
