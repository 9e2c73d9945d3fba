//! The HTTP edge shared by the adapters: one client per adapter, answers read into (status, body), transport failures ambiguous.

use std::time::Duration;

use crate::api::CallError;

/// Answers longer than this are cut before parsing: a provider's page of transfers fits easily.
const ANSWER_BYTES_MAX: usize = 4 << 20;

/// An adapter that cannot be built as configured.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The API key travels in every request's headers: never in clear over the network.
    #[error(
        "provider base URL {0:?}: use https:// (plain http:// only to a loopback address, such as a local simulator)"
    )]
    BaseUrl(String),
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

/// One client per adapter, reused across calls (rustls, the adapter's timeout), for `base_url`:
/// https, or plain http to a loopback address. It follows no redirect: a provider's answer is
/// its own, and the API key in the headers would follow to whatever host a redirect names.
pub fn client(base_url: &str, timeout_ms: u64) -> Result<reqwest::Client, ClientError> {
    check_base_url(base_url)?;
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_millis(timeout_ms))
        .redirect(reqwest::redirect::Policy::none())
        .build()?)
}

/// A provider base URL payoutd may send its API key to: https, or plain http to a loopback address.
pub fn check_base_url(text: &str) -> Result<(), ClientError> {
    let Ok(url) = reqwest::Url::parse(text) else {
        return Err(ClientError::BaseUrl(text.to_owned()));
    };
    let safe = match url.scheme() {
        "https" => !url.host_str().unwrap_or_default().is_empty(),
        "http" => payoutd_domain::secret::on_loopback(&url),
        _ => false,
    };
    if safe { Ok(()) } else { Err(ClientError::BaseUrl(text.to_owned())) }
}

/// The status and body of an answer; no answer (timeout, reset, refused connection) is ambiguous.
/// The body is read a chunk at a time and cut past `ANSWER_BYTES_MAX`, never held whole first.
pub async fn answer(
    provider: &str,
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Result<(u16, String), CallError> {
    let mut response =
        sent.map_err(|e| CallError::Ambiguous(format!("no answer from {provider}: {e}")))?;
    let status = response.status().as_u16();
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| CallError::Ambiguous(format!("{provider} answer cut: {e}")))?
    {
        if bytes.len() + chunk.len() > ANSWER_BYTES_MAX {
            return Err(CallError::BadAnswer(format!(
                "{provider} answered more than {ANSWER_BYTES_MAX} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// The classification every provider shares for statuses its error body does not decide: auth
/// and permission errors decide nothing about the transfer (the configuration is wrong), 404 is
/// not found, conflicts, rate limits and server errors are ambiguous, other 4xx refuse.
pub fn by_status(status: u16, what: String) -> CallError {
    match status {
        404 => CallError::NotFound(what),
        401 | 403 | 409 | 429 => CallError::Ambiguous(what),
        400..=499 => CallError::Refused(what),
        _ => CallError::Ambiguous(what),
    }
}

/// A provider's answer read whole: a 2xx body parsed as the provider documents it, any other the
/// error `refusal` reads from the status and the provider's own error body.
pub async fn read_json<T: for<'de> serde::Deserialize<'de>>(
    provider: &str,
    sent: Result<reqwest::Response, reqwest::Error>,
    refusal: fn(u16, &str) -> CallError,
) -> Result<T, CallError> {
    let (status, body) = answer(provider, sent).await?;
    if (200..300).contains(&status) {
        return parse(provider, status, &body);
    }
    Err(refusal(status, &body))
}

/// Parses a 2xx body as the provider documents it.
pub fn parse<T: for<'de> serde::Deserialize<'de>>(
    provider: &str,
    status: u16,
    body: &str,
) -> Result<T, CallError> {
    serde_json::from_str(body)
        .map_err(|e| CallError::BadAnswer(format!("{provider} {status}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_base_urls_make_a_client() {
        for ok in [
            "https://api.stripe.com",
            "https://api.cdp.coinbase.com/",
            "http://127.0.0.1:8080",
            "http://localhost:9000",
            "http://[::1]:7000",
        ] {
            assert!(client(ok, 1_000).is_ok(), "{ok}");
        }
        for refused in [
            "http://api.stripe.com",
            "http://10.0.0.5:8080",
            "ftp://api.stripe.com",
            "api.stripe.com",
            "https://",
            "",
        ] {
            assert!(matches!(client(refused, 1_000), Err(ClientError::BaseUrl(_))), "{refused}");
        }
    }

    /// A provider (or whoever answers in its place) that redirects elsewhere: the redirect is
    /// the answer, and the other host never sees the request or its API key. (Before, reqwest
    /// followed up to 10 redirects with every header.)
    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let redirector = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = format!("http://{}/v1/transfers", elsewhere.local_addr().unwrap());
        let base = format!("http://{}", redirector.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut stream, _) = redirector.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await.unwrap();
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(answer.as_bytes()).await.unwrap();
        });
        let sent = client(&base, 2_000)
            .unwrap()
            .post(format!("{base}/v1/transfers"))
            .header("Api-Key", "secret")
            .body("{}")
            .send()
            .await;
        let (status, _) = answer("test", sent).await.unwrap();
        assert_eq!(status, 307);
        let followed = tokio::time::timeout(Duration::from_millis(300), elsewhere.accept()).await;
        assert!(followed.is_err(), "the redirect's target was called");
        assert!(
            matches!(by_status(status, String::new()), CallError::Ambiguous(_)),
            "a redirect decides nothing"
        );
    }
}
