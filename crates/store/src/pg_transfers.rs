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
    let inserted = crate::shared_sql::insert_transfer_in!(
        tx,
        new,
        "$7::numeric",
        payoutd_domain::Amount::to_string
    );
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
