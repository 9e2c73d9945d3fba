//! The pipeline port on SQLite: a signing session owns the single writer slot, so sessions run one at a time.

use async_trait::async_trait;
use payoutd_domain::payout::json_string;
use payoutd_domain::{
    Amount, AssetCode, Attempt, AttemptId, AttemptStatus, AttemptTurn, AttemptTx, Destination,
    EventId, EvmAddress, HotWallet, Incident, IncidentId, Payout, PayoutId, PayoutStatus, TxKind,
    TxRef,
};
use payoutd_engine::StoreError;
use payoutd_engine::evm::SigningSession;
use payoutd_engine::pipeline_store::{
    AttemptSettlement, CapCheck, CapReading, FirstAttempt, NewIncident, PayoutEffect, PipelineStore,
};
use payoutd_engine::store::{NewEvent, PayoutTransition, TransitionOutcome};
use sqlx::sqlite::SqliteConnection;
use sqlx::{Row, Sqlite, Transaction};
use tokio::sync::OwnedMutexGuard;

use crate::classify;
use crate::rows::{self, AttemptTxRow, IncidentRow, tx_order};
use crate::sqlite::{SqliteStore, add, apply_transition, insert_event, payout_row};
use crate::{shared_incidents, shared_reads, shared_sql};

use crate::shared_reads::{attempt_columns, payout_columns};
use crate::sqlite_sweep_sql::{
    AMOUNTS_OF_ASSET, AMOUNTS_OF_WALLET, AMOUNTS_TO_DESTINATION, live_attempts_from,
};

/// An amount parameter: bound and stored as zero-padded text, which compares as the number does.
macro_rules! sqlite_amount {
    ($n:literal) => {
        $n
    };
}

/// Lists are bound as one JSON array: the statement text stays static whatever the list's length.
const SELECT_TXS_OF: &str = concat!(
    "SELECT attempt_id, tx_hash, kind, raw, max_fee_per_gas, max_priority_fee_per_gas, created_at_ms FROM attempt_transactions \
     WHERE attempt_id IN (SELECT value FROM json_each(?1)) ORDER BY attempt_id, ",
    tx_order!()
);
/// A list bound as one JSON array, read with `json_each`: the statement text stays static whatever
/// the list's length.
macro_rules! sqlite_in_list {
    ($n:literal) => {
        concat!("IN (SELECT value FROM json_each(", $n, "))")
    };
}

pub(crate) fn json_array<'a>(items: impl Iterator<Item = &'a str>) -> String {
    format!("[{}]", items.map(json_string).collect::<Vec<_>>().join(","))
}

/// The transactions of these attempts, each attempt's in signing order.
async fn txs_of(
    conn: &mut SqliteConnection,
    attempt_ids: &[String],
) -> Result<Vec<AttemptTxRow>, StoreError> {
    let rows = sqlx::query(SELECT_TXS_OF)
        .bind(json_array(attempt_ids.iter().map(String::as_str)))
        .fetch_all(conn)
        .await
        .map_err(classify)?;
    rows.iter().map(attempt_tx_row).collect()
}

