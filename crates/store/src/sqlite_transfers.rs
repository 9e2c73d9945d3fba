//! Internal transfers on SQLite: the key re-checked under the writer's lock, a conditional debit, the credit, the row and its two events in one transaction.

use super::*;

async fn select_transfer_by_key(
    conn: &mut SqliteConnection,
    merchant: &MerchantId,
    key: &str,
) -> Result<Option<Transfer>, StoreError> {
    let row = sqlx::query(crate::shared_reads::SELECT_TRANSFER_BY_KEY)
        .bind(merchant.as_str())
        .bind(key)
        .fetch_optional(&mut *conn)
        .await
        .map_err(classify)?;
    row.map(|row| rows::transfer_row!(&row)).transpose()
}

pub(super) async fn insert_transfer(
    store: &SqliteStore,
    new: &NewTransfer,
) -> Result<TransferOutcome, StoreError> {
    rows::assert_transfer_shape(new);
    let t = &new.transfer;
    // One writer at a time: the key check, the debit and the insert cannot interleave with another.
    let (_guard, mut tx) = store.write_tx().await?;
    if let Some(existing) = select_transfer_by_key(&mut tx, &t.merchant_id, t.key.as_str()).await? {
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
    sqlx::query(
        "INSERT INTO transfers (id, merchant_id, idempotency_key, fingerprint, destination_merchant_id, asset, amount, created_at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .bind(t.id.as_str())
    .bind(t.merchant_id.as_str())
    .bind(t.key.as_str())
    .bind(t.fingerprint.as_str())
    .bind(t.destination.as_str())
    .bind(t.asset.as_str())
    .bind(t.amount.to_padded())
    .bind(t.created_at_ms)
    .execute(&mut *tx)
    .await
    .map_err(classify)?;
    for event in &new.events {
        insert_event(&mut tx, event).await?;
    }
    tx.commit().await.map_err(classify)?;
    Ok(TransferOutcome::Created(t.clone()))
}

pub(super) async fn transfer(
    store: &SqliteStore,
    merchant: &MerchantId,
    id: &TransferId,
) -> Result<Option<Transfer>, StoreError> {
    let row = sqlx::query(crate::shared_reads::SELECT_TRANSFER_BY_ID)
        .bind(id.as_str())
        .bind(merchant.as_str())
        .fetch_optional(&store.pool)
        .await
        .map_err(classify)?;
    row.map(|row| rows::transfer_row!(&row)).transpose()
}
