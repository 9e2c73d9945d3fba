//! The pipeline port on PostgreSQL: signing sessions on a locked wallet row, attempts, settlement, incidents.

use async_trait::async_trait;
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
use sqlx::postgres::PgConnection;
use sqlx::{Postgres, Row, Transaction};

use crate::classify;
use crate::pg::{PgStore, apply_transition, insert_event, payout_row};
use crate::pg_sweep_sql::live_lines_from;
use crate::rows::{self, AttemptTxRow, IncidentRow, tx_order};
use crate::{shared_incidents, shared_reads, shared_sql};

use crate::shared_reads::{attempt_columns, payout_columns};

const SELECT_TXS_OF: &str = concat!(
    "SELECT attempt_id, tx_hash, kind, raw, max_fee_per_gas::text AS max_fee_per_gas, \
     max_priority_fee_per_gas::text AS max_priority_fee_per_gas, created_at_ms FROM attempt_transactions \
     WHERE attempt_id = ANY($1) ORDER BY attempt_id, ",
    tx_order!()
);
/// Money that may have left: every attempt that was signed, except those proven never to land.
const VOLUME_TO_DESTINATION: &str = "SELECT coalesce(sum(p.amount), 0)::text FROM attempts a JOIN payouts p ON p.id = a.payout_id \
     WHERE p.asset = $1 AND p.destination = $2 AND a.created_at_ms >= $3 AND a.status <> 'dead'";
const VOLUME_OF_ASSET: &str = "SELECT coalesce(sum(p.amount), 0)::text FROM attempts a JOIN payouts p ON p.id = a.payout_id \
     WHERE p.asset = $1 AND a.created_at_ms >= $2 AND a.status <> 'dead'";
const VOLUME_OF_WALLET: &str = "SELECT coalesce(sum(p.amount), 0)::text FROM attempts a JOIN payouts p ON p.id = a.payout_id \
     WHERE a.hot_wallet_id = $1 AND p.asset = $2 AND a.created_at_ms >= $3 AND a.status <> 'dead'";

/// The transactions of these attempts, each attempt's in signing order.
async fn txs_of(
    conn: &mut PgConnection,
    attempt_ids: &[String],
) -> Result<Vec<AttemptTxRow>, StoreError> {
    let rows =
        sqlx::query(SELECT_TXS_OF).bind(attempt_ids).fetch_all(conn).await.map_err(classify)?;
    rows.iter().map(attempt_tx_row).collect()
}

async fn insert_attempt_tx(
    conn: &mut PgConnection,
    attempt_id: &AttemptId,
    tx: &AttemptTx,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO attempt_transactions (tx_hash, attempt_id, kind, raw, max_fee_per_gas, max_priority_fee_per_gas, created_at_ms) \
         VALUES ($1, $2, $3, $4, $5::numeric, $6::numeric, $7)",
    )
    .bind(tx.hash.as_str())
    .bind(attempt_id.as_str())
    .bind(tx.kind.as_str())
    .bind(&tx.raw)
    .bind(tx.fees.map(|f| f.max_fee_per_gas.to_string()))
    .bind(tx.fees.map(|f| f.max_priority_fee_per_gas.to_string()))
    .bind(tx.created_at_ms)
    .execute(conn)
    .await
    .map_err(classify)?;
    Ok(())
}

crate::pipeline_port::typed_helpers!(PgConnection, Postgres);

/// Sums can exceed what one amount holds only if the ledger is already absurd.
fn volume(text: &str) -> Result<Amount, StoreError> {
    Amount::from_padded(text).map_err(|e| StoreError::Invariant(format!("volume {text}: {e}")))
}

/// An amount parameter: bound as its decimal text, compared and stored as NUMERIC.
macro_rules! pg_amount {
    ($n:literal) => {
        concat!($n, "::numeric")
    };
}

/// A list bound as one array, tested with `= ANY($n)`.
macro_rules! pg_in_list {
    ($n:literal) => {
        concat!("= ANY(", $n, ")")
    };
}

fn text_list<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    items.collect()
}

mod row_maps {
    crate::pipeline_rows::pipeline_row_readers!(sqlx::postgres::PgRow);
}
use row_maps::{attempt_row, attempt_tx_row, hot_wallet_row};

#[path = "pg_evm.rs"]
mod evm_line;

#[path = "pg_detection.rs"]
mod detection;

