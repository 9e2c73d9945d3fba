//! The HTTP server's connection limits over real sockets: a client slow to send its headers, or idle between requests, is disconnected, and connections past the cap wait until one closes.

use std::sync::Arc;
use std::time::Duration;

use payoutd_api::{AppState, ServeLimits};
use payoutd_domain::AssetRegistry;
use payoutd_engine::{Engine, SystemClock};
use payoutd_testkit::{TestDb, both_stores};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Short enough for a test, long enough that a local request never runs into it.
const HEADER_READ_TIMEOUT_MS: u64 = 400;
/// Far past the header timeout: a connection still open by then was not bounded.
const DISCONNECT_WITHIN_MS: u64 = 5_000;
/// How long a connection past the cap is watched for an answer that must not come.
const UNANSWERED_FOR_MS: u64 = 300;
const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: payoutd\r\n\r\n";

async fn serve(db: &TestDb, limits: ServeLimits) -> String {
    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        payoutd_api::serve_with_limits(
            listener,
            AppState::new(engine, None),
            limits,
            std::future::pending(),
        )
        .await
        .unwrap()
    });
    addr
}

/// Reads until the server closes the connection; `None` if it is still open after `within_ms`.
async fn read_until_closed(tcp: &mut TcpStream, within_ms: u64) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(Duration::from_millis(within_ms), async {
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| seen)
}

/// Reads one answer's head (up to the blank line); `None` if none came within `within_ms`.
async fn read_answer_head(tcp: &mut TcpStream, within_ms: u64) -> Option<String> {
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_millis(within_ms), async {
        let mut buf = [0u8; 4096];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(n > 0, "the server closed the connection without answering");
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .ok()?;
    Some(String::from_utf8_lossy(&seen).into_owned())
}

/// A client that starts a request and never finishes its headers (slowloris) is disconnected once
/// the header timeout passes. (Before, the server ran without a timer and held it for ever.)
async fn a_client_that_never_finishes_its_headers_is_disconnected(db: TestDb) {
    let addr = serve(
        &db,
        ServeLimits { header_read_timeout_ms: HEADER_READ_TIMEOUT_MS, ..ServeLimits::default() },
    )
    .await;
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: payoutd\r\nX-Slow: ").await.unwrap();
    let seen = read_until_closed(&mut tcp, DISCONNECT_WITHIN_MS).await;
    assert!(
        seen.is_some(),
        "the connection was still open {DISCONNECT_WITHIN_MS} ms after a {HEADER_READ_TIMEOUT_MS} ms header timeout"
    );
    assert!(
        !String::from_utf8_lossy(&seen.unwrap()).contains("200 OK"),
        "an unfinished request is never served"
    );
}

/// A kept-alive connection idle after its answer is closed once the same timeout passes, so idle
/// clients cannot hold connections either. (Before: held for ever.)
async fn an_idle_kept_alive_connection_is_closed(db: TestDb) {
    let addr = serve(
        &db,
        ServeLimits { header_read_timeout_ms: HEADER_READ_TIMEOUT_MS, ..ServeLimits::default() },
    )
    .await;
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(HEALTHZ).await.unwrap();
    let head = read_answer_head(&mut tcp, DISCONNECT_WITHIN_MS).await.expect("an answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        read_until_closed(&mut tcp, DISCONNECT_WITHIN_MS).await.is_some(),
        "an idle kept-alive connection was never closed"
    );
}

/// With the cap reached by two silent connections, a third client's request waits unanswered in
/// the backlog; it is served as soon as one of the two goes away. (Before, there was no cap.)
async fn connections_past_the_cap_wait_until_one_closes(db: TestDb) {
    let addr = serve(&db, ServeLimits { connections_max: 2, header_read_timeout_ms: 60_000 }).await;
    let first = TcpStream::connect(&addr).await.unwrap();
    let _second = TcpStream::connect(&addr).await.unwrap();
    let mut third = TcpStream::connect(&addr).await.unwrap();
    third.write_all(HEALTHZ).await.unwrap();
    assert_eq!(
        read_answer_head(&mut third, UNANSWERED_FOR_MS).await,
        None,
        "served past the cap of 2 connections"
    );
    drop(first);
    let head = read_answer_head(&mut third, DISCONNECT_WITHIN_MS)
        .await
        .expect("served once a connection closed");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

both_stores!(
    a_client_that_never_finishes_its_headers_is_disconnected,
    an_idle_kept_alive_connection_is_closed,
    connections_past_the_cap_wait_until_one_closes
);
