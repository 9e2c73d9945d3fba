//! Hot wallet books on both databases: fundings booked once with their journal, and the ledger's side
//! of a wallet read in one snapshot for the balance check. One text per statement; only the money
//! column's encoding differs (PostgreSQL NUMERIC, SQLite zero-padded text).

use payoutd_domain::{Amount, AssetCode};
use payoutd_engine::StoreError;
use payoutd_engine::pipeline_store::{WalletBooks, WalletFunding, WalletLedger};
use sqlx::Row;

use crate::classify;

/// Attempts of the wallet below the nonce that are not settled, and at or above it that settled
/// with a mined transaction: both zero when the ledger stands where the chain stood at that nonce.
const WALLET_SETTLEMENT_FRONTIER: &str = "SELECT \
     (SELECT count(*) FROM attempts WHERE hot_wallet_id = $1 AND nonce < $2 AND status IN ('created', 'signed', 'broadcast')) AS unsettled_below, \
     (SELECT count(*) FROM attempts WHERE hot_wallet_id = $1 AND nonce >= $2 AND mined_block IS NOT NULL \
      AND status IN ('confirmed', 'dead', 'reverted')) AS settled_above";
/// Attempts of a wallet without nonces that are still live: zero when the ledger holds every
/// transaction the wallet sent.
const WALLET_LIVE_ATTEMPTS: &str = "SELECT count(*) FROM attempts WHERE hot_wallet_id = $1 AND status IN ('created', 'signed', 'broadcast')";
const WALLET_OPENINGS: &str =
    "SELECT asset FROM wallet_fundings WHERE hot_wallet_id = $1 AND kind = 'opening'";

fn amount_of(text: &str) -> Result<Amount, StoreError> {
    Amount::from_padded(text.trim_start_matches('-'))
        .map_err(|e| StoreError::Corrupt(format!("ledger amount {text:?}: {e}")))
}

/// Adds `amount` to the arrived (`direction` +1) or left (-1) side of `asset` in `ledger`.
fn add_entry(
    ledger: &mut Vec<WalletLedger>,
    asset: &str,
    direction: i64,
    amount: Amount,
) -> Result<(), StoreError> {
    let asset = AssetCode::parse(asset)
        .map(|(code, _, _)| code)
        .map_err(|e| StoreError::Corrupt(format!("ledger asset {asset:?}: {e}")))?;
    let index = match ledger.iter().position(|l| l.asset == asset) {
        Some(i) => i,
        None => {
            ledger.push(WalletLedger { asset, arrived: Amount::ZERO, left: Amount::ZERO });
            ledger.len() - 1
        }
    };
    let entry = &mut ledger[index];
    let side = if direction > 0 { &mut entry.arrived } else { &mut entry.left };
    *side = side
        .checked_add(amount)
        .ok_or_else(|| StoreError::Corrupt("a wallet's ledger total exceeds 256 bits".into()))?;
    Ok(())
}

