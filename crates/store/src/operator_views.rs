//! The dashboard's reads and its audit log on both databases: one SQL text per statement; only the payout row's money column differs.

use payoutd_domain::{PayoutId, PayoutStatus};
use payoutd_engine::StoreError;
use payoutd_engine::operator_view::{OperatorAction, OperatorPayoutQuery, StatusAge};
use sqlx::Row;

use crate::classify;

const PAYOUTS_FILTERED_WHERE: &str = "WHERE ($1 IS NULL OR status = $1) AND ($2 IS NULL OR merchant_id = $2) AND ($3 IS NULL OR asset = $3) \
     AND ($4 IS NULL OR idempotency_key = $4) AND ($5 IS NULL OR destination = $5) AND ($6 IS NULL OR created_at_ms >= $6) \
     AND ($7 IS NULL OR id < $7) ORDER BY id DESC LIMIT $8";
const STATUS_AGES: &str = "SELECT status, count(*) AS n, min(updated_at_ms) AS since FROM payouts WHERE status = $1 GROUP BY status";
const OLDEST_IN_STATUS: &str = "SELECT id FROM payouts WHERE status = $1 AND updated_at_ms = $2 ORDER BY id LIMIT 1";
const PER_MINUTE: &str = "SELECT (created_at_ms / 60000) * 60000 AS minute, count(*) AS n FROM payouts WHERE created_at_ms >= $1 \
     GROUP BY (created_at_ms / 60000) * 60000 ORDER BY minute";
const SELECT_MERCHANTS: &str = "SELECT id, name, created_at_ms FROM merchants ORDER BY created_at_ms, id LIMIT $1";
const INSERT_ACTION: &str = "INSERT INTO operator_actions (at_ms, actor, action, subject, detail) VALUES ($1, $2, $3, $4, $5)";
const SELECT_ACTIONS: &str = "SELECT at_ms, actor, action, subject, detail FROM operator_actions ORDER BY id DESC LIMIT $1";

fn status_of(text: &str) -> Result<PayoutStatus, StoreError> {
    PayoutStatus::parse(text).map_err(|_| StoreError::Corrupt(format!("payout status {text:?}")))
}

macro_rules! operator_view_store {
    ($store:ty, $columns:literal, $payout_row:path) => {
        #[async_trait::async_trait]
        impl payoutd_engine::OperatorViewStore for $store {
            async fn merchants(&self, limit: u32) -> Result<Vec<payoutd_engine::MerchantSummary>, StoreError> {
                let rows = sqlx::query(SELECT_MERCHANTS)
                    .bind(i64::from(limit.min(payoutd_engine::operator_view::MERCHANTS_PAGE_MAX)))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(classify)?;
                rows.iter()
                    .map(|r| {
                        let id: String = r.try_get("id").map_err(classify)?;
                        Ok(payoutd_engine::MerchantSummary {
                            id: payoutd_domain::MerchantId::parse(&id).map_err(|e| StoreError::Corrupt(format!("merchant id {id:?}: {e}")))?,
                            name: r.try_get("name").map_err(classify)?,
                            created_at_ms: r.try_get("created_at_ms").map_err(classify)?,
                        })
                    })
                    .collect()
            }

            async fn operator_payouts(&self, q: &OperatorPayoutQuery) -> Result<Vec<payoutd_domain::Payout>, StoreError> {
                let sql = format!("SELECT {} FROM payouts {PAYOUTS_FILTERED_WHERE}", $columns);
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(q.status.map(|s| s.as_str()))
                    .bind(q.merchant.as_ref().map(|m| m.as_str()))
                    .bind(q.asset.as_ref().map(|a| a.as_str()))
                    .bind(q.key.as_ref().map(|k| k.as_str()))
                    .bind(q.destination.as_deref())
                    .bind(q.created_from_ms)
                    .bind(q.before.as_ref().map(|id| id.as_str()))
                    .bind(i64::from(q.limit.min(payoutd_engine::operator_view::OPERATOR_PAGE_MAX)))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(classify)?;
                rows.iter().map($payout_row).collect()
            }

            async fn status_ages(&self, statuses: &[PayoutStatus]) -> Result<Vec<StatusAge>, StoreError> {
                let mut ages = Vec::new();
                for status in statuses {
                    let Some(row) = sqlx::query(STATUS_AGES).bind(status.as_str()).fetch_optional(&self.pool).await.map_err(classify)? else { continue };
                    let since: i64 = row.try_get("since").map_err(classify)?;
                    let count: i64 = row.try_get("n").map_err(classify)?;
                    let oldest: String = sqlx::query_scalar(OLDEST_IN_STATUS).bind(status.as_str()).bind(since).fetch_one(&self.pool).await.map_err(classify)?;
                    let oldest = PayoutId::parse(&oldest).map_err(|e| StoreError::Corrupt(format!("payout id {oldest:?}: {e}")))?;
                    let status = status_of(&row.try_get::<String, _>("status").map_err(classify)?)?;
                    ages.push(StatusAge { status, count: u64::try_from(count).unwrap_or(0), oldest, oldest_since_ms: since });
                }
                Ok(ages)
            }

            async fn payouts_per_minute(&self, since_ms: i64) -> Result<Vec<(i64, u64)>, StoreError> {
                let rows = sqlx::query(PER_MINUTE).bind(since_ms).fetch_all(&self.pool).await.map_err(classify)?;
                rows.iter()
                    .map(|r| Ok((r.try_get::<i64, _>("minute").map_err(classify)?, u64::try_from(r.try_get::<i64, _>("n").map_err(classify)?).unwrap_or(0))))
                    .collect()
            }

            async fn record_operator_action(&self, a: &OperatorAction) -> Result<(), StoreError> {
                let detail: String = a.detail.chars().take(payoutd_engine::operator_view::AUDIT_DETAIL_CHARS_MAX).collect();
                sqlx::query(INSERT_ACTION).bind(a.at_ms).bind(&a.actor).bind(&a.action).bind(&a.subject).bind(detail).execute(&self.pool).await.map_err(classify)?;
                Ok(())
            }

            async fn operator_actions(&self, limit: u32) -> Result<Vec<OperatorAction>, StoreError> {
                let rows = sqlx::query(SELECT_ACTIONS)
                    .bind(i64::from(limit.min(payoutd_engine::operator_view::AUDIT_PAGE_MAX)))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(classify)?;
                rows.iter()
                    .map(|r| {
                        Ok(OperatorAction {
                            at_ms: r.try_get("at_ms").map_err(classify)?,
                            actor: r.try_get("actor").map_err(classify)?,
                            action: r.try_get("action").map_err(classify)?,
                            subject: r.try_get("subject").map_err(classify)?,
                            detail: r.try_get("detail").map_err(classify)?,
                        })
                    })
                    .collect()
            }
        }
    };
}

operator_view_store!(
    crate::PgStore,
    "id, merchant_id, idempotency_key, fingerprint, asset, amount::text AS amount, destination, metadata, status, version, created_at_ms, updated_at_ms",
    crate::pg::payout_row
);
operator_view_store!(
    crate::SqliteStore,
    "id, merchant_id, idempotency_key, fingerprint, asset, amount, destination, metadata, status, version, created_at_ms, updated_at_ms",
    crate::sqlite::payout_row
);
