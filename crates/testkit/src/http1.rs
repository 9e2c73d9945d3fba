//! Minimal HTTP/1.1 framing shared by the fault-injecting proxies: read a keep-alive request, forward it, name its JSON-RPC methods.

use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::proxy::PROXY_REQUEST_MAX_BYTES as REQUEST_MAX_BYTES;

const READ_CHUNK_BYTES: usize = 16 * 1024;

/// One request's body, and whether the client asked to close the connection after it.
pub struct Request {
    pub body: Vec<u8>,
    pub close: bool,
}

pub async fn forward(
    http: &reqwest::Client,
    upstream: &reqwest::Url,
    body: Vec<u8>,
) -> (String, Vec<u8>) {
    let sent = http
        .post(upstream.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(_) => return ("502 Bad Gateway".into(), Vec::new()),
    };
    let status = response.status();
    match response.bytes().await {
        Ok(bytes) => (
            format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or("")),
            bytes.to_vec(),
        ),
        Err(_) => ("502 Bad Gateway".into(), Vec::new()),
    }
}

/// Reads one request (Content-Length bodies only, which is what JSON-RPC clients send).
/// `None` when the peer closed or sent something this proxy does not handle.
pub async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(pos) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        if buffer.len() > REQUEST_MAX_BYTES || !read_more(stream, buffer).await {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut content_length = 0usize;
    let mut close = false;
    for line in head.lines().skip(1) {
        let Some((name, value)) = line.split_once(':') else { continue };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        match name.as_str() {
            "content-length" => content_length = value.parse().ok()?,
            "connection" => close = value.eq_ignore_ascii_case("close"),
            "transfer-encoding" => return None,
            _ => {}
        }
    }
    if head_end + content_length > REQUEST_MAX_BYTES {
        return None;
    }
    while buffer.len() < head_end + content_length {
        if !read_more(stream, buffer).await {
            return None;
        }
    }
    let body = buffer[head_end..head_end + content_length].to_vec();
    buffer.drain(..head_end + content_length);
    Some(Request { body, close })
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; READ_CHUNK_BYTES];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// JSON-RPC method names in a body (one for a single call, several for a batch).
pub fn methods_of(body: &[u8]) -> Vec<String> {
    let method = |v: &Value| v.get("method").and_then(Value::as_str).map(str::to_owned);
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(calls)) => calls.iter().filter_map(method).collect(),
        Ok(call) => method(&call).into_iter().collect(),
        Err(_) => Vec::new(),
    }
}
