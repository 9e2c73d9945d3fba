//! The webhook store on both databases: one SQL text and one implementation, expanded once per
//! store (only the connection and row types differ).

use async_trait::async_trait;
use payoutd_domain::{
    BatchId, EndpointOwner, EventFilter, EventId, EventType, MerchantId, WebhookEndpointId,
    WebhookSecret, WebhookUrl,
};
use payoutd_engine::StoreError;
use payoutd_engine::webhook_store::{
    ClaimedDelivery, DELIVERY_TRIES_SHOWN_MAX, Delivery, DeliveryNext, DeliveryState, DeliveryTry,
    DueEndpoint, ENDPOINTS_PER_OWNER_MAX, EventQuery, StoredEvent, WebhookEndpoint, WebhookStore,
    batch_completed_event,
};
use sqlx::Row;

use crate::classify;

#[path = "webhooks_sql.rs"]
#[macro_use]
mod sql;
use sql::*;

fn corrupt(what: &str, err: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {err}"))
}

fn owner_column(owner: &EndpointOwner) -> Option<&str> {
    owner.merchant().map(MerchantId::as_str)
}

fn owner_of(merchant: Option<String>) -> Result<EndpointOwner, StoreError> {
    match merchant {
        Some(m) => Ok(EndpointOwner::Merchant(
            MerchantId::parse(&m).map_err(|e| corrupt("endpoint owner", e))?,
        )),
        None => Ok(EndpointOwner::Operator),
    }
}

fn endpoint_of(
    id: String,
    merchant: Option<String>,
    url: String,
    types: String,
    created_at_ms: i64,
) -> Result<WebhookEndpoint, StoreError> {
    Ok(WebhookEndpoint {
        id: WebhookEndpointId::parse(&id).map_err(|e| corrupt("endpoint id", e))?,
        owner: owner_of(merchant)?,
        url: WebhookUrl::parse(&url).map_err(|e| corrupt("endpoint url", e))?,
        filter: EventFilter::parse(types.split(' ').filter(|t| !t.is_empty()))
            .map_err(|e| corrupt("endpoint event types", e))?,
        created_at_ms,
    })
}

fn event_of(
    id: String,
    event_type: String,
    entity_id: String,
    merchant: Option<String>,
    payload_json: String,
    created_at_ms: i64,
) -> Result<StoredEvent, StoreError> {
    Ok(StoredEvent {
        id: EventId::parse(&id).map_err(|e| corrupt("event id", e))?,
        event_type: EventType::parse(&event_type).map_err(|e| corrupt("event type", e))?,
        entity_id,
        merchant_id: merchant
            .map(|m| MerchantId::parse(&m))
            .transpose()
            .map_err(|e| corrupt("event merchant", e))?,
        payload_json,
        created_at_ms,
    })
}

fn count(n: u32) -> i64 {
    i64::from(n)
}

fn small(n: i64, what: &str) -> Result<u32, StoreError> {
    u32::try_from(n).map_err(|e| corrupt(what, e))
}

/// The stored columns of what follows a try: state, round, tries in the round, next try, delivered at.
fn schedule_columns(
    claimed: &ClaimedDelivery,
    done: &DeliveryTry,
    next: DeliveryNext,
) -> (&'static str, i64, i64, i64, Option<i64>) {
    let round = i64::from(claimed.round);
    let tries = i64::from(done.try_no);
    match next {
        DeliveryNext::Delivered => {
            (DeliveryState::Delivered.as_str(), round, tries, done.at_ms, Some(done.at_ms))
        }
        DeliveryNext::Abandoned => {
            (DeliveryState::Abandoned.as_str(), round, tries, done.at_ms, None)
        }
        DeliveryNext::RetryAt { at_ms, round, tries_in_round } => (
            DeliveryState::Pending.as_str(),
            i64::from(round),
            i64::from(tries_in_round),
            at_ms,
            None,
        ),
    }
}

