//! The webhook dispatcher: fans the outbox out into deliveries, leases due ones per endpoint, posts
//! them signed and records every try. A slow endpoint holds only its own slots.

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use payoutd_domain::{MerchantId, WebhookEndpointId};

use crate::store::StoreError;
use crate::webhook_store::{ClaimedDelivery, DeliveryNext, DeliveryTry, DueEndpoint, StoredEvent};

use super::schedule::after_failure;
use super::{OutgoingWebhook, PostError};

/// Outbox events fanned out per statement.
pub const FAN_OUT_BATCH_MAX: u32 = 500;
/// Tries in flight in one process, over every endpoint.
pub const DELIVERY_CONCURRENCY_MAX: usize = 64;
/// Tries in flight to one endpoint from one process: a slow endpoint fills these, not the rest.
pub const ENDPOINT_CONCURRENCY_MAX: usize = 4;
/// Tries in flight to one owner's endpoints together, from one process: a merchant with many slow
/// endpoints fills a quarter of the process's slots, never all of them.
pub const OWNER_CONCURRENCY_MAX: usize = DELIVERY_CONCURRENCY_MAX / 4;
/// Endpoints looked at per pass.
pub const DUE_ENDPOINTS_MAX: u32 = 256;
/// A lease lasts this many try timeouts plus the margin: the try has ended (answered or timed out)
/// and been recorded long before another worker may take the delivery, and a killed worker's
/// deliveries are taken again soon after.
pub const DELIVERY_LEASE_TIMEOUTS: u64 = 2;
pub const DELIVERY_LEASE_MARGIN_MS: u64 = 1_000;
/// How often open batches are checked for completion (each check reads their lines' payouts).
pub const BATCH_CHECK_EVERY_MS: u64 = 2_000;
/// How often the backlog gauge is refreshed.
pub const BACKLOG_REFRESH_MS: u64 = 10_000;
/// The part of a non-2xx answer's description kept with the try.
pub const TRY_ERROR_MAX_LEN: usize = 200;

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchReport {
    pub fanned_out: u32,
    pub tried: u32,
    pub delivered: u32,
}

/// The worker side of the webhook use cases: the same store, transport, clock and configuration.
#[derive(Clone)]
pub struct Dispatcher {
    hooks: super::Webhooks,
}

impl Dispatcher {
    pub(super) fn new(hooks: super::Webhooks) -> Dispatcher {
        Dispatcher { hooks }
    }

    /// One pass that waits for every try it starts: fan out, lease what is due, post, record.
    pub async fn pass(&self) -> Result<DispatchReport, StoreError> {
        self.complete_batches().await?;
        let mut report =
            DispatchReport { fanned_out: self.fan_out().await?, ..DispatchReport::default() };
        let mut tries = FuturesUnordered::new();
        for endpoint in
            self.hooks.store.due_endpoints(self.hooks.clock.now_ms(), DUE_ENDPOINTS_MAX).await?
        {
            for claimed in self.claim(&endpoint.id, ENDPOINT_CONCURRENCY_MAX).await? {
                tries.push(self.try_once(claimed));
            }
        }
        while let Some(delivered) = tries.next().await {
            report.tried += 1;
            report.delivered += u32::from(delivered?);
        }
        Ok(report)
    }