async fn insert_attempt_tx(
    conn: &mut SqliteConnection,
    attempt_id: &AttemptId,
    tx: &AttemptTx,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO attempt_transactions (tx_hash, attempt_id, kind, raw, max_fee_per_gas, max_priority_fee_per_gas, created_at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .bind(tx.hash.as_str())
    .bind(attempt_id.as_str())
    .bind(tx.kind.as_str())
    .bind(&tx.raw)
    // Padded like every SQLite amount, so the fee order in `tx_order!` is numeric.
    .bind(tx.fees.map(|f| Amount::from_u128(f.max_fee_per_gas).to_padded()))
    .bind(tx.fees.map(|f| Amount::from_u128(f.max_priority_fee_per_gas).to_padded()))
    .bind(tx.created_at_ms)
    .execute(conn)
    .await
    .map_err(classify)?;
    Ok(())
}

crate::pipeline_port::typed_helpers!(SqliteConnection, Sqlite);

fn sum(amounts: Vec<String>) -> Result<Amount, StoreError> {
    amounts.iter().try_fold(Amount::ZERO, |total, text| add(total, rows::amount(text)?))
}

mod row_maps {
    crate::pipeline_rows::pipeline_row_readers!(sqlx::sqlite::SqliteRow);
}
use row_maps::{attempt_row, attempt_tx_row, hot_wallet_row};

#[path = "sqlite_evm.rs"]
mod evm_line;

#[path = "sqlite_detection.rs"]
mod detection;

crate::pipeline_port::pipeline_port!(
    SqliteStore,
    sqlite_in_list,
    json_array,
    "",
    live_attempts_from,
    sqlite_amount,
    Amount::to_padded,
    {
        async fn requested_in_turn(&self, limit: u32) -> Result<Vec<Payout>, StoreError> {
            // The whole requested queue ranked, which SQLite's one process reads in place.
            let rows = sqlx::query(shared_reads::fair_select!("status = 'requested'", "$1"))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .map_err(classify)?;
            rows.iter().map(payout_row).collect()
        }

        async fn approved_in(
            &self,
            assets: &[AssetCode],
            limit: u32,
        ) -> Result<Vec<Payout>, StoreError> {
            let rows = sqlx::query(shared_reads::fair_select!(
                concat!("status = 'approved' AND asset ", sqlite_in_list!("$1")),
                "$2"
            ))
            .bind(json_array(assets.iter().map(AssetCode::as_str)))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
            rows.iter().map(payout_row).collect()
        }

        async fn destination_volume_since(
            &self,
            asset: &AssetCode,
            destination: &Destination,
            since_ms: i64,
        ) -> Result<Amount, StoreError> {
            let amounts: Vec<String> = sqlx::query_scalar(AMOUNTS_TO_DESTINATION)
                .bind(asset.as_str())
                .bind(destination.to_string())
                .bind(since_ms)
                .fetch_all(&self.pool)
                .await
                .map_err(classify)?;
            sum(amounts)
        }

        async fn settle_attempts(
            &self,
            settlements: &[AttemptSettlement],
        ) -> Result<Vec<TransitionOutcome>, StoreError> {
            if settlements.is_empty() {
                return Ok(Vec::new());
            }
            let _guard = self.write_lock.lock().await;
            let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(classify)?;
            shared_sql::settle_many_in!(
                tx,
                settlements,
                concat!(shared_sql::await_next_attempt_returning!(), payout_columns!(""))
            )
        }

        async fn create_first_attempt_within_caps(
            &self,
            payout: &Payout,
            attempt: &Attempt,
            event: &NewEvent,
            caps: &CapCheck,
        ) -> Result<FirstAttempt, StoreError> {
            // The one writer: the volumes read here cannot change before this transaction commits.
            let _guard = self.write_lock.lock().await;
            let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(classify)?;
            let to_destination: Vec<String> = sqlx::query_scalar(AMOUNTS_TO_DESTINATION)
                .bind(payout.asset.as_str())
                .bind(payout.destination.to_string())
                .bind(caps.since_ms)
                .fetch_all(&mut *tx)
                .await
                .map_err(classify)?;
            let of_account: Vec<String> = sqlx::query_scalar(AMOUNTS_OF_ASSET)
                .bind(payout.asset.as_str())
                .bind(caps.since_ms)
                .fetch_all(&mut *tx)
                .await
                .map_err(classify)?;
            let reading = CapReading {
                reviewed: shared_sql::reviewed_in!(&mut *tx, caps),
                to_destination: sum(to_destination)?,
                of_account: sum(of_account)?,
            };
            create_first_under_caps(tx, payout, attempt, event, caps, &reading).await
        }

        async fn awaiting_next_attempt_in(
            &self,
            turns: &[AttemptTurn],
            limit: u32,
        ) -> Result<Vec<(Payout, u32)>, StoreError> {
            // SQLite reads the turns from one JSON text of [asset, from, to] (PostgreSQL from arrays).
            let turns_json = format!(
                "[{}]",
                turns
                    .iter()
                    .map(|t| format!(
                        "[{},{},{}]",
                        json_string(t.asset.as_str()),
                        t.attempt_no_min,
                        t.attempt_no_max
                    ))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let rows = sqlx::query(concat!(
                "SELECT ",
                payout_columns!("p."),
                ", p.next_attempt_no FROM payouts p JOIN json_each($1) t ON p.asset = json_extract(t.value, '$[0]') ",
                "AND p.next_attempt_no BETWEEN json_extract(t.value, '$[1]') AND json_extract(t.value, '$[2]') ",
                "WHERE p.next_attempt_no IS NOT NULL AND p.status = 'processing' ORDER BY p.id LIMIT $2"
            ))
            .bind(turns_json)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
            rows.iter().map(rows::payout_awaiting_row).collect()
        }
    }
);