/// Implements `WebhookStore` for a store with a `pool`, a `write_tx()` giving `(guard, transaction)`
/// and the given row type.
macro_rules! webhook_store {
    ($store:ty, $row:ty, $insert_event:path, $visible:literal, $take_events:path) => {
        fn stored_event(row: &$row) -> Result<StoredEvent, StoreError> {
            event_of(
                row.try_get("id").map_err(classify)?,
                row.try_get("type").map_err(classify)?,
                row.try_get("entity_id").map_err(classify)?,
                row.try_get("merchant_id").map_err(classify)?,
                row.try_get("payload").map_err(classify)?,
                row.try_get("created_at_ms").map_err(classify)?,
            )
        }

        #[async_trait]
        impl WebhookStore for $store {
            async fn create_endpoint(&self, endpoint: &WebhookEndpoint, secret: &WebhookSecret) -> Result<bool, StoreError> {
                let owner = owner_column(&endpoint.owner);
                let (_guard, mut tx) = self.write_tx().await?;
                let existing: i64 = sqlx::query_scalar(COUNT_ENDPOINTS).bind(owner).fetch_one(&mut *tx).await.map_err(classify)?;
                if existing >= count(ENDPOINTS_PER_OWNER_MAX) {
                    return Ok(false);
                }
                sqlx::query(INSERT_ENDPOINT)
                    .bind(endpoint.id.as_str())
                    .bind(owner)
                    .bind(endpoint.url.as_str())
                    .bind(endpoint.filter.to_stored())
                    .bind(endpoint.created_at_ms)
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
                let stored = crate::sealed::to_stored(self.secrets_key.as_deref(), endpoint.id.as_str(), secret.expose())?;
                sqlx::query(INSERT_SECRET)
                    .bind(endpoint.id.as_str())
                    .bind(stored)
                    .bind(endpoint.created_at_ms)
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
                tx.commit().await.map_err(classify)?;
                Ok(true)
            }

            async fn endpoints(&self, owner: &EndpointOwner) -> Result<Vec<WebhookEndpoint>, StoreError> {
                let rows = sqlx::query(SELECT_ENDPOINTS).bind(owner_column(owner)).fetch_all(&self.pool).await.map_err(classify)?;
                rows.iter()
                    .map(|row| {
                        endpoint_of(
                            row.try_get("id").map_err(classify)?,
                            row.try_get("merchant_id").map_err(classify)?,
                            row.try_get("url").map_err(classify)?,
                            row.try_get("event_types").map_err(classify)?,
                            row.try_get("created_at_ms").map_err(classify)?,
                        )
                    })
                    .collect()
            }

            async fn delete_endpoint(&self, owner: &EndpointOwner, id: &WebhookEndpointId, at_ms: i64) -> Result<bool, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                let deleted = sqlx::query(DELETE_ENDPOINT)
                    .bind(at_ms)
                    .bind(id.as_str())
                    .bind(owner_column(owner))
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?
                    .rows_affected();
                if deleted == 0 {
                    return Ok(false);
                }
                sqlx::query(ABANDON_ENDPOINT_DELIVERIES).bind(id.as_str()).execute(&mut *tx).await.map_err(classify)?;
                tx.commit().await.map_err(classify)?;
                Ok(true)
            }

            async fn rotate_secret(
                &self,
                owner: &EndpointOwner,
                id: &WebhookEndpointId,
                secret: &WebhookSecret,
                old_until_ms: i64,
                at_ms: i64,
            ) -> Result<bool, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                let found: i64 = sqlx::query_scalar(ENDPOINT_EXISTS)
                    .bind(id.as_str())
                    .bind(owner_column(owner))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(classify)?;
                if found == 0 {
                    return Ok(false);
                }
                sqlx::query(EXPIRE_CURRENT_SECRET).bind(old_until_ms).bind(id.as_str()).execute(&mut *tx).await.map_err(classify)?;
                let stored = crate::sealed::to_stored(self.secrets_key.as_deref(), id.as_str(), secret.expose())?;
                sqlx::query(INSERT_SECRET).bind(id.as_str()).bind(stored).bind(at_ms).execute(&mut *tx).await.map_err(classify)?;
                tx.commit().await.map_err(classify)?;
                Ok(true)
            }

            async fn fan_out(&self, limit: u32, at_ms: i64) -> Result<u32, StoreError> {
                let token = uuid::Uuid::new_v4().simple().to_string();
                let (_guard, mut tx) = self.write_tx().await?;
                let taken = sqlx::query($take_events)
                    .bind(at_ms)
                    .bind(&token)
                    .bind(count(limit))
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?
                    .rows_affected();
                if taken == 0 {
                    return Ok(0);
                }
                sqlx::query(INSERT_FANNED_OUT).bind(at_ms).bind(&token).execute(&mut *tx).await.map_err(classify)?;
                sqlx::query(CLEAR_FANOUT_TOKEN).bind(&token).execute(&mut *tx).await.map_err(classify)?;
                tx.commit().await.map_err(classify)?;
                u32::try_from(taken).map_err(|e| StoreError::Invariant(format!("fan-out took more than asked: {e}")))
            }

            async fn due_endpoints(&self, now_ms: i64, limit: u32) -> Result<Vec<DueEndpoint>, StoreError> {
                let due: Vec<(String, Option<String>, i64)> =
                    sqlx::query_as(DUE_ENDPOINTS).bind(now_ms).bind(count(limit)).fetch_all(&self.pool).await.map_err(classify)?;
                due.iter()
                    .map(|(id, merchant, _)| {
                        let id = WebhookEndpointId::parse(id).map_err(|e| corrupt("endpoint id", e))?;
                        let merchant = merchant.as_deref().map(MerchantId::parse).transpose().map_err(|e| corrupt("endpoint merchant", e))?;
                        Ok(DueEndpoint { id, merchant })
                    })
                    .collect()
            }

            async fn claim_deliveries(
                &self,
                endpoint: &WebhookEndpointId,
                now_ms: i64,
                lease_until_ms: i64,
                limit: u32,
            ) -> Result<Vec<ClaimedDelivery>, StoreError> {
                let token = uuid::Uuid::new_v4().simple().to_string();
                let leased = {
                    let (_guard, mut tx) = self.write_tx().await?;
                    let rows = sqlx::query(LEASE_DELIVERIES)
                        .bind(lease_until_ms)
                        .bind(&token)
                        .bind(endpoint.as_str())
                        .bind(now_ms)
                        .bind(count(limit))
                        .fetch_all(&mut *tx)
                        .await
                        .map_err(classify)?;
                    tx.commit().await.map_err(classify)?;
                    rows.iter()
                        .map(|row| {
                            Ok((
                                row.try_get::<String, _>("event_id").map_err(classify)?,
                                small(row.try_get("round").map_err(classify)?, "delivery round")?,
                                small(row.try_get("tries_in_round").map_err(classify)?, "delivery tries")?,
                            ))
                        })
                        .collect::<Result<Vec<_>, StoreError>>()?
                };
                if leased.is_empty() {
                    return Ok(Vec::new());
                }
                let url: Option<String> =
                    sqlx::query_scalar(ENDPOINT_URL).bind(endpoint.as_str()).fetch_optional(&self.pool).await.map_err(classify)?;
                // Deleted since the lease: nothing to send; the deletion abandoned what was pending.
                let Some(url) = url else { return Ok(Vec::new()) };
                let url = WebhookUrl::parse(&url).map_err(|e| corrupt("endpoint url", e))?;
                let secrets: Vec<String> =
                    sqlx::query_scalar(SIGNING_SECRETS).bind(endpoint.as_str()).bind(now_ms).fetch_all(&self.pool).await.map_err(classify)?;
                let secrets = secrets
                    .iter()
                    .map(|s| {
                        let opened = crate::sealed::from_stored(self.secrets_key.as_deref(), endpoint.as_str(), s)?;
                        WebhookSecret::parse(&opened).map_err(|e| corrupt("webhook secret", e))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let mut claimed = Vec::with_capacity(leased.len());
                for (event_id, round, tries_in_round) in leased {
                    let row = sqlx::query(SELECT_EVENT).bind(&event_id).fetch_one(&self.pool).await.map_err(classify)?;
                    claimed.push(ClaimedDelivery {
                        event: stored_event(&row)?,
                        endpoint_id: endpoint.clone(),
                        url: url.clone(),
                        secrets: secrets.clone(),
                        round,
                        tries_in_round,
                        lease_token: token.clone(),
                    });
                }
                Ok(claimed)
            }

            async fn record_try(&self, claimed: &ClaimedDelivery, done: &DeliveryTry, next: DeliveryNext) -> Result<(), StoreError> {
                let (state, round, tries, next_try_at_ms, delivered_at_ms) = schedule_columns(claimed, done, next);
                let (_guard, mut tx) = self.write_tx().await?;
                sqlx::query(INSERT_TRY)
                    .bind(claimed.event.id.as_str())
                    .bind(claimed.endpoint_id.as_str())
                    .bind(i64::from(done.round))
                    .bind(i64::from(done.try_no))
                    .bind(done.at_ms)
                    .bind(done.status_code.map(i64::from))
                    .bind(done.error.as_deref())
                    .bind(done.latency_ms)
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
                sqlx::query(SCHEDULE_AFTER_TRY)
                    .bind(state)
                    .bind(round)
                    .bind(tries)
                    .bind(next_try_at_ms)
                    .bind(delivered_at_ms)
                    .bind(claimed.event.id.as_str())
                    .bind(claimed.endpoint_id.as_str())
                    .bind(&claimed.lease_token)
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
                tx.commit().await.map_err(classify)?;
                Ok(())
            }

            async fn complete_batches(&self, at_ms: i64, limit: u32) -> Result<u32, StoreError> {
                let rows = sqlx::query(COMPLETABLE_BATCHES).bind(count(limit)).fetch_all(&self.pool).await.map_err(classify)?;
                let mut completed = 0;
                for row in &rows {
                    let id: String = row.try_get("id").map_err(classify)?;
                    let merchant: String = row.try_get("merchant_id").map_err(classify)?;
                    let batch = BatchId::parse(&id).map_err(|e| corrupt("batch id", e))?;
                    let merchant = MerchantId::parse(&merchant).map_err(|e| corrupt("merchant id", e))?;
                    let (_guard, mut tx) = self.write_tx().await?;
                    let counts = sqlx::query(crate::shared_sql::BATCH_COUNTS).bind(merchant.as_str()).bind(&id).fetch_all(&mut *tx).await.map_err(classify)?;
                    let counts = counts
                        .iter()
                        .map(|c| Ok((c.try_get::<String, _>("status").map_err(classify)?, c.try_get::<i64, _>("n").map_err(classify)?)))
                        .collect::<Result<Vec<_>, StoreError>>()?;
                    let done = sqlx::query(COMPLETE_BATCH).bind(at_ms).bind(&id).execute(&mut *tx).await.map_err(classify)?;
                    if done.rows_affected() == 1 {
                        $insert_event(&mut tx, &batch_completed_event(&batch, &merchant, &counts, at_ms)).await?;
                        tx.commit().await.map_err(classify)?;
                        completed += 1;
                    }
                }
                Ok(completed)
            }

            async fn webhook_backlog(&self) -> Result<u64, StoreError> {
                let n: i64 = sqlx::query_scalar(BACKLOG).fetch_one(&self.pool).await.map_err(classify)?;
                u64::try_from(n).map_err(|e| corrupt("backlog", e))
            }

            async fn events(&self, query: &EventQuery) -> Result<Vec<StoredEvent>, StoreError> {
                let merchant = owner_column(&query.owner);
                let after = query.after.as_ref().map(EventId::as_str);
                let sql = match (merchant.is_some(), query.event_type.is_some()) {
                    (true, true) => events_after!(" AND merchant_id = $2 AND type NOT IN ('incident.opened', 'incident.resolved') AND type = $3", $visible, "$4"),
                    (true, false) => events_after!(" AND merchant_id = $2 AND type NOT IN ('incident.opened', 'incident.resolved')", $visible, "$3"),
                    (false, true) => events_after!(" AND type = $2", $visible, "$3"),
                    (false, false) => events_after!("", $visible, "$2"),
                };
                let mut q = sqlx::query(sql).bind(after);
                if let Some(m) = merchant {
                    q = q.bind(m);
                }
                if let Some(t) = query.event_type {
                    q = q.bind(t.as_str());
                }
                let rows = q.bind(count(query.limit)).fetch_all(&self.pool).await.map_err(classify)?;
                rows.iter().map(stored_event).collect()
            }

            async fn event(&self, owner: &EndpointOwner, id: &EventId) -> Result<Option<StoredEvent>, StoreError> {
                let row = sqlx::query(SELECT_EVENT).bind(id.as_str()).fetch_optional(&self.pool).await.map_err(classify)?;
                let event = row.as_ref().map(stored_event).transpose()?;
                Ok(event.filter(|e| owner.sees(e.event_type, e.merchant_id.as_ref())))
            }

            async fn deliveries(&self, owner: &EndpointOwner, event: &EventId) -> Result<Vec<Delivery>, StoreError> {
                let rows = sqlx::query(SELECT_DELIVERIES)
                    .bind(event.as_str())
                    .bind(owner_column(owner))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(classify)?;
                let mut deliveries = Vec::with_capacity(rows.len());
                for row in &rows {
                    let endpoint_id: String = row.try_get("endpoint_id").map_err(classify)?;
                    let state: String = row.try_get("state").map_err(classify)?;
                    let tries = sqlx::query(SELECT_TRIES)
                        .bind(event.as_str())
                        .bind(&endpoint_id)
                        .bind(count(DELIVERY_TRIES_SHOWN_MAX))
                        .fetch_all(&self.pool)
                        .await
                        .map_err(classify)?;
                    let mut tries = tries
                        .iter()
                        .map(|t| {
                            Ok(DeliveryTry {
                                round: small(t.try_get("round").map_err(classify)?, "try round")?,
                                try_no: small(t.try_get("try_no").map_err(classify)?, "try number")?,
                                at_ms: t.try_get("at_ms").map_err(classify)?,
                                status_code: t
                                    .try_get::<Option<i64>, _>("status_code")
                                    .map_err(classify)?
                                    .map(|c| u16::try_from(c).map_err(|e| corrupt("status code", e)))
                                    .transpose()?,
                                error: t.try_get("error").map_err(classify)?,
                                latency_ms: t.try_get("latency_ms").map_err(classify)?,
                            })
                        })
                        .collect::<Result<Vec<_>, StoreError>>()?;
                    tries.reverse();
                    deliveries.push(Delivery {
                        event_id: event.clone(),
                        endpoint_id: WebhookEndpointId::parse(&endpoint_id).map_err(|e| corrupt("endpoint id", e))?,
                        state: DeliveryState::parse(&state).ok_or_else(|| corrupt("delivery state", &state))?,
                        round: small(row.try_get("round").map_err(classify)?, "delivery round")?,
                        tries_in_round: small(row.try_get("tries_in_round").map_err(classify)?, "delivery tries")?,
                        next_try_at_ms: row.try_get("next_try_at_ms").map_err(classify)?,
                        delivered_at_ms: row.try_get("delivered_at_ms").map_err(classify)?,
                        tries,
                    });
                }
                Ok(deliveries)
            }

            async fn redispatch(&self, owner: &EndpointOwner, event: &EventId, at_ms: i64, redispatches_max: u32) -> Result<u32, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                sqlx::query(REDISPATCH_MISSING)
                    .bind(at_ms)
                    .bind(owner_column(owner))
                    .bind(event.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
                let reset = sqlx::query(REDISPATCH_RESET)
                    .bind(at_ms)
                    .bind(event.as_str())
                    .bind(owner_column(owner))
                    .bind(i64::from(redispatches_max))
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?
                    .rows_affected();
                tx.commit().await.map_err(classify)?;
                u32::try_from(reset).map_err(|e| corrupt("redispatched deliveries", e))
            }
        }
    };
}

