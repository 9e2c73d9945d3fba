//! Reconciliation's place on both databases: the cursors (a hot wallet's next block, a rail's named position) and the lease that lets one worker at a time read a scope's history; one text per statement, expanded once per store.

use payoutd_engine::StoreError;

use crate::{classify, rows};

/// A rail's named position (a Solana wallet's newest judged signature, a provider account's place).
const SELECT_RAIL_CURSOR: &str = "SELECT cursor FROM rail_cursors WHERE name = $1";
const START_RAIL_CURSOR: &str =
    "INSERT INTO rail_cursors (name, cursor) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING";
const ADVANCE_RAIL_CURSOR: &str =
    "UPDATE rail_cursors SET cursor = $3 WHERE name = $1 AND cursor = $2";
/// A hot wallet's next block to scan (NULL until its first pass).
const SELECT_BLOCK_CURSOR: &str = "SELECT reconciled_next_block FROM hot_wallets WHERE id = $1";
const START_BLOCK_CURSOR: &str = "UPDATE hot_wallets SET reconciled_next_block = coalesce(reconciled_next_block, $2) \
     WHERE id = $1 RETURNING reconciled_next_block";
const ADVANCE_BLOCK_CURSOR: &str = "UPDATE hot_wallets SET reconciled_next_block = $3 \
     WHERE id = $1 AND reconciled_next_block = $2";
/// Takes a scope's detection lease until $2 unless another worker holds it past now ($3).
const LEASE_DETECTION: &str = "INSERT INTO detection_leases (scope, leased_until_ms) VALUES ($1, $2) \
     ON CONFLICT (scope) DO UPDATE SET leased_until_ms = excluded.leased_until_ms \
     WHERE detection_leases.leased_until_ms <= $3";
/// Ends a lease that is still the one taken until $2 (not one taken since by another worker).
const RELEASE_DETECTION: &str =
    "UPDATE detection_leases SET leased_until_ms = 0 WHERE scope = $1 AND leased_until_ms = $2";

fn block(stored: i64) -> Result<u64, StoreError> {
    u64::try_from(stored).map_err(|e| StoreError::Corrupt(format!("reconciled_next_block: {e}")))
}

fn no_wallet(wallet_id: &str) -> StoreError {
    StoreError::Invariant(format!("no hot wallet {wallet_id}"))
}

macro_rules! cursor_store {
    ($store:ty) => {
        pub(crate) async fn rail_cursor(
            store: &$store,
            name: &str,
        ) -> Result<Option<String>, StoreError> {
            sqlx::query_scalar(SELECT_RAIL_CURSOR)
                .bind(name)
                .fetch_optional(&store.pool)
                .await
                .map_err(classify)
        }

        /// Moves the cursor from `from` (`None`: never set) to `to`; false if another worker moved it first.
        pub(crate) async fn advance_rail_cursor(
            store: &$store,
            name: &str,
            from: Option<&str>,
            to: &str,
        ) -> Result<bool, StoreError> {
            let (_guard, mut tx) = store.write_tx().await?;
            let moved = match from {
                None => sqlx::query(START_RAIL_CURSOR).bind(name).bind(to).execute(&mut *tx).await,
                Some(from) => {
                    sqlx::query(ADVANCE_RAIL_CURSOR)
                        .bind(name)
                        .bind(from)
                        .bind(to)
                        .execute(&mut *tx)
                        .await
                }
            };
            let moved = moved.map_err(classify)?.rows_affected() == 1;
            tx.commit().await.map_err(classify)?;
            Ok(moved)
        }

        pub(crate) async fn block_cursor(
            store: &$store,
            wallet_id: &str,
        ) -> Result<Option<u64>, StoreError> {
            let row: Option<Option<i64>> = sqlx::query_scalar(SELECT_BLOCK_CURSOR)
                .bind(wallet_id)
                .fetch_optional(&store.pool)
                .await
                .map_err(classify)?;
            row.ok_or_else(|| no_wallet(wallet_id))?.map(block).transpose()
        }

        /// The wallet's cursor, set to `first` if it had none.
        pub(crate) async fn start_block_cursor(
            store: &$store,
            wallet_id: &str,
            first: u64,
        ) -> Result<u64, StoreError> {
            let (_guard, mut tx) = store.write_tx().await?;
            let cursor: Option<i64> = sqlx::query_scalar(START_BLOCK_CURSOR)
                .bind(wallet_id)
                .bind(rows::to_db_int(first, "block")?)
                .fetch_optional(&mut *tx)
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)?;
            block(cursor.ok_or_else(|| no_wallet(wallet_id))?)
        }

        /// Moves the wallet's cursor from `from` to `to`; false if another worker moved it first.
        pub(crate) async fn advance_block_cursor(
            store: &$store,
            wallet_id: &str,
            from: u64,
            to: u64,
        ) -> Result<bool, StoreError> {
            assert!(to >= from, "the reconciliation cursor only moves forward ({from} -> {to})");
            let (_guard, mut tx) = store.write_tx().await?;
            let updated = sqlx::query(ADVANCE_BLOCK_CURSOR)
                .bind(wallet_id)
                .bind(rows::to_db_int(from, "block")?)
                .bind(rows::to_db_int(to, "block")?)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)?;
            Ok(updated.rows_affected() == 1)
        }

        /// True when the caller now holds `scope` until `until_ms`.
        pub(crate) async fn lease_detection(
            store: &$store,
            scope: &str,
            now_ms: i64,
            until_ms: i64,
        ) -> Result<bool, StoreError> {
            let (_guard, mut tx) = store.write_tx().await?;
            let leased = sqlx::query(LEASE_DETECTION)
                .bind(scope)
                .bind(until_ms)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)?;
            Ok(leased.rows_affected() == 1)
        }

        pub(crate) async fn release_detection(
            store: &$store,
            scope: &str,
            until_ms: i64,
        ) -> Result<(), StoreError> {
            let (_guard, mut tx) = store.write_tx().await?;
            sqlx::query(RELEASE_DETECTION)
                .bind(scope)
                .bind(until_ms)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)
        }
    };
}

pub(crate) mod pg {
    use super::*;
    use crate::PgStore;
    cursor_store!(PgStore);
}

pub(crate) mod sqlite {
    use super::*;
    use crate::SqliteStore;
    cursor_store!(SqliteStore);
}
