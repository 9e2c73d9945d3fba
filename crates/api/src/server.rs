//! The HTTP server: connections accepted up to a cap, each bounded in how long its request headers (and its idle waits between requests) may take, drained on shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// Connections one process serves at once; more wait in the listen backlog until one closes.
pub const CONNECTIONS_MAX_DEFAULT: usize = 1_024;
/// A client must send a request's whole header block within this, counted from when the server
/// starts waiting for it (at connect, or once the previous answer is sent on a kept-alive
/// connection): a slow or silent client cannot hold a connection and its task.
pub const HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 20_000;
/// How long in-flight requests may finish after shutdown begins.
pub const DRAIN_TIMEOUT_MS: u64 = 30_000;
/// After a failed accept (out of file descriptors, say) the server waits this long before the next.
const ACCEPT_RETRY_MS: u64 = 100;

/// What bounds the connections a server holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    pub connections_max: usize,
    pub header_read_timeout_ms: u64,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            connections_max: CONNECTIONS_MAX_DEFAULT,
            header_read_timeout_ms: HEADER_READ_TIMEOUT_MS_DEFAULT,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting and lets the
/// requests in flight finish (for up to `DRAIN_TIMEOUT_MS`). HTTP/1.1 with keep-alive; TCP_NODELAY
/// on every connection: answers are small and latency is what clients wait on.
pub(crate) async fn serve_router(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    assert!(
        limits.connections_max > 0 && limits.header_read_timeout_ms > 0,
        "limits are checked when configured: {limits:?}"
    );
    let permits = Arc::new(Semaphore::new(limits.connections_max));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms));
    tokio::pin!(shutdown);
    loop {
        // The permit is taken before the accept: at the cap, connections wait in the backlog.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(%err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::warn!(%err, "cannot set TCP_NODELAY");
        }
        // Each request carries its connection's peer, as `axum::serve` with connect info would.
        let service = router.clone().map_request(
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            },
        );
        let connection = graceful
            .watch(http.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service)));
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%err, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_millis(DRAIN_TIMEOUT_MS), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            drain_timeout_ms = DRAIN_TIMEOUT_MS,
            "requests still in flight at shutdown were cut off"
        );
    }
    Ok(())
}