    /// Delivers until `shutdown` completes; tries in flight are finished first (their leases would
    /// otherwise hold them back for the lease time).
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = pin!(shutdown);
        let mut in_flight = InFlight::default();
        let mut backlog_at = Instant::now() - Duration::from_millis(BACKLOG_REFRESH_MS);
        let mut batches_at = Instant::now() - Duration::from_millis(BATCH_CHECK_EVERY_MS);
        loop {
            if let Err(err) = self.fan_out().await {
                count_error("fan_out", &err);
            }
            if let Err(err) = self.fill(&mut in_flight).await {
                count_error("claim", &err);
            }
            if batches_at.elapsed() >= Duration::from_millis(BATCH_CHECK_EVERY_MS) {
                batches_at = Instant::now();
                if let Err(err) = self.complete_batches().await {
                    count_error("batches", &err);
                }
            }
            if backlog_at.elapsed() >= Duration::from_millis(BACKLOG_REFRESH_MS) {
                backlog_at = Instant::now();
                if let Ok(backlog) = self.hooks.store.webhook_backlog().await {
                    metrics::gauge!("payoutd_webhook_backlog").set(backlog as f64);
                }
            }
            let idle = tokio::time::sleep(Duration::from_millis(self.hooks.config.idle_sleep_ms));
            tokio::select! {
                () = &mut shutdown => break,
                Some(joined) = in_flight.tasks.join_next_with_id(), if !in_flight.tasks.is_empty() => in_flight.joined(joined),
                () = idle => {}
            }
        }
        while let Some(joined) = in_flight.tasks.join_next_with_id().await {
            in_flight.joined(joined);
        }
    }

    /// Leases due deliveries up to the process's, each owner's and each endpoint's free slots, the
    /// longest waiting endpoints first, and starts them.
    async fn fill(&self, in_flight: &mut InFlight) -> Result<(), StoreError> {
        if in_flight.tasks.len() >= DELIVERY_CONCURRENCY_MAX {
            return Ok(());
        }
        for endpoint in
            self.hooks.store.due_endpoints(self.hooks.clock.now_ms(), DUE_ENDPOINTS_MAX).await?
        {
            let free = in_flight.free_for(&endpoint);
            if free == 0 {
                continue;
            }
            for delivery in self.claim(&endpoint.id, free).await? {
                let dispatcher = self.clone();
                in_flight.start(&endpoint, async move { dispatcher.try_once(delivery).await });
            }
            if in_flight.tasks.len() >= DELIVERY_CONCURRENCY_MAX {
                break;
            }
        }
        Ok(())
    }

    /// Writes `batch.completed` for batches whose every payout is final.
    async fn complete_batches(&self) -> Result<u32, StoreError> {
        self.hooks
            .store
            .complete_batches(
                self.hooks.clock.now_ms(),
                crate::webhook_store::BATCHES_COMPLETED_PER_PASS_MAX,
            )
            .await
    }

    async fn fan_out(&self) -> Result<u32, StoreError> {
        let mut total = 0;
        loop {
            let n = self.hooks.store.fan_out(FAN_OUT_BATCH_MAX, self.hooks.clock.now_ms()).await?;
            total += n;
            if n < FAN_OUT_BATCH_MAX {
                return Ok(total);
            }
        }
    }

    async fn claim(
        &self,
        endpoint: &WebhookEndpointId,
        limit: usize,
    ) -> Result<Vec<ClaimedDelivery>, StoreError> {
        let now = self.hooks.clock.now_ms();
        let lease_ms = i64::try_from(
            self.hooks
                .config
                .timeout_ms
                .saturating_mul(DELIVERY_LEASE_TIMEOUTS)
                .saturating_add(DELIVERY_LEASE_MARGIN_MS),
        )
        .unwrap_or(i64::MAX);
        self.hooks
            .store
            .claim_deliveries(
                endpoint,
                now,
                now.saturating_add(lease_ms),
                u32::try_from(limit).unwrap_or(u32::MAX),
            )
            .await
    }

    /// Posts one leased delivery and records the try; true when it was delivered.
    async fn try_once(&self, claimed: ClaimedDelivery) -> Result<bool, StoreError> {
        let try_no = claimed.tries_in_round + 1;
        let started_ms = self.hooks.clock.now_ms();
        let started = Instant::now();
        let answer = match body(&claimed.event) {
            Some(body) => {
                let webhook = OutgoingWebhook {
                    url: &claimed.url,
                    webhook_id: &claimed.event.id,
                    timestamp_s: started_ms.div_euclid(1_000),
                    body: &body,
                    secrets: &claimed.secrets,
                };
                let timeout = Duration::from_millis(self.hooks.config.timeout_ms);
                match tokio::time::timeout(timeout, self.hooks.transport.post(webhook)).await {
                    Ok(answer) => answer,
                    Err(_) => Err(PostError::Timeout),
                }
            }
            None => Err(PostError::Other("the stored event payload is not JSON".to_owned())),
        };
        let latency_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let delivered = matches!(answer, Ok(status) if (200..300).contains(&status));
        let done = DeliveryTry {
            round: claimed.round,
            try_no,
            at_ms: started_ms,
            status_code: answer.as_ref().ok().copied(),
            error: match &answer {
                Ok(_) if delivered => None,
                Ok(status) => Some(format!("answered {status}")),
                Err(e) => Some(e.to_string().chars().take(TRY_ERROR_MAX_LEN).collect()),
            },
            latency_ms,
        };
        let next = if delivered {
            DeliveryNext::Delivered
        } else {
            let key =
                (claimed.event.id.as_str(), claimed.endpoint_id.as_str(), claimed.round, try_no);
            after_failure(&self.hooks.config, claimed.round, try_no, self.hooks.clock.now_ms(), key)
        };
        let outcome = if delivered { "delivered" } else { "failed" };
        metrics::counter!("payoutd_webhook_tries_total", "outcome" => outcome).increment(1);
        metrics::histogram!("payoutd_webhook_delivery_latency_seconds")
            .record(latency_ms as f64 / 1_000.0);
        if !delivered {
            tracing::info!(event = %claimed.event.id, endpoint = %claimed.endpoint_id, round = claimed.round, try_no,
                error = done.error.as_deref().unwrap_or(""), "webhook try failed");
        }
        self.hooks.store.record_try(&claimed, &done, next).await?;
        Ok(delivered)
    }
}

