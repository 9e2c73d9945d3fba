//! New payouts on SQLite, one or a batch's worth: each line decided and written under the single writer's transaction, inside its own savepoint, so a line refused rolls back only itself.

use payoutd_domain::{MerchantId, Payout, PayoutKey, PayoutStatus};
use payoutd_engine::StoreError;
use payoutd_engine::store::{InsertPayoutOutcome, NewPayout};
use sqlx::{Sqlite, Transaction};

use crate::rows::JournalRefusal;
use crate::shared_reads::payout_columns;
use crate::sqlite::{SqliteStore, apply_journal, insert_event, payout_row, take_intake_hour};
use crate::{classify, is_unique_violation};

const INSERT_PAYOUT: &str = "INSERT INTO payouts (id, merchant_id, idempotency_key, fingerprint, asset, amount, destination, metadata, \
     status, version, created_at_ms, updated_at_ms, network_fee) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

/// SQLite reads the keys from one JSON text (PostgreSQL from an array).
const BY_KEYS: &str = concat!(
    "SELECT ",
    payout_columns!(""),
    " FROM payouts WHERE merchant_id = ?1 AND idempotency_key IN (SELECT value FROM json_each(?2))"
);

/// The merchant's payouts with these keys.
pub(crate) async fn payouts_by_keys(
    store: &SqliteStore,
    merchant: &MerchantId,
    keys: &[PayoutKey],
) -> Result<Vec<Payout>, StoreError> {
    let keys = crate::sqlite_pipeline::json_array(keys.iter().map(PayoutKey::as_str));
    let rows = sqlx::query(BY_KEYS)
        .bind(merchant.as_str())
        .bind(keys)
        .fetch_all(&store.pool)
        .await
        .map_err(classify)?;
    rows.iter().map(payout_row).collect()
}

/// One new payout inside the writer's transaction `tx`: its key looked up again, its hour counted,
/// its hold (and network fee) drawn, the row and its event written, all in a savepoint released
/// only when the payout is created (I2: a refusal leaves nothing behind, the hour's count included).
pub(crate) async fn insert_in(
    tx: &mut Transaction<'_, Sqlite>,
    new: &NewPayout,
) -> Result<InsertPayoutOutcome, StoreError> {
    let p = &new.payout;
    assert_eq!(p.status, PayoutStatus::Requested, "payouts are born requested");
    if let Some(existing) = crate::shared_reads::payout_by_key!(&mut **tx, &p.merchant_id, &p.key)?
    {
        return Ok(InsertPayoutOutcome::Existing(existing));
    }
    let mut line = sqlx::Connection::begin(&mut **tx).await.map_err(classify)?;
    if !take_intake_hour(&mut line, new).await? {
        return Ok(InsertPayoutOutcome::HourFull);
    }
    for journal in p.intake_journals() {
        if let Err(JournalRefusal::Insufficient) =
            apply_journal(&mut line, &journal, p.created_at_ms).await?
        {
            return Ok(InsertPayoutOutcome::InsufficientFunds);
        }
    }
    let inserted = sqlx::query(INSERT_PAYOUT)
        .bind(p.id.as_str())
        .bind(p.merchant_id.as_str())
        .bind(p.key.as_str())
        .bind(p.fingerprint.as_str())
        .bind(p.asset.as_str())
        .bind(p.amount.to_padded())
        .bind(p.destination.to_string())
        .bind(p.metadata.as_json())
        .bind(p.status.as_str())
        .bind(p.version)
        .bind(p.created_at_ms)
        .bind(p.updated_at_ms)
        .bind(p.network_fee.to_padded())
        .execute(&mut *line)
        .await;
    match inserted {
        Ok(_) => {}
        Err(e) if is_unique_violation(&e) => {
            // Layer 3: another process wrote the key before this transaction began; its row is the answer.
            line.rollback().await.map_err(classify)?;
            let winner = crate::shared_reads::payout_by_key!(&mut **tx, &p.merchant_id, &p.key)?;
            return winner.map(InsertPayoutOutcome::Existing).ok_or_else(|| {
                StoreError::Invariant("unique violation on payout key but no winner row".into())
            });
        }
        Err(e) => return Err(classify(e)),
    }
    insert_event(&mut line, &new.event).await?;
    line.commit().await.map_err(classify)?;
    Ok(InsertPayoutOutcome::Created(p.clone()))
}

/// `insert_payout` for each line, in one write transaction, as one call after the other would answer.
pub(crate) async fn insert_payouts(
    store: &SqliteStore,
    lines: &[NewPayout],
) -> Result<Vec<InsertPayoutOutcome>, StoreError> {
    let _guard = store.write_lock.lock().await;
    let mut tx = store.pool.begin_with("BEGIN IMMEDIATE").await.map_err(classify)?;
    let mut outcomes = Vec::with_capacity(lines.len());
    for line in lines {
        outcomes.push(insert_in(&mut tx, line).await?);
    }
    tx.commit().await.map_err(classify)?;
    Ok(outcomes)
}