macro_rules! wallet_book_store {
    ($store:ty, $db:ty, $begin_snapshot:path, $entries_sql:literal, $amount_param:literal, $amount_text:path, $apply_journal:path) => {
        pub(crate) async fn wallet_books(store: &$store, wallet_id: &str, nonce: u64) -> Result<WalletBooks, StoreError> {
            let nonce = i64::try_from(nonce).map_err(|e| StoreError::Invariant(format!("nonce {nonce}: {e}")))?;
            let mut tx = $begin_snapshot(store).await?;
            let frontier = sqlx::query(WALLET_SETTLEMENT_FRONTIER).bind(wallet_id).bind(nonce).fetch_one(&mut *tx).await.map_err(classify)?;
            let unsettled_below: i64 = frontier.try_get("unsettled_below").map_err(classify)?;
            let settled_above: i64 = frontier.try_get("settled_above").map_err(classify)?;
            if unsettled_below > 0 || settled_above > 0 {
                return Ok(WalletBooks::NotComparable);
            }
            comparable_books(tx, wallet_id).await
        }

        pub(crate) async fn settled_wallet_books(store: &$store, wallet_id: &str) -> Result<WalletBooks, StoreError> {
            let mut tx = $begin_snapshot(store).await?;
            let live: i64 = sqlx::query_scalar(WALLET_LIVE_ATTEMPTS).bind(wallet_id).fetch_one(&mut *tx).await.map_err(classify)?;
            if live > 0 {
                return Ok(WalletBooks::NotComparable);
            }
            comparable_books(tx, wallet_id).await
        }

        /// The wallet's ledger side and openings, read in the snapshot `tx` holds.
        async fn comparable_books(mut tx: sqlx::Transaction<'static, $db>, wallet_id: &str) -> Result<WalletBooks, StoreError> {
            let rows = sqlx::query($entries_sql).bind(format!("wallet:{wallet_id}")).fetch_all(&mut *tx).await.map_err(classify)?;
            let ledger = ledger_of(&rows)?;
            let opened_rows: Vec<String> = sqlx::query_scalar(WALLET_OPENINGS).bind(wallet_id).fetch_all(&mut *tx).await.map_err(classify)?;
            tx.commit().await.map_err(classify)?;
            let opened = opened_rows
                .iter()
                .map(|a| AssetCode::parse(a).map(|(code, _, _)| code).map_err(|e| StoreError::Corrupt(format!("funding asset {a:?}: {e}"))))
                .collect::<Result<_, _>>()?;
            Ok(WalletBooks::Comparable { ledger, opened })
        }

        /// The ledger's side of the wallet now, outside any snapshot (for display).
        pub(crate) async fn wallet_ledger(store: &$store, wallet_id: &str) -> Result<Vec<WalletLedger>, StoreError> {
            let rows = sqlx::query($entries_sql).bind(format!("wallet:{wallet_id}")).fetch_all(&store.pool).await.map_err(classify)?;
            ledger_of(&rows)
        }

        /// The wallet's entries (asset, direction, amount) summed per asset.
        fn ledger_of(rows: &[<$db as sqlx::Database>::Row]) -> Result<Vec<WalletLedger>, StoreError> {
            let mut ledger = Vec::new();
            for row in rows {
                let asset: String = row.try_get("asset").map_err(classify)?;
                let direction: i64 = row.try_get::<i64, _>("direction").map_err(classify)?;
                let amount: String = row.try_get("amount").map_err(classify)?;
                add_entry(&mut ledger, &asset, direction, amount_of(&amount)?)?;
            }
            Ok(ledger)
        }

        pub(crate) async fn book_wallet_funding(store: &$store, funding: &WalletFunding) -> Result<bool, StoreError> {
            let (_guard, mut tx) = store.write_tx().await?;
            let inserted = sqlx::query(concat!(
                "INSERT INTO wallet_fundings (reference, hot_wallet_id, asset, kind, amount, created_at_ms) \
                 VALUES ($1, $2, $3, $4, ",
                $amount_param,
                ", $6) ON CONFLICT DO NOTHING"
            ))
            .bind(&funding.reference)
            .bind(&funding.wallet_id)
            .bind(funding.asset.as_str())
            .bind(funding.kind.as_str())
            .bind($amount_text(&funding.amount))
            .bind(funding.at_ms)
            .execute(&mut *tx)
            .await
            .map_err(classify)?
            .rows_affected();
            if inserted == 0 {
                return Ok(false);
            }
            if let Some(journal) = funding.journal() {
                // Only merchant accounts can refuse a journal; a funding touches none.
                if $apply_journal(&mut tx, &journal, funding.at_ms).await?.is_err() {
                    return Err(StoreError::Invariant(format!("funding {} was refused by the ledger", funding.reference)));
                }
            }
            tx.commit().await.map_err(classify)?;
            Ok(true)
        }
    };
}

pub(crate) mod pg {
    use super::*;
    use crate::PgStore;

    /// A read-only transaction whose statements all see one snapshot.
    async fn begin_snapshot(
        store: &PgStore,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        let mut tx = store.pool.begin().await.map_err(classify)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(classify)?;
        Ok(tx)
    }

    fn amount_text(amount: &Amount) -> String {
        amount.to_string()
    }

    wallet_book_store!(
        PgStore,
        sqlx::Postgres,
        begin_snapshot,
        "SELECT asset, direction::bigint AS direction, sum(amount)::text AS amount FROM ledger_entries WHERE account = $1 GROUP BY asset, direction",
        "$5::numeric",
        amount_text,
        crate::pg::apply_journal
    );
}

pub(crate) mod sqlite {
    use super::*;
    use crate::SqliteStore;

    /// A deferred transaction: in WAL mode its reads all see the snapshot of its first read.
    async fn begin_snapshot(
        store: &SqliteStore,
    ) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        store.pool.begin().await.map_err(classify)
    }

    fn amount_text(amount: &Amount) -> String {
        amount.to_padded()
    }

    // Amounts are zero-padded text, which SQLite cannot add exactly: the entries are summed in Rust.
    wallet_book_store!(
        SqliteStore,
        sqlx::Sqlite,
        begin_snapshot,
        "SELECT asset, direction, amount FROM ledger_entries WHERE account = $1",
        "$5",
        amount_text,
        crate::sqlite::apply_journal
    );
}
