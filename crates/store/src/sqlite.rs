//! SQLite store, the embedded default: writes serialise (one writer, BEGIN IMMEDIATE); money is padded text, summed in Rust.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use payoutd_domain::{
    Amount, ApiKeyHash, ApiKeyId, AssetCode, BatchId, EventType, MerchantId, Payout, PayoutId,
    PayoutKey, PayoutStatus, Transfer, TransferId,
};
use payoutd_engine::StoreError;
use payoutd_engine::store::{
    ApiKeyInfo, Balance, BatchLines, BatchPage, BatchView, DepositOutcome, InsertPayoutOutcome,
    LedgerAudit, NewBatch, NewDeposit, NewPayout, NewTransfer, PayoutQuery, PayoutTransition,
    TransferOutcome, TransitionOutcome, intake_hour_ms,
};
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use tokio::sync::Mutex;

use crate::classify;
use crate::rows::{self, JournalRefusal};

/// Readers run in parallel in WAL mode; writers queue on one lock anyway.
pub const SQLITE_POOL_CONNECTIONS_MAX: u32 = 8;
/// How long a writer from another process may hold the file before we give up.
pub const SQLITE_BUSY_TIMEOUT_MS: u64 = 30_000;

/// The defect "unconditional status update": the same statement without its expected-state guard.
#[cfg(feature = "defects")]
const TRANSITION_PAYOUT_UNCONDITIONAL: &str = concat!(
    "UPDATE payouts SET status = ?5, version = version + 1, updated_at_ms = ?6 \
     WHERE id = ?1 AND merchant_id = ?2 AND ?3 IS ?3 AND ?4 IS ?4 RETURNING ",
    crate::shared_reads::payout_columns!("")
);

#[path = "sqlite_ledger.rs"]
mod ledger;
#[path = "sqlite_transfers.rs"]
pub(crate) mod transfers;
pub(crate) use ledger::{add, apply_journal, insert_event};

pub struct SqliteStore {
    pub(crate) pool: SqlitePool,
    /// In-process writer queue; BEGIN IMMEDIATE covers other processes on the same file.
    /// Shared so a signing session can own its place in the queue for its whole life.
    pub(crate) write_lock: Arc<Mutex<()>>,
    /// Seals webhook secrets at rest, when configured.
    pub(crate) secrets_key: Option<Arc<crate::sealed::SecretsKey>>,
}

