//! PostgreSQL store: conditional updates, advisory locks per idempotency key, NUMERIC(78,0) money.

use std::sync::Arc;
use std::time::Duration;

use payoutd_domain::{
    ApiKeyHash, ApiKeyId, BatchId, EventType, JournalId, MerchantId, Payout, PayoutId, PayoutKey,
    PayoutStatus, Transfer, TransferId,
};
use payoutd_engine::store::{
    ApiKeyInfo, Balance, BatchLines, BatchPage, BatchView, DepositOutcome, InsertPayoutOutcome,
    LedgerAudit, NewBatch, NewDeposit, NewPayout, NewTransfer, PayoutQuery, PayoutTransition,
    TransferOutcome, TransitionOutcome, intake_hour_ms,
};
use payoutd_engine::{Store, StoreError};
use sqlx::Row;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};

use crate::rows::{self, JournalRefusal};
use crate::{classify, is_unique_violation};

/// Connections per process; PostgreSQL's own limit is shared by every API and worker process.
pub const PG_POOL_CONNECTIONS_MAX: u32 = 16;
pub const PG_ACQUIRE_TIMEOUT_MS: u64 = 5_000;

#[path = "pg_ledger.rs"]
mod ledger;
#[path = "pg_transfers.rs"]
pub(crate) mod transfers;

pub(crate) use ledger::{apply_journal, entry_arrays, insert_event, insert_events};

/// PostgreSQL's stand-in for SQLite's writer slot: there is none to hold.
pub(crate) struct NoWriterSlot;

pub struct PgStore {
    pub(crate) pool: PgPool,
    /// Seals webhook secrets at rest, when configured.
    pub(crate) secrets_key: Option<Arc<crate::sealed::SecretsKey>>,
}

