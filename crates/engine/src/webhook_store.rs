//! The store port of webhooks and the events API: endpoints and their secrets, the outbox's fan-out
//! into deliveries, leased delivery tries and their record.

use async_trait::async_trait;
use payoutd_domain::{
    BatchId, EndpointOwner, EventFilter, EventId, EventType, MerchantId, WebhookEndpointId,
    WebhookSecret, WebhookUrl,
};

use crate::store::StoreError;

/// Endpoints one owner may register.
pub const ENDPOINTS_PER_OWNER_MAX: u32 = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEndpoint {
    pub id: WebhookEndpointId,
    pub owner: EndpointOwner,
    pub url: WebhookUrl,
    pub filter: EventFilter,
    pub created_at_ms: i64,
}

/// An outbox row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub id: EventId,
    pub event_type: EventType,
    pub entity_id: String,
    /// `None` for operator events that concern no merchant.
    pub merchant_id: Option<MerchantId>,
    pub payload_json: String,
    pub created_at_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    /// Not yet answered 2xx; tried again at `next_try_at_ms`.
    Pending,
    Delivered,
    /// Every round failed, or the endpoint was deleted; a redispatch makes it pending again.
    Abandoned,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Abandoned => "abandoned",
        }
    }

    pub fn parse(text: &str) -> Option<DeliveryState> {
        [DeliveryState::Pending, DeliveryState::Delivered, DeliveryState::Abandoned]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// One HTTP try of one event to one endpoint, as recorded; the API shows it as it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = DeliveryTryBody))]
pub struct DeliveryTry {
    pub round: u32,
    pub try_no: u32,
    pub at_ms: i64,
    /// The answer's status, when one came back.
    pub status_code: Option<u16>,
    /// Why no 2xx: a transport error, or a short description of a non-2xx answer.
    pub error: Option<String>,
    pub latency_ms: i64,
}

/// An event's delivery to one endpoint, with every try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub event_id: EventId,
    pub endpoint_id: WebhookEndpointId,
    pub state: DeliveryState,
    pub round: u32,
    pub tries_in_round: u32,
    pub next_try_at_ms: i64,
    pub delivered_at_ms: Option<i64>,
    pub tries: Vec<DeliveryTry>,
}

/// A due delivery this worker leased, with what it needs to send it.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    pub event: StoredEvent,
    pub endpoint_id: WebhookEndpointId,
    pub url: WebhookUrl,
    /// The current secret and any rotated-out one still inside its overlap.
    pub secrets: Vec<WebhookSecret>,
    pub round: u32,
    pub tries_in_round: u32,
    /// Proves the lease is still ours when the try is recorded.
    pub lease_token: String,
}

/// What follows a try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryNext {
    Delivered,
    RetryAt { at_ms: i64, round: u32, tries_in_round: u32 },
    Abandoned,
}

#[derive(Debug, Clone)]
pub struct EventQuery {
    pub owner: EndpointOwner,
    pub event_type: Option<EventType>,
    /// Cursor: only events written after this one (oldest first, so a consumer pages forward).
    pub after: Option<EventId>,
    pub limit: u32,
}