impl SqliteStore {
    pub async fn connect(url: &str) -> Result<SqliteStore, StoreError> {
        crate::sqlite_process::without_memory_statistics();
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let mut options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Unavailable(format!("bad SQLite URL: {e}")))?
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS))
            .synchronous(SqliteSynchronous::Full);
        if !in_memory {
            options = options.journal_mode(SqliteJournalMode::Wal);
        }
        // An in-memory database lives in its one connection: keep exactly one, forever.
        let pool = SqlitePoolOptions::new()
            .max_connections(if in_memory { 1 } else { SQLITE_POOL_CONNECTIONS_MAX })
            .min_connections(if in_memory { 1 } else { 0 })
            .idle_timeout(None)
            .max_lifetime(None)
            // No ping per acquire (a hop to the connection's thread each): a local file does not go
            // stale, and a statement on a broken connection fails as Unavailable anyway.
            .test_before_acquire(false)
            .after_connect(|connection, _| {
                Box::pin(crate::sqlite_process::with_stable_plans(connection))
            })
            .connect_with(options)
            .await
            .map_err(classify)?;
        Ok(SqliteStore { pool, write_lock: Arc::new(Mutex::new(())), secrets_key: None })
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        let _guard = self.write_lock.lock().await;
        sqlx::migrate!("./migrations/sqlite")
            .run(&self.pool)
            .await
            .map_err(|e| StoreError::Unavailable(format!("migration failed: {e}")))
    }

    /// A write transaction behind this process's writer queue, begun IMMEDIATE (other processes on
    /// the same file wait at the file lock).
    pub(crate) async fn write_tx(
        &self,
    ) -> Result<
        (tokio::sync::MutexGuard<'_, ()>, sqlx::Transaction<'static, sqlx::Sqlite>),
        StoreError,
    > {
        let guard = self.write_lock.lock().await;
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(classify)?;
        Ok((guard, tx))
    }

    /// This process's writer slot, held by a single write statement outside a transaction.
    pub(crate) async fn write_guard(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.write_lock.lock().await
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

pub(crate) use crate::rows::payout_row;

impl SqliteStore {
    /// Whether the merchant's committed available balance in `asset` covers `amount` (read without
    /// the writer lock: an answer for a refusal only, never for an acceptance).
    async fn available_covers(
        &self,
        merchant: &MerchantId,
        asset: &AssetCode,
        amount: Amount,
    ) -> Result<bool, StoreError> {
        let available: Option<String> = sqlx::query_scalar(
            "SELECT available FROM balances WHERE merchant_id = ?1 AND asset = ?2",
        )
        .bind(merchant.as_str())
        .bind(asset.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(classify)?;
        Ok(available.map(|a| rows::amount(&a)).transpose()?.unwrap_or(Amount::ZERO) >= amount)
    }
}

/// Counts a new payout in its merchant's clock hour, unless the hour is full (then false, nothing
/// written). Inside the single writer's transaction, so the count is exact across processes.
pub(crate) async fn take_intake_hour(
    conn: &mut SqliteConnection,
    new: &NewPayout,
) -> Result<bool, StoreError> {
    let taken = sqlx::query(
        "INSERT INTO merchant_intake_hours AS h (merchant_id, hour_ms, payouts) VALUES (?1, ?2, 1) \
         ON CONFLICT (merchant_id, hour_ms) DO UPDATE SET payouts = h.payouts + 1 WHERE h.payouts < ?3",
    )
    .bind(new.payout.merchant_id.as_str())
    .bind(intake_hour_ms(new.payout.created_at_ms))
    .bind(i64::from(new.payouts_per_hour_max))
    .execute(&mut *conn)
    .await
    .map_err(classify)?;
    Ok(taken.rows_affected() == 1)
}

/// A conditional payout transition (I5) with its journals and event, inside the caller's write
/// transaction; the caller commits on `Applied`. Shared by `transition_payout` and the pipeline.
pub(crate) async fn apply_transition(
    conn: &mut SqliteConnection,
    t: &PayoutTransition,
) -> Result<TransitionOutcome, StoreError> {
    #[cfg(feature = "defects")]
    let statement = if crate::defects::unconditional_transitions() {
        TRANSITION_PAYOUT_UNCONDITIONAL
    } else {
        crate::shared_sql::TRANSITION_PAYOUT
    };
    #[cfg(not(feature = "defects"))]
    let statement = crate::shared_sql::TRANSITION_PAYOUT;
    crate::shared_sql::apply_transition_with!(conn, t, statement)
}

pub(crate) async fn record_deposit(
    store: &SqliteStore,
    new: &NewDeposit,
) -> Result<DepositOutcome, StoreError> {
    let (_guard, mut tx) = store.write_tx().await?;
    crate::shared_sql::record_deposit_in!(tx, new, "$5", Amount::to_padded)
}

pub(crate) async fn insert_payout(
    store: &SqliteStore,
    new: &NewPayout,
) -> Result<InsertPayoutOutcome, StoreError> {
    let p = &new.payout;
    assert_eq!(p.status, PayoutStatus::Requested, "payouts are born requested");
    // A payout the balance cannot cover is answered without the single writer lock, so a flood
    // of them does not queue behind (and hold up) everyone's writes. Only a refusal is decided
    // here, and only with the key looked up again (a concurrent twin may have just taken the
    // balance: its caller gets the payout, not "insufficient"); every acceptance is decided
    // under the lock below.
    let needed = p.amount.checked_add(p.network_fee).ok_or_else(|| {
        StoreError::Invariant(format!("payout {} with its fee exceeds 256 bits", p.id))
    })?;
    if !store.available_covers(&p.merchant_id, &p.asset, needed).await? {
        let mut conn = store.pool.acquire().await.map_err(classify)?;
        return Ok(
            match crate::shared_reads::payout_by_key!(&mut *conn, &p.merchant_id, &p.key)? {
                Some(existing) => InsertPayoutOutcome::Existing(existing),
                None => InsertPayoutOutcome::InsufficientFunds,
            },
        );
    }
    // Layer 2: the single writer lock; re-check under it.
    let _guard = store.write_lock.lock().await;
    let mut tx = store.pool.begin_with("BEGIN IMMEDIATE").await.map_err(classify)?;
    let outcome = crate::sqlite_intake_batch::insert_in(&mut tx, new).await?;
    if let InsertPayoutOutcome::Created(_) = outcome {
        tx.commit().await.map_err(classify)?;
    }
    Ok(outcome)
}

/// SQLite cannot sum 256-bit text exactly, so the audit reads the entries and sums in Rust.
pub(crate) async fn audit_ledger(store: &SqliteStore) -> Result<LedgerAudit, StoreError> {
    let journals: i64 = sqlx::query_scalar("SELECT count(*) FROM journals")
        .fetch_one(&store.pool)
        .await
        .map_err(classify)?;
    let entries =
        sqlx::query("SELECT journal_id, account, asset, direction, amount FROM ledger_entries")
            .fetch_all(&store.pool)
            .await
            .map_err(classify)?;
    // (plus, minus) per journal and per (account, asset): unsigned sums compared, never subtracted.
    let mut per_journal: HashMap<String, (Amount, Amount)> = HashMap::new();
    let mut per_account: HashMap<(String, String), (Amount, Amount)> = HashMap::new();
    for r in &entries {
        let journal_id: String = r.try_get("journal_id").map_err(classify)?;
        let account: String = r.try_get("account").map_err(classify)?;
        let asset: String = r.try_get("asset").map_err(classify)?;
        let direction: i64 = r.try_get("direction").map_err(classify)?;
        let amount = rows::amount(&r.try_get::<String, _>("amount").map_err(classify)?)?;
        for slot in [
            per_journal.entry(journal_id).or_default(),
            per_account.entry((account, asset)).or_default(),
        ] {
            if direction > 0 {
                slot.0 = add(slot.0, amount)?;
            } else {
                slot.1 = add(slot.1, amount)?;
            }
        }
    }
    let unbalanced = per_journal.values().filter(|(plus, minus)| plus != minus).count() as i64
        + (journals - per_journal.len() as i64);
    let balances = sqlx::query("SELECT merchant_id, asset, available, held FROM balances")
        .fetch_all(&store.pool)
        .await
        .map_err(classify)?;
    let mut mismatched = 0u64;
    for r in &balances {
        let merchant: String = r.try_get("merchant_id").map_err(classify)?;
        let asset: String = r.try_get("asset").map_err(classify)?;
        for (bucket, column) in [("available", "available"), ("held", "held")] {
            let stored = rows::amount(&r.try_get::<String, _>(column).map_err(classify)?)?;
            let (plus, minus) = per_account
                .get(&(format!("{merchant}:{bucket}"), asset.clone()))
                .copied()
                .unwrap_or_default();
            if plus.checked_sub(minus) != Some(stored) {
                mismatched += 1;
            }
        }
    }
    Ok(LedgerAudit {
        journals: journals as u64,
        unbalanced_journals: unbalanced as u64,
        balance_rows: balances.len() as u64,
        balances_not_matching_entries: mismatched,
        negative_balances: 0,
    })
}

/// Balances as stored: money is padded text already.
const BALANCES: &str =
    "SELECT asset, available, held FROM balances WHERE merchant_id = $1 ORDER BY asset";

/// The host's clock now, in milliseconds: an embedded database shares its process's clock.
const NOW_MS: &str = "SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER)";

crate::store_port::store_port!(SqliteStore, sqlite, sqlite_intake_batch, BALANCES, NOW_MS);

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound `LIMIT` must not re-parse a statement each time it changes: every connection of
    /// the pool holds its plans to the statement's text.
    #[tokio::test]
    async fn every_connection_holds_its_plans_to_the_statement_text() {
        let path = std::env::temp_dir()
            .join(format!("payoutd-test-plans-{}.sqlite3", uuid::Uuid::new_v4().simple()));
        let store = SqliteStore::connect(&format!("sqlite://{}", path.display())).await.unwrap();
        let mut held = Vec::new();
        for _ in 0..SQLITE_POOL_CONNECTIONS_MAX {
            let mut connection = store.pool().acquire().await.unwrap();
            assert!(crate::sqlite_process::plans_are_stable(&mut connection).await.unwrap());
            held.push(connection);
        }
        drop(held);
        store.pool().close().await;
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}
