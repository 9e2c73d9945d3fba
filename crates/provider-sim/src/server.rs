//! The HTTP server under every simulator: a listener whose connections a handler can drop unanswered, and the request dispatch.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::core::{Core, KillSwitch, MAX_BODY_BYTES, Req, json_response};
use crate::{ProviderKind, RecordedRequest, bridge, circle, coinbase, control, stripe};

/// Binds 127.0.0.1:port and serves the simulator in a task.
pub async fn serve(core: Arc<Core>) -> io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(("127.0.0.1", core.options.port)).await?;
    let addr = listener.local_addr()?;
    let app = control::routes().fallback(dispatch).with_state(core);
    let service = app.into_make_service_with_connect_info::<KillSwitch>();
    let task = tokio::spawn(async move {
        let _ = axum::serve(KillListener(listener), service).await;
    });
    Ok((addr, task))
}

async fn dispatch(
    State(core): State<Arc<Core>>,
    ConnectInfo(conn): ConnectInfo<KillSwitch>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return json_response(413, &json!({"message": "request body too large"}));
    };
    let body = String::from_utf8_lossy(&bytes).into_owned();
    let path_and_query =
        parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    let seq = core.record(RecordedRequest {
        method: parts.method.to_string(),
        path: path_and_query,
        headers: parts
            .headers
            .iter()
            .filter(|(n, _)| *n != axum::http::header::AUTHORIZATION)
            .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: body.clone(),
        status: None,
        response_body: None,
    });
    let conn_of_answer = conn.clone();
    let req = Req {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts.headers,
        body,
        conn,
    };
    let response = match core.kind {
        ProviderKind::Stripe => stripe::handle(&core, req).await,
        ProviderKind::Coinbase => coinbase::handle(&core, req).await,
        ProviderKind::Bridge => bridge::handle(&core, req).await,
        ProviderKind::Circle => circle::handle(&core, req).await,
    };
    // A killed connection sends nothing: its answer stays unrecorded, as the client never saw it.
    if conn_of_answer.killed() {
        return response;
    }
    // Buffered to be recorded (the bodies are small JSON), then sent as it was.
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return json_response(500, &json!({"message": "simulator answer too large"}));
    };
    core.record_answer(seq, parts.status.as_u16(), String::from_utf8_lossy(&bytes).into_owned());
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// A TCP listener whose connections carry a `KillSwitch`.
struct KillListener(TcpListener);

/// A connection that fails every read and write once its switch is set, so the server drops it unanswered.
pub struct KillIo {
    inner: TcpStream,
    kill: KillSwitch,
}

impl Listener for KillListener {
    type Io = KillIo;
    type Addr = (SocketAddr, KillSwitch);

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = Listener::accept(&mut self.0).await;
        let kill = KillSwitch::default();
        (KillIo { inner: stream, kill: kill.clone() }, (addr, kill))
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok((self.0.local_addr()?, KillSwitch::default()))
    }
}

impl Connected<IncomingStream<'_, KillListener>> for KillSwitch {
    fn connect_info(stream: IncomingStream<'_, KillListener>) -> Self {
        stream.remote_addr().1.clone()
    }
}

fn reset() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "the simulator drops this connection")
}

impl AsyncRead for KillIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.kill.killed() {
            return Poll::Ready(Err(reset()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.kill.killed() {
            return Poll::Ready(Err(reset()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.kill.killed() {
            return Poll::Ready(Err(reset()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