impl PgStore {
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        PgStore::connect_with(url, PG_POOL_CONNECTIONS_MAX).await
    }

    pub async fn connect_with(url: &str, connections_max: u32) -> Result<PgStore, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(connections_max.clamp(1, 256))
            .acquire_timeout(Duration::from_millis(PG_ACQUIRE_TIMEOUT_MS))
            // No ping per acquire (a round trip each): a dead connection fails its statement,
            // which is an Unavailable error the caller retries with the same idempotency key.
            .test_before_acquire(false)
            .connect(url)
            .await
            .map_err(classify)?;
        Ok(PgStore { pool, secrets_key: None })
    }

    /// A write transaction; PostgreSQL needs no process-side guard (the unit is for the shared
    /// webhook store code, which holds SQLite's writer lock the same way).
    pub(crate) async fn write_tx(
        &self,
    ) -> Result<((), sqlx::Transaction<'static, sqlx::Postgres>), StoreError> {
        Ok(((), self.pool.begin().await.map_err(classify)?))
    }

    /// What a single write statement waits for: nothing on PostgreSQL (its statements lock their
    /// rows); the shared port code holds SQLite's writer slot the same way.
    pub(crate) async fn write_guard(&self) -> NoWriterSlot {
        NoWriterSlot
    }

    /// What the server's settings put at risk, for the long-running processes to log at start:
    /// without autovacuum no statistics are kept, and each connection keeps the plans it made
    /// while the tables were small as they grow (a payout's key lookup then walks all its
    /// merchant's payouts: 19 ms at 50,000, measured).
    pub async fn settings_warnings(&self) -> Vec<&'static str> {
        let setting =
            sqlx::query_scalar::<_, String>("SHOW autovacuum").fetch_one(&self.pool).await;
        match setting {
            Ok(value) if value == "off" => vec![
                "PostgreSQL runs with autovacuum = off: turn it on, or run ANALYZE regularly, or \
                 lookups slow down as the tables grow",
            ],
            _ => Vec::new(),
        }
    }

    /// Idempotent; concurrent runs from several processes serialise on sqlx's migration lock. A
    /// schema already up to date is only read: no DDL, so a runtime role that may not change the
    /// schema (ops/postgres/runtime-role.sql) opens it, and one that finds migrations pending says
    /// who must run them.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let migrator = sqlx::migrate!("./migrations/postgres");
        if self.every_migration_applied(&migrator).await {
            return Ok(());
        }
        migrator.run(&self.pool).await.map_err(|e| {
            StoreError::Unavailable(format!(
                "migration failed: {e} (migrations are run by `payoutd migrate` with the role that \
                 owns the schema; a runtime role may not)"
            ))
        })
    }

    /// Whether every migration payoutd carries is applied, with the checksum it carries; `false`
    /// when the record cannot be read (a new database): the migrator then decides.
    async fn every_migration_applied(&self, migrator: &sqlx::migrate::Migrator) -> bool {
        let applied: Vec<(i64, Vec<u8>)> =
            match sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.pool)
                .await
            {
                Ok(applied) => applied,
                Err(_) => return false,
            };
        migrator.iter().filter(|m| !m.migration_type.is_down_migration()).all(|m| {
            applied
                .iter()
                .any(|(version, checksum)| *version == m.version && *checksum == *m.checksum)
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

pub(crate) use crate::rows::payout_row;

const CREATE_PAYOUT: &str = "SELECT payoutd_create_payout($1, $2, $3, $4, $5, $6, $7::numeric, $8::numeric, $9, $10, $11, \
     $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)";

/// Intake's journals as the function's arrays: ids and kinds per journal, then per entry its
/// journal's position (1-based), account, direction and amount.
type EntryArrays = (Vec<i32>, Vec<String>, Vec<i16>, Vec<String>);
fn intake_arrays(
    journals: &[payoutd_domain::Journal],
) -> (Vec<String>, Vec<&'static str>, EntryArrays) {
    let mut entries: EntryArrays = Default::default();
    for (position, journal) in journals.iter().enumerate() {
        let (accounts, directions, amounts) = entry_arrays(journal);
        entries.0.extend(std::iter::repeat_n(position as i32 + 1, accounts.len()));
        entries.1.extend(accounts);
        entries.2.extend(directions);
        entries.3.extend(amounts);
    }
    let ids = journals.iter().map(|_| JournalId::new().as_str().to_owned()).collect();
    (ids, journals.iter().map(|j| j.kind.as_str()).collect(), entries)
}

/// The advisory lock key of one (merchant, payout key): the first 8 bytes of a SHA-256 of both.
/// Two keys that share a lock only wait for each other; the unique index still decides.
pub(crate) fn payout_key_lock(merchant: &MerchantId, key: &PayoutKey) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(b"payout:")
        .chain_update(merchant.as_str())
        .chain_update(b":")
        .chain_update(key.as_str())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// A conditional payout transition (I5) with its journals and event, inside the caller's
/// transaction; the caller commits on `Applied`. Shared by `transition_payout` and the pipeline.
pub(crate) async fn apply_transition(
    conn: &mut PgConnection,
    t: &PayoutTransition,
) -> Result<TransitionOutcome, StoreError> {
    crate::shared_sql::apply_transition_with!(conn, t, crate::shared_sql::TRANSITION_PAYOUT)
}

/// Serialises this transaction with every other that takes the same key, until it ends.
pub(crate) async fn advisory_lock(conn: &mut PgConnection, key: &str) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(key)
        .execute(conn)
        .await
        .map_err(classify)?;
    Ok(())
}

pub(crate) async fn record_deposit(
    store: &PgStore,
    new: &NewDeposit,
) -> Result<DepositOutcome, StoreError> {
    let d = &new.deposit;
    let mut tx = store.pool.begin().await.map_err(classify)?;
    advisory_lock(&mut tx, &format!("deposit:{}:{}", d.merchant_id, d.key)).await?;
    crate::shared_sql::record_deposit_in!(tx, new, "$5::numeric", payoutd_domain::Amount::to_string)
}

pub(crate) async fn insert_payout(
    store: &PgStore,
    new: &NewPayout,
) -> Result<InsertPayoutOutcome, StoreError> {
    let p = &new.payout;
    assert_eq!(p.status, PayoutStatus::Requested, "payouts are born requested");
    // I2: the hold (and the network fee) commit with the payout row or not at all.
    let journals = p.intake_journals();
    assert_eq!(new.event.entity_id, p.id.as_str(), "the event announces this payout");
    let (journal_ids, kinds, entries) = intake_arrays(&journals);
    // Layer 2: requests for the same (merchant, key) are serialised by the call's advisory lock,
    // and the call looks again under it. Outside a transaction: it commits as it returns.
    let written = sqlx::query_scalar::<_, i64>(CREATE_PAYOUT)
        .bind(payout_key_lock(&p.merchant_id, &p.key))
        .bind(p.id.as_str())
        .bind(p.merchant_id.as_str())
        .bind(p.key.as_str())
        .bind(p.fingerprint.as_str())
        .bind(p.asset.as_str())
        .bind(p.amount.to_string())
        .bind(p.network_fee.to_string())
        .bind(p.destination.to_string())
        .bind(p.metadata.as_json())
        .bind(p.status.as_str())
        .bind(p.version)
        .bind(p.created_at_ms)
        .bind(p.updated_at_ms)
        .bind(intake_hour_ms(p.created_at_ms))
        .bind(i64::from(new.payouts_per_hour_max))
        .bind(new.event.id.as_str())
        .bind(new.event.event_type.as_str())
        .bind(&new.event.payload_json)
        .bind(&journal_ids)
        .bind(&kinds)
        .bind(&entries.0)
        .bind(&entries.1)
        .bind(&entries.2)
        .bind(&entries.3)
        .fetch_one(&store.pool)
        .await;
    match written {
        Ok(0) => {
            // The key was taken before the lock was ours, or the funds are short. A payout with
            // this key found now is the one every request converges on.
            return match store.payout_by_key(&p.merchant_id, &p.key).await? {
                Some(existing) => Ok(InsertPayoutOutcome::Existing(existing)),
                None => Ok(InsertPayoutOutcome::InsufficientFunds),
            };
        }
        Ok(-1) => return Ok(InsertPayoutOutcome::HourFull),
        Ok(written) => {
            let postings: usize = journals.iter().map(|j| j.postings.len()).sum();
            assert_eq!(
                written as usize,
                2 * postings,
                "intake writes two ledger entries per posting of its journals"
            );
        }
        Err(e) if is_unique_violation(&e) => {
            // Layer 3: someone won without our lock (another key hash collision or a manual insert).
            let winner = store.payout_by_key(&p.merchant_id, &p.key).await?;
            return winner.map(InsertPayoutOutcome::Existing).ok_or_else(|| {
                StoreError::Invariant("unique violation on payout key but no winner row".into())
            });
        }
        Err(e) => return Err(classify(e)),
    }
    Ok(InsertPayoutOutcome::Created(p.clone()))
}

pub(crate) async fn audit_ledger(store: &PgStore) -> Result<LedgerAudit, StoreError> {
    let row = sqlx::query(
        "WITH derived AS (SELECT account, asset, sum(direction * amount) AS total FROM ledger_entries GROUP BY account, asset) \
         SELECT \
           (SELECT count(*) FROM journals) AS journals, \
           (SELECT count(*) FROM journals j WHERE NOT EXISTS (SELECT 1 FROM ledger_entries e WHERE e.journal_id = j.id)) + \
           (SELECT count(*) FROM (SELECT journal_id FROM ledger_entries GROUP BY journal_id HAVING sum(direction * amount) <> 0) u) AS unbalanced, \
           (SELECT count(*) FROM balances) AS balance_rows, \
           (SELECT count(*) FROM balances b \
              LEFT JOIN derived a ON a.account = b.merchant_id || ':available' AND a.asset = b.asset \
              LEFT JOIN derived h ON h.account = b.merchant_id || ':held' AND h.asset = b.asset \
              WHERE b.available <> coalesce(a.total, 0) OR b.held <> coalesce(h.total, 0)) AS mismatched, \
           (SELECT count(*) FROM balances WHERE available < 0 OR held < 0) AS negative",
    )
    .fetch_one(&store.pool)
    .await
    .map_err(classify)?;
    let get = |name: &str| row.try_get::<i64, _>(name).map(|n| n as u64).map_err(classify);
    Ok(LedgerAudit {
        journals: get("journals")?,
        unbalanced_journals: get("unbalanced")?,
        balance_rows: get("balance_rows")?,
        balances_not_matching_entries: get("mismatched")?,
        negative_balances: get("negative")?,
    })
}

/// Balances with their NUMERIC money read as text.
const BALANCES: &str = "SELECT asset, available::text AS available, held::text AS held FROM balances \
     WHERE merchant_id = $1 ORDER BY asset";

/// The server's clock now (not the transaction's start), in milliseconds.
const NOW_MS: &str = "SELECT CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)";

crate::store_port::store_port!(PgStore, pg, pg_intake_batch, BALANCES, NOW_MS);
