//! Internal transfers on SQLite: the key re-checked under the writer's lock, a conditional debit, the credit, the row and its two events in one transaction.

use super::*;

pub(super) async fn insert_transfer(
    store: &SqliteStore,
    new: &NewTransfer,
) -> Result<TransferOutcome, StoreError> {
    rows::assert_transfer_shape(new);
    let t = &new.transfer;
    // One writer at a time: the key check, the debit and the insert cannot interleave with another.
    let (_guard, mut tx) = store.write_tx().await?;
    crate::shared_sql::insert_transfer_in!(tx, new, "$7", Amount::to_padded).map_err(classify)?;
    for event in &new.events {
        insert_event(&mut tx, event).await?;
    }
    tx.commit().await.map_err(classify)?;
    Ok(TransferOutcome::Created(t.clone()))
}
