//! PostgreSQL writes every money movement and event goes through: a journal's balances (refused, never negative) and entries, and events one by one or in bulk.

use payoutd_domain::{Journal, JournalId, MerchantId};
use payoutd_engine::StoreError;
use payoutd_engine::store::NewEvent;
use sqlx::postgres::PgConnection;

use crate::classify;
use crate::rows::{self, JournalRefusal};

/// Applies a journal's balance changes and writes its entries.
pub(crate) async fn apply_journal(
    conn: &mut PgConnection,
    journal: &Journal,
    at_ms: i64,
) -> Result<Result<(), JournalRefusal>, StoreError> {
    if let Err(refusal) = apply_balances(conn, journal).await? {
        return Ok(Err(refusal));
    }
    let (accounts, directions, amounts) = entry_arrays(journal);
    sqlx::query(
        "WITH j AS (INSERT INTO journals (id, kind, asset, reference, created_at_ms) VALUES ($1, $2, $3, $4, $5) RETURNING id) \
         INSERT INTO ledger_entries (journal_id, account, asset, direction, amount) \
         SELECT j.id, e.account, $3, e.direction, e.amount::numeric FROM j, unnest($6::text[], $7::smallint[], $8::text[]) AS e(account, direction, amount)",
    )
    .bind(JournalId::new().as_str())
    .bind(journal.kind.as_str())
    .bind(journal.asset.as_str())
    .bind(&journal.reference)
    .bind(at_ms)
    .bind(&accounts)
    .bind(&directions)
    .bind(&amounts)
    .execute(&mut *conn)
    .await
    .map_err(classify)?;
    Ok(Ok(()))
}

/// Balance side of a journal. Draws are conditional updates, so two racing holds can never
/// take a balance below zero; the CHECK constraints stand behind them.
async fn apply_balances(
    conn: &mut PgConnection,
    journal: &Journal,
) -> Result<Result<(), JournalRefusal>, StoreError> {
    let asset = journal.asset.as_str();
    for (merchant, d) in rows::deltas(journal) {
        if d.decreases() {
            let updated = sqlx::query(
                "UPDATE balances SET available = available + $3::numeric - $4::numeric, held = held + $5::numeric - $6::numeric \
                 WHERE merchant_id = $1 AND asset = $2 AND available + $3::numeric >= $4::numeric AND held + $5::numeric >= $6::numeric",
            )
            .bind(merchant.as_str())
            .bind(asset)
            .bind(d.available_in.to_string())
            .bind(d.available_out.to_string())
            .bind(d.held_in.to_string())
            .bind(d.held_out.to_string())
            .execute(&mut *conn)
            .await
            .map_err(classify)?;
            if updated.rows_affected() == 0 {
                return Ok(Err(JournalRefusal::Insufficient));
            }
        } else {
            sqlx::query(
                "INSERT INTO balances (merchant_id, asset, available, held) VALUES ($1, $2, $3::numeric, $4::numeric) \
                 ON CONFLICT (merchant_id, asset) DO UPDATE SET available = balances.available + EXCLUDED.available, \
                 held = balances.held + EXCLUDED.held",
            )
            .bind(merchant.as_str())
            .bind(asset)
            .bind(d.available_in.to_string())
            .bind(d.held_in.to_string())
            .execute(&mut *conn)
            .await
            .map_err(classify)?;
        }
    }
    Ok(Ok(()))
}

/// Two entries per posting (leaving: -1, arriving: +1), as the arrays `unnest` reads.
pub(crate) fn entry_arrays(journal: &Journal) -> (Vec<String>, Vec<i16>, Vec<String>) {
    let mut accounts = Vec::with_capacity(journal.postings.len() * 2);
    let mut directions = Vec::with_capacity(journal.postings.len() * 2);
    let mut amounts = Vec::with_capacity(journal.postings.len() * 2);
    for p in &journal.postings {
        for (account, direction) in [(&p.from, -1i16), (&p.to, 1i16)] {
            accounts.push(account.code());
            directions.push(direction);
            amounts.push(p.amount.to_string());
        }
    }
    (accounts, directions, amounts)
}

/// Layers 2 and the hold in one call (migration 0014): the key's advisory lock, then the re-check, the
/// hold, the payout, its event, its journal and entries, committed as the call returns. Answers the
/// ledger entries written: 0 means the key exists or the funds are short (nothing was written).
/// Many events in one statement, in the order given (so `seq` orders them as one by one would).
/// Answers how many rows were inserted.
pub(crate) async fn insert_events(
    conn: &mut PgConnection,
    events: &[&NewEvent],
) -> Result<u64, StoreError> {
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    let entities: Vec<&str> = events.iter().map(|e| e.entity_id.as_str()).collect();
    let merchants: Vec<Option<&str>> =
        events.iter().map(|e| e.merchant_id.as_ref().map(MerchantId::as_str)).collect();
    let payloads: Vec<&str> = events.iter().map(|e| e.payload_json.as_str()).collect();
    let at: Vec<i64> = events.iter().map(|e| e.at_ms).collect();
    let inserted = sqlx::query(
        "INSERT INTO events (id, type, entity_id, merchant_id, payload, created_at_ms) \
         SELECT id, type, entity_id, merchant_id, payload, at \
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[]) \
         WITH ORDINALITY AS e(id, type, entity_id, merchant_id, payload, at, i) ORDER BY i",
    )
    .bind(&ids)
    .bind(&types)
    .bind(&entities)
    .bind(&merchants)
    .bind(&payloads)
    .bind(&at)
    .execute(conn)
    .await
    .map_err(classify)?;
    Ok(inserted.rows_affected())
}

pub(crate) async fn insert_event(
    conn: &mut PgConnection,
    event: &NewEvent,
) -> Result<(), StoreError> {
    crate::shared_sql::insert_event_on!(conn, event)
}