/// Every stored secret, to be sealed again.
const ALL_SECRETS: &str =
    "SELECT endpoint_id, secret FROM webhook_secrets ORDER BY endpoint_id, created_at_ms";
const RESEAL_SECRET: &str =
    "UPDATE webhook_secrets SET secret = $1 WHERE endpoint_id = $2 AND secret = $3";

/// Seals every webhook secret under `current` in one transaction (see `sealed::resealed`): how
/// many rows were rewritten. Any secret that opens with neither key rolls the whole back.
macro_rules! reseal_webhook_secrets_on {
    ($pool:expr, $current:expr, $previous:expr) => {{
        let mut tx = $pool.begin().await.map_err(classify)?;
        let rows: Vec<(String, String)> =
            sqlx::query_as(ALL_SECRETS).fetch_all(&mut *tx).await.map_err(classify)?;
        let mut rewritten = 0u64;
        for (endpoint, stored) in rows {
            if let Some(sealed) = crate::sealed::resealed($current, $previous, &endpoint, &stored)?
            {
                sqlx::query(RESEAL_SECRET)
                    .bind(&sealed)
                    .bind(&endpoint)
                    .bind(&stored)
                    .execute(&mut *tx)
                    .await
                    .map_err(classify)?;
                rewritten += 1;
            }
        }
        tx.commit().await.map_err(classify)?;
        Ok(rewritten)
    }};
}

