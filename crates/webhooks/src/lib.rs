//! The webhook transport: signs with Standard Webhooks, posts over HTTP(S), follows no redirect and
//! connects only to public addresses unless the configuration allows private ones.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use payoutd_domain::WebhookUrl;
use payoutd_domain::webhook::is_public_ip;
use payoutd_engine::webhooks::{OutgoingWebhook, PostError, UrlRefused, WebhookTransport};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// An answer's body is read up to this much and dropped: only the status matters.
pub const RESPONSE_BODY_MAX_BYTES: usize = 4 * 1024;
/// Time to open a connection, within the try's own timeout.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
pub const USER_AGENT: &str = concat!("payoutd-webhooks/", env!("CARGO_PKG_VERSION"));

/// Whether endpoints may be plain http and resolve to private addresses (local development).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressPolicy {
    PublicHttpsOnly,
    AllowPrivate,
}

/// Resolves names and refuses any that has a non-public address, so a name that resolves to an
/// internal address (or is re-pointed there after registration) is never connected to.
struct PublicOnlyResolver;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = resolve_public(&host, 0)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

async fn resolve_public(host: &str, port: u16) -> Result<Vec<SocketAddr>, UrlRefused> {
    let addrs: Vec<SocketAddr> = match tokio::net::lookup_host((host, port)).await {
        Ok(addrs) => addrs.collect(),
        Err(e) => {
            tracing::warn!(host, error = %e, "a webhook host does not resolve");
            return Err(UrlRefused::Unresolvable(host.to_owned()));
        }
    };
    if addrs.is_empty() {
        return Err(UrlRefused::Unresolvable(host.to_owned()));
    }
    if let Some(private) = addrs.iter().find(|a| !is_public_ip(a.ip())) {
        tracing::warn!(host, address = %private.ip(), "a webhook host resolves to a non-public address; refused");
        return Err(UrlRefused::PrivateAddress(host.to_owned()));
    }
    Ok(addrs)
}

/// The webhook HTTP client: one connection pool for every endpoint.
#[derive(Clone)]
pub struct HttpTransport {
    client: reqwest::Client,
    policy: AddressPolicy,
}

impl HttpTransport {
    pub fn new(timeout_ms: u64, policy: AddressPolicy) -> Result<HttpTransport, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(USER_AGENT)
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS.min(timeout_ms)))
            .timeout(Duration::from_millis(timeout_ms));
        if policy == AddressPolicy::PublicHttpsOnly {
            builder = builder.dns_resolver(Arc::new(PublicOnlyResolver)).https_only(true);
        }
        Ok(HttpTransport { client: builder.build()?, policy })
    }

    fn check_literal(&self, url: &WebhookUrl) -> Result<(), UrlRefused> {
        match (self.policy, url.ip_literal()) {
            (AddressPolicy::PublicHttpsOnly, Some(ip)) if !is_public_ip(ip) => {
                Err(UrlRefused::PrivateAddress(ip.to_string()))
            }
            _ => Ok(()),
        }
    }
}

/// The `webhook-signature` header: one `v1,<base64>` per secret, separated by spaces.
pub fn signature_header(webhook: &OutgoingWebhook<'_>) -> Result<String, PostError> {
    let mut signatures = Vec::with_capacity(webhook.secrets.len());
    for secret in webhook.secrets {
        let signer = standardwebhooks::Webhook::new(secret.expose())
            .map_err(|e| PostError::Other(format!("secret: {e}")))?;
        signatures.push(
            signer
                .sign(webhook.webhook_id.as_str(), webhook.timestamp_s, webhook.body)
                .map_err(|e| PostError::Other(format!("signing: {e}")))?,
        );
    }
    if signatures.is_empty() {
        return Err(PostError::Other("the endpoint has no signing secret".to_owned()));
    }
    Ok(signatures.join(" "))
}

fn classify(err: &reqwest::Error) -> PostError {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        text = format!("{text}: {inner}");
        source = inner.source();
    }
    if err.is_timeout() {
        PostError::Timeout
    } else if err.is_connect() {
        PostError::Connect(text)
    } else {
        PostError::Other(text)
    }
}

#[async_trait]
impl WebhookTransport for HttpTransport {
    async fn check_url(&self, url: &WebhookUrl) -> Result<(), UrlRefused> {
        if self.policy == AddressPolicy::AllowPrivate {
            return Ok(());
        }
        if !url.is_https() {
            return Err(UrlRefused::NotHttps);
        }
        self.check_literal(url)?;
        if url.ip_literal().is_none() {
            resolve_public(&url.host(), url.port()).await?;
        }
        Ok(())
    }

    async fn post(&self, webhook: OutgoingWebhook<'_>) -> Result<u16, PostError> {
        self.check_literal(webhook.url)?;
        let signature = signature_header(&webhook)?;
        let mut response = self
            .client
            .post(webhook.url.as_str())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", webhook.webhook_id.as_str())
            .header("webhook-timestamp", webhook.timestamp_s.to_string())
            .header("webhook-signature", signature)
            .body(webhook.body.to_vec())
            .send()
            .await
            .map_err(|e| classify(&e))?;
        let status = response.status().as_u16();
        let mut read = 0usize;
        while read < RESPONSE_BODY_MAX_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        Ok(status)
    }
}
