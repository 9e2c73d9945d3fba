//! Webhooks: endpoint use cases, the events API, and the transport port the dispatcher posts through.

mod dispatch;
mod schedule;

use std::sync::Arc;

use async_trait::async_trait;
use payoutd_domain::webhook::WEBHOOK_SECRET_RANDOM_BYTES;
use payoutd_domain::{
    EndpointOwner, EventFilter, EventId, WebhookEndpointId, WebhookSecret, WebhookUrl,
};

pub use dispatch::{DispatchReport, Dispatcher};
pub use schedule::{TRIES_PER_ROUND, after_failure};

use crate::clock::Clock;
use crate::store::{LIST_LIMIT_MAX, StoreError};
use crate::webhook_store::{Delivery, EventQuery, StoredEvent, WebhookEndpoint, WebhookStore};

/// How deliveries are tried; `[webhooks]` in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// The waits between the tries of one round (one fewer than `TRIES_PER_ROUND`), before jitter.
    pub retry_delays_ms: [u64; TRIES_PER_ROUND as usize - 1],
    /// From the last failed try of a round to the first try of the next.
    pub round_interval_ms: u64,
    /// An answer must be complete within this, else the try failed.
    pub timeout_ms: u64,
    /// Rounds before a delivery is abandoned (a redispatch starts it again).
    pub rounds_max: u32,
    /// How long a rotated-out secret keeps signing beside the new one.
    pub secret_overlap_ms: u64,
    /// Whether endpoints may use http and private addresses (local development only).
    pub allow_private_urls: bool,
    /// Sleep of an idle dispatcher between looks at the outbox.
    pub idle_sleep_ms: u64,
}

impl Default for WebhookConfig {
    fn default() -> WebhookConfig {
        WebhookConfig {
            retry_delays_ms: [5_000, 30_000, 120_000, 600_000],
            round_interval_ms: 3_600_000,
            timeout_ms: 10_000,
            rounds_max: 72,
            secret_overlap_ms: 86_400_000,
            allow_private_urls: false,
            idle_sleep_ms: 250,
        }
    }
}

/// One signed POST the transport makes.
pub struct OutgoingWebhook<'a> {
    pub url: &'a WebhookUrl,
    /// `webhook-id`: the event's deterministic id, the same on every try.
    pub webhook_id: &'a EventId,
    /// `webhook-timestamp`: seconds, the time of this try.
    pub timestamp_s: i64,
    pub body: &'a [u8],
    /// Every secret that signs (a rotated-out one inside its overlap too).
    pub secrets: &'a [WebhookSecret],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefused {
    #[error("webhook URLs must use https")]
    NotHttps,
    /// The host as the URL names it: the address it resolved to is logged, never shown to the
    /// merchant (it would map an internal network for whoever registers names pointing into it).
    #[error("webhook URLs must resolve to public addresses only; {0} does not")]
    PrivateAddress(String),
    /// The host as the URL names it; the resolver's own error is logged, never shown.
    #[error("the webhook host does not resolve: {0}")]
    Unresolvable(String),
}

/// How often one delivery may be sent again by hand: enough to recover from any outage of the
/// endpoint, too few to turn redispatch into a request flood.
pub const REDISPATCHES_PER_DELIVERY_MAX: u32 = 20;

/// Why a try got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    #[error("refused: {0}")]
    Refused(#[from] UrlRefused),
    #[error("no answer within the timeout")]
    Timeout,
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("{0}")]
    Other(String),
}

/// Where the webhook HTTP client plugs in.
#[async_trait]
pub trait WebhookTransport: Send + Sync + 'static {
    /// Checks an endpoint URL against the address policy, resolving its host now.
    async fn check_url(&self, url: &WebhookUrl) -> Result<(), UrlRefused>;
    /// Signs and posts; the answer's status, whatever it is.
    async fn post(&self, webhook: OutgoingWebhook<'_>) -> Result<u16, PostError>;
}

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("not found")]
    NotFound,
    #[error(transparent)]
    UrlRefused(#[from] UrlRefused),
    #[error(
        "at most {} webhook endpoints per owner",
        crate::webhook_store::ENDPOINTS_PER_OWNER_MAX
    )]
    TooManyEndpoints,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A page of events, oldest first.
#[derive(Debug, Clone)]
pub struct EventPage {
    pub events: Vec<StoredEvent>,
    pub has_more: bool,
}

