//! Internal transfers on PostgreSQL: the key re-checked under the writer's lock, a conditional debit, the credit, the row and its two events in one transaction.

use super::*;

pub(super) async fn insert_transfer(
    store: &PgStore,
    new: &NewTransfer,
) -> Result<TransferOutcome, StoreError> {
    rows::assert_transfer_shape(new);
    let t = &new.transfer;
    let mut tx = store.pool.begin().await.map_err(classify)?;
    advisory_lock(&mut tx, &format!("transfer:{}:{}", t.merchant_id, t.key)).await?;
    if let Some(existing) =
        crate::shared_reads::transfer_by_key!(&mut *tx, &t.merchant_id, t.key.as_str())?
    {
        return Ok(TransferOutcome::Existing(existing));
    }
    let known: i64 = sqlx::query_scalar(crate::shared_sql::MERCHANT_EXISTS)
        .bind(t.destination.as_str())
        .fetch_one(&mut *tx)
        .await
        .map_err(classify)?;
    if known == 0 {
        return Ok(TransferOutcome::UnknownDestination);
    }
    if let Err(JournalRefusal::Insufficient) =
        apply_journal(&mut tx, &new.journal, t.created_at_ms).await?
    {
        return Ok(TransferOutcome::InsufficientFunds);
    }
    let inserted = sqlx::query(
        "INSERT INTO transfers (id, merchant_id, idempotency_key, fingerprint, destination_merchant_id, asset, amount, created_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7::numeric, $8)",
    )
    .bind(t.id.as_str())
    .bind(t.merchant_id.as_str())
    .bind(t.key.as_str())
    .bind(t.fingerprint.as_str())
    .bind(t.destination.as_str())
    .bind(t.asset.as_str())
    .bind(t.amount.to_string())
    .bind(t.created_at_ms)
    .execute(&mut *tx)
    .await;
    match inserted {
        Ok(_) => {}
        Err(e) if is_unique_violation(&e) => {
            drop(tx);
            let mut conn = store.pool.acquire().await.map_err(classify)?;
            let winner =
                crate::shared_reads::transfer_by_key!(&mut *conn, &t.merchant_id, t.key.as_str())?;
            return winner.map(TransferOutcome::Existing).ok_or_else(|| {
                StoreError::Invariant("unique violation on transfer key but no winner row".into())
            });
        }
        Err(e) => return Err(classify(e)),
    }
    for event in &new.events {
        insert_event(&mut tx, event).await?;
    }
    tx.commit().await.map_err(classify)?;
    Ok(TransferOutcome::Created(t.clone()))
}
