//! SQLite writes every money movement and event goes through: a journal's balances (refused, never negative) and entries, and events.

use payoutd_domain::{Amount, Journal, JournalId};
use payoutd_engine::StoreError;
use payoutd_engine::store::NewEvent;
use sqlx::Row;
use sqlx::sqlite::SqliteConnection;

use crate::classify;
use crate::rows::{self, JournalRefusal};

pub(crate) fn add(a: Amount, b: Amount) -> Result<Amount, StoreError> {
    a.checked_add(b).ok_or_else(|| StoreError::Invariant("balance would exceed 2^256-1".into()))
}

/// Applies a journal inside the caller's write transaction: read, check in Rust, write.
/// Safe because the write lock is held: nobody else can change the row in between.
pub(crate) async fn apply_journal(
    conn: &mut SqliteConnection,
    journal: &Journal,
    at_ms: i64,
) -> Result<Result<(), JournalRefusal>, StoreError> {
    let asset = journal.asset.as_str();
    for (merchant, d) in rows::deltas(journal) {
        let current = sqlx::query(
            "SELECT available, held FROM balances WHERE merchant_id = ?1 AND asset = ?2",
        )
        .bind(merchant.as_str())
        .bind(asset)
        .fetch_optional(&mut *conn)
        .await
        .map_err(classify)?;
        let (available, held) = match &current {
            Some(r) => (
                rows::amount(&r.try_get::<String, _>("available").map_err(classify)?)?,
                rows::amount(&r.try_get::<String, _>("held").map_err(classify)?)?,
            ),
            None => (Amount::ZERO, Amount::ZERO),
        };
        let Some(new_available) = add(available, d.available_in)?.checked_sub(d.available_out)
        else {
            return Ok(Err(JournalRefusal::Insufficient));
        };
        let Some(new_held) = add(held, d.held_in)?.checked_sub(d.held_out) else {
            return Ok(Err(JournalRefusal::Insufficient));
        };
        sqlx::query(
            "INSERT INTO balances (merchant_id, asset, available, held) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (merchant_id, asset) DO UPDATE SET available = excluded.available, held = excluded.held",
        )
        .bind(merchant.as_str())
        .bind(asset)
        .bind(new_available.to_padded())
        .bind(new_held.to_padded())
        .execute(&mut *conn)
        .await
        .map_err(classify)?;
    }
    let journal_id = JournalId::new();
    sqlx::query("INSERT INTO journals (id, kind, asset, reference, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)")
        .bind(journal_id.as_str())
        .bind(journal.kind.as_str())
        .bind(asset)
        .bind(&journal.reference)
        .bind(at_ms)
        .execute(&mut *conn)
        .await
        .map_err(classify)?;
    for p in &journal.postings {
        sqlx::query(
            "INSERT INTO ledger_entries (journal_id, account, asset, direction, amount) VALUES (?1, ?2, ?3, -1, ?5), (?1, ?4, ?3, 1, ?5)",
        )
        .bind(journal_id.as_str())
        .bind(p.from.code())
        .bind(asset)
        .bind(p.to.code())
        .bind(p.amount.to_padded())
        .execute(&mut *conn)
        .await
        .map_err(classify)?;
    }
    Ok(Ok(()))
}

pub(crate) async fn insert_event(
    conn: &mut SqliteConnection,
    event: &NewEvent,
) -> Result<(), StoreError> {
    crate::shared_sql::insert_event_on!(conn, event)
}