#[async_trait]
pub trait WebhookStore: Send + Sync + 'static {
    /// Inserts the endpoint and its first secret, unless its owner already has the maximum.
    async fn create_endpoint(
        &self,
        endpoint: &WebhookEndpoint,
        secret: &WebhookSecret,
    ) -> Result<bool, StoreError>;
    /// The owner's endpoints that are not deleted, oldest first.
    async fn endpoints(&self, owner: &EndpointOwner) -> Result<Vec<WebhookEndpoint>, StoreError>;
    /// Deletes the owner's endpoint and abandons its pending deliveries; false when it has none by that id.
    async fn delete_endpoint(
        &self,
        owner: &EndpointOwner,
        id: &WebhookEndpointId,
        at_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Adds `secret` as the endpoint's current secret; the secrets before it sign until `old_until_ms`.
    async fn rotate_secret(
        &self,
        owner: &EndpointOwner,
        id: &WebhookEndpointId,
        secret: &WebhookSecret,
        old_until_ms: i64,
        at_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Turns up to `limit` outbox events not yet fanned out into one pending delivery per matching
    /// endpoint (created before the event); returns how many events it took.
    async fn fan_out(&self, limit: u32, at_ms: i64) -> Result<u32, StoreError>;
    /// Endpoints with a pending, unleased delivery due at `now_ms`, the longest waiting first.
    async fn due_endpoints(&self, now_ms: i64, limit: u32) -> Result<Vec<DueEndpoint>, StoreError>;
    /// Leases up to `limit` of the endpoint's due deliveries until `lease_until_ms`.
    async fn claim_deliveries(
        &self,
        endpoint: &WebhookEndpointId,
        now_ms: i64,
        lease_until_ms: i64,
        limit: u32,
    ) -> Result<Vec<ClaimedDelivery>, StoreError>;
    /// Records the try (always: it happened) and, while the lease is still ours, schedules what follows.
    async fn record_try(
        &self,
        claimed: &ClaimedDelivery,
        done: &DeliveryTry,
        next: DeliveryNext,
    ) -> Result<(), StoreError>;
    /// Marks up to `limit` batches whose every payout is final as completed, each with its
    /// `batch.completed` event (`batch_completed_event`) in the same transaction; returns how many.
    async fn complete_batches(&self, at_ms: i64, limit: u32) -> Result<u32, StoreError>;
    /// Pending deliveries, for the backlog metric.
    async fn webhook_backlog(&self) -> Result<u64, StoreError>;

    async fn events(&self, query: &EventQuery) -> Result<Vec<StoredEvent>, StoreError>;
    async fn event(
        &self,
        owner: &EndpointOwner,
        id: &EventId,
    ) -> Result<Option<StoredEvent>, StoreError>;
    /// The event's deliveries to the owner's endpoints, each with its tries (the newest
    /// `DELIVERY_TRIES_SHOWN_MAX`).
    async fn deliveries(
        &self,
        owner: &EndpointOwner,
        event: &EventId,
    ) -> Result<Vec<Delivery>, StoreError>;
    /// Makes the event's delivery to each of the owner's matching endpoints pending now, in a new
    /// round (creating it where missing); returns how many.
    /// Starts a new round now for each of the event's deliveries the owner can see, except one
    /// being tried or sent again by hand `redispatches_max` times already; how many it started.
    async fn redispatch(
        &self,
        owner: &EndpointOwner,
        event: &EventId,
        at_ms: i64,
        redispatches_max: u32,
    ) -> Result<u32, StoreError>;
}

/// An endpoint with a delivery due, and whose it is (`None`: the operator's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueEndpoint {
    pub id: WebhookEndpointId,
    pub merchant: Option<MerchantId>,
}

/// `batch.completed` for a batch whose every payout is final: its counts by final status (lines
/// that never got a payout count as `not_created`).
pub fn batch_completed_event(
    batch: &BatchId,
    merchant: &MerchantId,
    counts: &[(String, i64)],
    at_ms: i64,
) -> crate::store::NewEvent {
    let counts: serde_json::Map<String, serde_json::Value> =
        counts.iter().map(|(s, n)| (s.clone(), serde_json::Value::from(*n))).collect();
    crate::store::NewEvent {
        id: EventId::derive(EventType::BatchCompleted, batch.as_str()),
        event_type: EventType::BatchCompleted,
        entity_id: batch.as_str().to_owned(),
        merchant_id: Some(merchant.clone()),
        payload_json: serde_json::json!({"id": batch.as_str(), "object": "payout_batch", "status": "completed", "counts": counts,
            "completed_at_ms": at_ms})
        .to_string(),
        at_ms,
    }
}

/// Batches completed per pass.
pub const BATCHES_COMPLETED_PER_PASS_MAX: u32 = 100;

/// Tries listed per delivery.
pub const DELIVERY_TRIES_SHOWN_MAX: u32 = 50;