impl crate::PgStore {
    /// Seals every webhook secret under `current`: those stored in clear, and those sealed under `previous`.
    pub async fn reseal_webhook_secrets(
        &self,
        current: &crate::SecretsKey,
        previous: Option<&crate::SecretsKey>,
    ) -> Result<u64, StoreError> {
        reseal_webhook_secrets_on!(self.pool, current, previous)
    }
}

impl crate::SqliteStore {
    /// Seals every webhook secret under `current`: those stored in clear, and those sealed under `previous`.
    pub async fn reseal_webhook_secrets(
        &self,
        current: &crate::SecretsKey,
        previous: Option<&crate::SecretsKey>,
    ) -> Result<u64, StoreError> {
        let _guard = self.write_lock.lock().await;
        reseal_webhook_secrets_on!(self.pool, current, previous)
    }
}

mod pg {
    use super::*;
    use crate::PgStore;
    // An event's `seq` is taken at insert and seen at commit: list only events written by
    // transactions older than every one still running, so a page never steps over a late commit.
    webhook_store!(
        PgStore,
        sqlx::postgres::PgRow,
        crate::pg::insert_event,
        " AND txid < pg_snapshot_xmin(pg_current_snapshot())",
        TAKE_EVENTS_PG
    );
}

mod sqlite {
    use super::*;
    use crate::SqliteStore;
    // One writer at a time: events commit in `seq` order.
    webhook_store!(
        SqliteStore,
        sqlx::sqlite::SqliteRow,
        crate::sqlite::insert_event,
        "",
        TAKE_EVENTS_SQLITE
    );
}