impl PgStore {
    /// The payouts of the ranked ids `queue` that `read` (one of `pg_claim`'s reads by key, the
    /// ids bound first and then `rest`) still finds in their queue, in turn order.
    async fn read_ranked(
        &self,
        queue: Vec<String>,
        read: &'static str,
        rest: impl FnOnce(PgQuery<'_>) -> PgQuery<'_>,
    ) -> Result<Vec<Payout>, StoreError> {
        if queue.is_empty() {
            return Ok(Vec::new());
        }
        let rows =
            rest(sqlx::query(read).bind(queue)).fetch_all(&self.pool).await.map_err(classify)?;
        rows.iter().map(payout_row).collect()
    }
}

/// A PostgreSQL statement with its arguments.
type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

crate::pipeline_port::pipeline_port!(
    PgStore,
    pg_in_list,
    text_list,
    "FOR SHARE",
    live_lines_from,
    pg_amount,
    Amount::to_string,
    {
        async fn requested_in_turn(&self, limit: u32) -> Result<Vec<Payout>, StoreError> {
            // The turns first, read as far as the limit reaches, then those rows by key.
            let queue: Vec<String> = sqlx::query_scalar(crate::pg_claim::RANK_REQUESTED_SQL)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .map_err(classify)?;
            self.read_ranked(queue, crate::pg_claim::READ_REQUESTED_SQL, |q| q).await
        }

        async fn approved_in(
            &self,
            assets: &[AssetCode],
            limit: u32,
        ) -> Result<Vec<Payout>, StoreError> {
            let assets: Vec<String> = assets.iter().map(|a| a.as_str().to_owned()).collect();
            let queue: Vec<String> = sqlx::query_scalar(crate::pg_claim::RANK_APPROVED_SQL)
                .bind(&assets)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .map_err(classify)?;
            self.read_ranked(queue, crate::pg_claim::READ_RANKED_SQL, |q| {
                q.bind(assets).bind(i64::from(limit))
            })
            .await
        }

        async fn destination_volume_since(
            &self,
            asset: &AssetCode,
            destination: &Destination,
            since_ms: i64,
        ) -> Result<Amount, StoreError> {
            let sum: String = sqlx::query_scalar(VOLUME_TO_DESTINATION)
                .bind(asset.as_str())
                .bind(destination.to_string())
                .bind(since_ms)
                .fetch_one(&self.pool)
                .await
                .map_err(classify)?;
            volume(&sum)
        }

        async fn settle_attempts(
            &self,
            settlements: &[AttemptSettlement],
        ) -> Result<Vec<TransitionOutcome>, StoreError> {
            if settlements.is_empty() {
                return Ok(Vec::new());
            }
            for s in settlements {
                rows::assert_settlement(s)?;
            }
            let mut tx = self.pool.begin().await.map_err(classify)?;
            let together = crate::pg_settle::settle_together(&mut tx, settlements).await?;
            let mut outcomes = Vec::with_capacity(settlements.len());
            for (s, outcome) in settlements.iter().zip(together) {
                let outcome = match outcome {
                    Some(outcome) => outcome,
                    None => shared_sql::settle_one_of_many!(
                        tx,
                        s,
                        concat!(shared_sql::await_next_attempt_returning!(), payout_columns!(""))
                    ),
                };
                outcomes.push(outcome);
            }
            tx.commit().await.map_err(classify)?;
            Ok(outcomes)
        }

        async fn create_first_attempt_within_caps(
            &self,
            payout: &Payout,
            attempt: &Attempt,
            event: &NewEvent,
            caps: &CapCheck,
        ) -> Result<FirstAttempt, StoreError> {
            let mut tx = self.pool.begin().await.map_err(classify)?;
            // The account's key, then the destination's: one order everywhere, so no two creates wait
            // on each other in a cycle (EVM signing sessions lock other keys: their assets differ).
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0)), pg_advisory_xact_lock(hashtextextended($2, 0))")
                .bind(rows::cap_account_lock_key(&payout.asset))
                .bind(rows::cap_lock_key(&payout.asset, &payout.destination))
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            let to_destination: String = sqlx::query_scalar(VOLUME_TO_DESTINATION)
                .bind(payout.asset.as_str())
                .bind(payout.destination.to_string())
                .bind(caps.since_ms)
                .fetch_one(&mut *tx)
                .await
                .map_err(classify)?;
            let of_account: String = sqlx::query_scalar(VOLUME_OF_ASSET)
                .bind(payout.asset.as_str())
                .bind(caps.since_ms)
                .fetch_one(&mut *tx)
                .await
                .map_err(classify)?;
            let reading = CapReading {
                reviewed: shared_sql::reviewed_in!(&mut *tx, caps),
                to_destination: volume(&to_destination)?,
                of_account: volume(&of_account)?,
            };
            create_first_under_caps(tx, payout, attempt, event, caps, &reading).await
        }

        async fn awaiting_next_attempt_in(
            &self,
            turns: &[AttemptTurn],
            limit: u32,
        ) -> Result<Vec<(Payout, u32)>, StoreError> {
            let assets: Vec<&str> = turns.iter().map(|t| t.asset.as_str()).collect();
            let (from, to): (Vec<i64>, Vec<i64>) = turns
                .iter()
                .map(|t| (i64::from(t.attempt_no_min), i64::from(t.attempt_no_max)))
                .unzip();
            // PostgreSQL joins the turns as three arrays (SQLite reads them from one JSON text).
            let rows = sqlx::query(concat!(
                "SELECT ",
                payout_columns!("p."),
                ", p.next_attempt_no FROM payouts p JOIN UNNEST($1::text[], $2::bigint[], $3::bigint[]) AS t(asset, lo, hi) ",
                "ON p.asset = t.asset AND p.next_attempt_no BETWEEN t.lo AND t.hi ",
                "WHERE p.next_attempt_no IS NOT NULL AND p.status = 'processing' ORDER BY p.id LIMIT $4"
            ))
            .bind(&assets)
            .bind(&from)
            .bind(&to)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(classify)?;
            rows.iter().map(rows::payout_awaiting_row).collect()
        }
    }
);
