//! Payout batches on both databases: a batch opened, its lines saved chunk by chunk (or a
//! resubmission's line errors updated), and read back with each line's payout. One text, expanded once per store; only the
//! money column's encoding differs.

use payoutd_domain::{BatchId, MerchantId, PayoutKey};
use payoutd_engine::StoreError;
use payoutd_engine::store::{BatchLineView, BatchLines, BatchPage, BatchView, NewBatch};
use sqlx::Row;

use crate::classify;

macro_rules! batch_store {
    ($store:ty, $payout_row:path, $write_lines:path) => {
        pub(crate) async fn open_batch(store: &$store, batch: &NewBatch) -> Result<BatchId, StoreError> {
            let line_count = i64::try_from(batch.line_count).map_err(|e| StoreError::Invariant(format!("batch size: {e}")))?;
            let (_guard, mut tx) = store.write_tx().await?;
            sqlx::query(crate::shared_sql::INSERT_BATCH)
                .bind(batch.id.as_str())
                .bind(batch.merchant_id.as_str())
                .bind(&batch.key)
                .bind(line_count)
                .bind(batch.at_ms)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            let id: String = sqlx::query_scalar(crate::shared_sql::BATCH_BY_KEY)
                .bind(batch.merchant_id.as_str())
                .bind(&batch.key)
                .fetch_one(&mut *tx)
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)?;
            BatchId::parse(&id).map_err(|e| StoreError::Corrupt(format!("batch id: {e}")))
        }

        pub(crate) async fn save_batch_lines(store: &$store, id: &BatchId, lines: BatchLines<'_>) -> Result<(), StoreError> {
            let (_guard, mut tx) = store.write_tx().await?;
            $write_lines(&mut tx, id.as_str(), lines).await?;
            tx.commit().await.map_err(classify)
        }

        pub(crate) async fn batch(store: &$store, merchant: &MerchantId, id: &BatchId, page: BatchPage) -> Result<Option<BatchView>, StoreError> {
            let head = sqlx::query(crate::shared_sql::BATCH_HEAD)
                .bind(id.as_str())
                .bind(merchant.as_str())
                .fetch_optional(&store.pool)
                .await
                .map_err(classify)?;
            let Some(head) = head else { return Ok(None) };
            let counts = sqlx::query(crate::shared_sql::BATCH_COUNTS)
                .bind(merchant.as_str())
                .bind(id.as_str())
                .fetch_all(&store.pool)
                .await
                .map_err(classify)?
                .iter()
                .map(|c| Ok((c.try_get::<String, _>("status").map_err(classify)?, c.try_get::<i64, _>("n").map_err(classify)?)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            // Each line's payout is the merchant's payout with the line's external id as its key.
            // One line more than the page, to know whether more follow.
            let rows = sqlx::query(concat!(
                "SELECT l.line_no, l.external_id, l.error, ",
                crate::shared_reads::payout_columns!("p."),
                " FROM payout_batch_lines l \
                 LEFT JOIN payouts p ON p.merchant_id = $1 AND p.idempotency_key = l.external_id \
                 WHERE l.batch_id = $2 AND l.line_no > $3 ORDER BY l.line_no LIMIT $4"
            ))
            .bind(merchant.as_str())
            .bind(id.as_str())
            .bind(i64::from(page.after_line_no))
            .bind(i64::from(page.limit) + 1)
            .fetch_all(&store.pool)
            .await
            .map_err(classify)?;
            let has_more = rows.len() > page.limit as usize;
            let mut lines = Vec::with_capacity(rows.len());
            for row in rows.iter().take(page.limit as usize) {
                let payout = match row.try_get::<Option<String>, _>("id").map_err(classify)? {
                    Some(_) => Some($payout_row(row)?),
                    None => None,
                };
                let external_id: String = row.try_get("external_id").map_err(classify)?;
                lines.push(BatchLineView {
                    line_no: u32::try_from(row.try_get::<i64, _>("line_no").map_err(classify)?).map_err(|e| StoreError::Corrupt(format!("line number: {e}")))?,
                    external_id: PayoutKey::parse(&external_id).map_err(|e| StoreError::Corrupt(format!("external id: {e}")))?,
                    payout,
                    error: row.try_get("error").map_err(classify)?,
                });
            }
            let created_at_ms = head.try_get("created_at_ms").map_err(classify)?;
            Ok(Some(BatchView { id: id.clone(), created_at_ms, counts, lines, has_more }))
        }
    };
}

pub(crate) mod pg {
    use super::*;
    use crate::PgStore;
    batch_store!(PgStore, crate::pg::payout_row, write_lines);

    /// PostgreSQL writes a batch's lines (or a resubmission's errors) as one set statement.
    async fn write_lines(
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        id: &str,
        chunk: BatchLines<'_>,
    ) -> Result<(), StoreError> {
        let first = i64::from(chunk.first_line_no);
        let numbers: Vec<i64> = (first..).take(chunk.lines.len()).collect();
        let external_ids: Vec<&str> = chunk.lines.iter().map(|(key, _)| key.as_str()).collect();
        let errors: Vec<Option<&str>> =
            chunk.lines.iter().map(|(_, error)| error.as_deref()).collect();
        sqlx::query(
            "INSERT INTO payout_batch_lines (batch_id, line_no, external_id, error) \
             SELECT $1, n, e, err FROM unnest($2::int8[], $3::text[], $4::text[]) AS u(n, e, err) \
             ON CONFLICT (batch_id, line_no) DO UPDATE SET error = excluded.error",
        )
        .bind(id)
        .bind(&numbers)
        .bind(&external_ids)
        .bind(&errors)
        .execute(&mut **tx)
        .await
        .map_err(classify)?;
        Ok(())
    }
}

pub(crate) mod sqlite {
    use super::*;
    use crate::SqliteStore;
    batch_store!(SqliteStore, crate::sqlite::payout_row, write_lines);

    /// SQLite, in-process, writes a batch's lines one statement each inside the writer's transaction.
    async fn write_lines(
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        id: &str,
        chunk: BatchLines<'_>,
    ) -> Result<(), StoreError> {
        for (n, (external_id, error)) in (i64::from(chunk.first_line_no)..).zip(chunk.lines) {
            sqlx::query(crate::shared_sql::UPSERT_BATCH_LINE)
                .bind(id)
                .bind(n)
                .bind(external_id.as_str())
                .bind(error.as_deref())
                .execute(&mut **tx)
                .await
                .map_err(classify)?;
        }
        Ok(())
    }
}