/// The webhook and events use cases.
#[derive(Clone)]
pub struct Webhooks {
    store: Arc<dyn WebhookStore>,
    transport: Arc<dyn WebhookTransport>,
    clock: Arc<dyn Clock>,
    config: WebhookConfig,
}

impl Webhooks {
    pub fn new(
        store: Arc<dyn WebhookStore>,
        transport: Arc<dyn WebhookTransport>,
        clock: Arc<dyn Clock>,
        config: WebhookConfig,
    ) -> Webhooks {
        Webhooks { store, transport, clock, config }
    }

    pub fn dispatcher(&self) -> Dispatcher {
        Dispatcher::new(self.clone())
    }

    /// Registers an endpoint; the secret in clear is returned this once only.
    pub async fn create_endpoint(
        &self,
        owner: EndpointOwner,
        url: WebhookUrl,
        filter: EventFilter,
        random: [u8; WEBHOOK_SECRET_RANDOM_BYTES],
    ) -> Result<(WebhookEndpoint, WebhookSecret), WebhookError> {
        self.transport.check_url(&url).await?;
        let endpoint = WebhookEndpoint {
            id: WebhookEndpointId::new(),
            owner,
            url,
            filter,
            created_at_ms: self.clock.now_ms(),
        };
        let secret = WebhookSecret::from_random(random);
        if !self.store.create_endpoint(&endpoint, &secret).await? {
            return Err(WebhookError::TooManyEndpoints);
        }
        Ok((endpoint, secret))
    }

    pub async fn endpoints(
        &self,
        owner: &EndpointOwner,
    ) -> Result<Vec<WebhookEndpoint>, WebhookError> {
        Ok(self.store.endpoints(owner).await?)
    }

    pub async fn delete_endpoint(
        &self,
        owner: &EndpointOwner,
        id: &WebhookEndpointId,
    ) -> Result<(), WebhookError> {
        match self.store.delete_endpoint(owner, id, self.clock.now_ms()).await? {
            true => Ok(()),
            false => Err(WebhookError::NotFound),
        }
    }

    /// A new current secret; the previous ones keep signing for the configured overlap.
    pub async fn rotate_secret(
        &self,
        owner: &EndpointOwner,
        id: &WebhookEndpointId,
        random: [u8; WEBHOOK_SECRET_RANDOM_BYTES],
    ) -> Result<WebhookSecret, WebhookError> {
        let secret = WebhookSecret::from_random(random);
        let now = self.clock.now_ms();
        let overlap_ms = i64::try_from(self.config.secret_overlap_ms).unwrap_or(i64::MAX);
        match self
            .store
            .rotate_secret(owner, id, &secret, now.saturating_add(overlap_ms), now)
            .await?
        {
            true => Ok(secret),
            false => Err(WebhookError::NotFound),
        }
    }

    /// Deliveries not yet answered 2xx (the dashboard's webhook backlog).
    pub async fn backlog(&self) -> Result<u64, WebhookError> {
        Ok(self.store.webhook_backlog().await?)
    }

    pub async fn events(&self, query: &EventQuery) -> Result<EventPage, WebhookError> {
        let limit = query.limit.clamp(1, LIST_LIMIT_MAX);
        let mut events =
            self.store.events(&EventQuery { limit: limit + 1, ..query.clone() }).await?;
        let has_more = events.len() > limit as usize;
        events.truncate(limit as usize);
        Ok(EventPage { events, has_more })
    }

    pub async fn event(
        &self,
        owner: &EndpointOwner,
        id: &EventId,
    ) -> Result<StoredEvent, WebhookError> {
        self.store.event(owner, id).await?.ok_or(WebhookError::NotFound)
    }

    pub async fn deliveries(
        &self,
        owner: &EndpointOwner,
        id: &EventId,
    ) -> Result<Vec<Delivery>, WebhookError> {
        self.event(owner, id).await?;
        Ok(self.store.deliveries(owner, id).await?)
    }

    /// Sends the event again to each of the owner's matching endpoints, with the same `webhook-id`:
    /// each delivery at most `REDISPATCHES_PER_DELIVERY_MAX` times, and never while a try of it is
    /// in flight. How many deliveries start again.
    pub async fn redispatch(
        &self,
        owner: &EndpointOwner,
        id: &EventId,
    ) -> Result<u32, WebhookError> {
        self.event(owner, id).await?;
        Ok(self
            .store
            .redispatch(owner, id, self.clock.now_ms(), REDISPATCHES_PER_DELIVERY_MAX)
            .await?)
    }
}