/// The tries running in this process. Each try is its own task: a try suspended inside a store
/// write must keep running while the loop waits on the store itself (SQLite's writer queue).
#[derive(Default)]
struct InFlight {
    tasks: tokio::task::JoinSet<Result<bool, StoreError>>,
    endpoint_of: HashMap<tokio::task::Id, DueEndpoint>,
    per_endpoint: HashMap<WebhookEndpointId, usize>,
    per_owner: HashMap<Option<MerchantId>, usize>,
}

impl InFlight {
    fn free_for(&self, endpoint: &DueEndpoint) -> usize {
        let endpoint_busy = self.per_endpoint.get(&endpoint.id).copied().unwrap_or(0);
        let owner_busy = self.per_owner.get(&endpoint.merchant).copied().unwrap_or(0);
        ENDPOINT_CONCURRENCY_MAX
            .saturating_sub(endpoint_busy)
            .min(OWNER_CONCURRENCY_MAX.saturating_sub(owner_busy))
            .min(DELIVERY_CONCURRENCY_MAX.saturating_sub(self.tasks.len()))
    }

    fn start(
        &mut self,
        endpoint: &DueEndpoint,
        try_once: impl Future<Output = Result<bool, StoreError>> + Send + 'static,
    ) {
        let task = self.tasks.spawn(try_once);
        *self.per_endpoint.entry(endpoint.id.clone()).or_insert(0) += 1;
        *self.per_owner.entry(endpoint.merchant.clone()).or_insert(0) += 1;
        self.endpoint_of.insert(task.id(), endpoint.clone());
    }

    fn joined(
        &mut self,
        joined: Result<(tokio::task::Id, Result<bool, StoreError>), tokio::task::JoinError>,
    ) {
        let (id, result) = match joined {
            Ok((id, result)) => (id, Some(result)),
            // A try that panicked: its lease expires and a later pass takes the delivery again.
            Err(err) => {
                tracing::error!(error = %err, "a webhook try panicked");
                (err.id(), None)
            }
        };
        if let Some(endpoint) = self.endpoint_of.remove(&id) {
            release(&mut self.per_endpoint, &endpoint.id);
            release(&mut self.per_owner, &endpoint.merchant);
        }
        if let Some(Err(err)) = result {
            count_error("record", &err);
        }
    }
}

fn count_error(stage: &'static str, err: &StoreError) {
    metrics::counter!("payoutd_webhook_errors_total", "stage" => stage).increment(1);
    tracing::warn!(stage, error = %err, "webhook dispatcher");
}

/// The Standard Webhooks body: `{"type", "timestamp", "data"}`; `None` if the stored payload is not JSON.
fn body(event: &StoredEvent) -> Option<Vec<u8>> {
    let data: serde_json::Value = serde_json::from_str(&event.payload_json).ok()?;
    let timestamp = time::OffsetDateTime::from_unix_timestamp_nanos(
        i128::from(event.created_at_ms) * 1_000_000,
    )
    .ok()?
    .format(&time::format_description::well_known::Rfc3339)
    .ok()?;
    serde_json::to_vec(&serde_json::json!({"type": event.event_type.as_str(), "timestamp": timestamp, "data": data})).ok()
}

/// One slot of `key` given back; the entry goes once none is held.
fn release<K: std::hash::Hash + Eq>(busy: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = busy.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            busy.remove(key);
        }
    }
}
