//! The EVM part of the PostgreSQL store (hot wallets, nonce counters, per-wallet cursors) and its signing session: a locked wallet row, signed payouts batched and written at commit.

use super::*;
use crate::pg::apply_transition;
use crate::pg_claim;
use std::collections::HashSet;

/// Largest batched statement `commit` sends, in bytes of row data. sqlx sets no TCP_NODELAY, and
/// over TLS a statement larger than one TLS record (16 KiB) leaves in two writes: the second waits
/// for the server's delayed ACK (~40 ms, measured). Statements under one record never stall.
const SIGNED_STATEMENT_BYTES_MAX: usize = 12 * 1024;
/// Fixed part of one signed payout's largest row (ids, numbers, array framing), on top of its
/// raw bytes or its event payload.
const SIGNED_ROW_OVERHEAD_BYTES: usize = 160;

/// One `record_signed`, checked and kept in memory until `commit` writes the whole batch.
struct SignedRow {
    attempt: Attempt,
    /// The payout's asset, destination and amount: what the session's cap readings count.
    asset: AssetCode,
    destination: Destination,
    amount: Amount,
    merchant_id: String,
    from_version: i64,
    event: NewEvent,
}

impl SignedRow {
    /// An upper estimate of this payout's share of the largest of the batched statements.
    fn statement_bytes(&self) -> usize {
        SIGNED_ROW_OVERHEAD_BYTES + self.attempt.txs[0].raw.len().max(self.event.payload_json.len())
    }
}

/// Holds `FOR UPDATE` on the wallet row from `begin_signing` to `commit`: another worker's
/// `begin_signing` skips it, so this session alone hands out the wallet's nonces. Signed payouts
/// are written at `commit`, one statement per table per chunk instead of four per payout (the
/// signing pass is bound by database round trips, not by the chain).
pub(super) struct PgSigningSession {
    tx: Transaction<'static, Postgres>,
    wallet_id: String,
    /// The counter as read under the lock; `commit` checks nobody moved it.
    start_nonce: u64,
    next_nonce: u64,
    signed: Vec<SignedRow>,
    /// Next attempts written at once by `record_next_attempt` (each took one nonce).
    next_attempts: u64,
}

impl PgSigningSession {
    /// A session on the wallet row `tx` holds locked, its counter read as `next`.
    pub(super) fn open(
        tx: Transaction<'static, Postgres>,
        wallet_id: &str,
        next: u64,
    ) -> PgSigningSession {
        PgSigningSession {
            tx,
            wallet_id: wallet_id.to_owned(),
            start_nonce: next,
            next_nonce: next,
            signed: Vec::new(),
            next_attempts: 0,
        }
    }
    /// Attempts, their original transactions, payouts approved -> processing and their events, for
    /// one chunk of the batch. Any refusal (I3's index, a payout no longer approved at its version)
    /// fails the statement and with it the whole session: nothing of it is stored.
    async fn write_signed(&mut self, batch: &[SignedRow]) -> Result<(), StoreError> {
        let c = SignedColumns::of(batch)?;
        // The attempts go in first: a second live attempt for a payout is refused by the partial
        // unique index (I3), whatever state the caller believes the payout is in.
        sqlx::query(
            "INSERT INTO attempts (id, payout_id, attempt_no, status, rail, hot_wallet_id, nonce, last_sent_at_ms, \
             created_at_ms, updated_at_ms) \
             SELECT a, p, n, 'signed', $7, $8, nc, 0, c, u \
             FROM UNNEST($1::text[], $2::text[], $3::int4[], $4::int8[], $5::int8[], $6::int8[]) AS r(a, p, n, nc, c, u)",
        )
        .bind(&c.attempt_ids)
        .bind(&c.payout_ids)
        .bind(&c.attempt_nos)
        .bind(&c.nonces)
        .bind(&c.created)
        .bind(&c.updated)
        // The session is the EVM part of the store: a wallet's line of nonces.
        .bind(payoutd_domain::attempt::RAIL_EVM)
        .bind(&self.wallet_id)
        .execute(&mut *self.tx)
        .await
        .map_err(classify)?;
        sqlx::query(
            "INSERT INTO attempt_transactions (tx_hash, attempt_id, kind, raw, max_fee_per_gas, max_priority_fee_per_gas, created_at_ms) \
             SELECT h, a, 'original', b, f::numeric, pf::numeric, c \
             FROM UNNEST($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::int8[]) AS r(h, a, b, f, pf, c)",
        )
        .bind(&c.hashes)
        .bind(&c.attempt_ids)
        .bind(&c.raws)
        .bind(&c.max_fees)
        .bind(&c.priority_fees)
        .bind(&c.tx_created)
        .execute(&mut *self.tx)
        .await
        .map_err(classify)?;
        self.move_signed_payouts(batch, &c).await?;
        let events: Vec<&NewEvent> = batch.iter().map(|row| &row.event).collect();
        crate::pg::insert_events(&mut self.tx, &events).await?;
        Ok(())
    }
}

impl PgSigningSession {
    /// Every signed row's payout from `approved` to `processing`, conditional on status and
    /// version (I5). Claimed payouts are locked by this transaction, so a miss means a payout this
    /// session never claimed: an invariant breach, not a race.
    async fn move_signed_payouts(
        &mut self,
        batch: &[SignedRow],
        c: &SignedColumns<'_>,
    ) -> Result<(), StoreError> {
        let moved: Vec<String> = sqlx::query_scalar(
            "UPDATE payouts p SET status = 'processing', version = p.version + 1, updated_at_ms = r.at \
             FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::int8[]) AS r(id, m, v, at) \
             WHERE p.id = r.id AND p.merchant_id = r.m AND p.status = 'approved' AND p.version = r.v RETURNING p.id",
        )
        .bind(&c.payout_ids)
        .bind(&c.merchants)
        .bind(&c.versions)
        .bind(&c.event_at)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(classify)?;
        if moved.len() != batch.len() {
            let missed = batch
                .iter()
                .find(|r| !moved.iter().any(|m| m == r.attempt.payout_id.as_str()))
                .map(|r| (&r.attempt.payout_id, r.from_version));
            let (id, version) = missed.expect("fewer payouts moved than rows, so one row missed");
            return Err(StoreError::Invariant(format!(
                "payout {id} is not approved at version {version}"
            )));
        }
        Ok(())
    }
}

/// A signing session's rows as the columns PostgreSQL's UNNEST takes, one array per column.
struct SignedColumns<'a> {
    attempt_ids: Vec<&'a str>,
    payout_ids: Vec<&'a str>,
    attempt_nos: Vec<i32>,
    nonces: Vec<i64>,
    created: Vec<i64>,
    updated: Vec<i64>,
    hashes: Vec<&'a str>,
    raws: Vec<&'a [u8]>,
    max_fees: Vec<String>,
    priority_fees: Vec<String>,
    tx_created: Vec<i64>,
    merchants: Vec<&'a str>,
    versions: Vec<i64>,
    event_at: Vec<i64>,
}

impl<'a> SignedColumns<'a> {
    fn of(batch: &'a [SignedRow]) -> Result<SignedColumns<'a>, StoreError> {
        let n = batch.len();
        let mut c = SignedColumns {
            attempt_ids: Vec::with_capacity(n),
            payout_ids: Vec::with_capacity(n),
            attempt_nos: Vec::with_capacity(n),
            nonces: Vec::with_capacity(n),
            created: Vec::with_capacity(n),
            updated: Vec::with_capacity(n),
            hashes: Vec::with_capacity(n),
            raws: Vec::with_capacity(n),
            max_fees: Vec::with_capacity(n),
            priority_fees: Vec::with_capacity(n),
            tx_created: Vec::with_capacity(n),
            merchants: Vec::with_capacity(n),
            versions: Vec::with_capacity(n),
            event_at: Vec::with_capacity(n),
        };
        for row in batch {
            let (a, t) = (&row.attempt, &row.attempt.txs[0]);
            c.attempt_ids.push(a.id.as_str());
            c.payout_ids.push(a.payout_id.as_str());
            c.attempt_nos.push(
                i32::try_from(a.attempt_no)
                    .map_err(|e| StoreError::Invariant(format!("attempt_no: {e}")))?,
            );
            c.nonces.push(rows::to_db_int(
                a.slot.as_evm().expect("a signing session signs EVM attempts").nonce,
                "nonce",
            )?);
            c.created.push(a.created_at_ms);
            c.updated.push(a.updated_at_ms);
            c.hashes.push(t.hash.as_str());
            c.raws.push(t.raw.as_slice());
            let fees = t.fees.expect("an EVM transaction carries its fee bid");
            c.max_fees.push(fees.max_fee_per_gas.to_string());
            c.priority_fees.push(fees.max_priority_fee_per_gas.to_string());
            c.tx_created.push(t.created_at_ms);
            c.merchants.push(row.merchant_id.as_str());
            c.versions.push(row.from_version);
            c.event_at.push(row.event.at_ms);
        }
        Ok(c)
    }
}

/// Splits `rows` into runs whose estimated statement size stays under `bytes_max` (at least one row each).
fn chunks_under(rows: &[SignedRow], bytes_max: usize) -> Vec<&[SignedRow]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, row) in rows.iter().enumerate() {
        let size = row.statement_bytes();
        if i > start && bytes + size > bytes_max {
            chunks.push(&rows[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < rows.len() {
        chunks.push(&rows[start..]);
    }
    chunks
}

#[async_trait]
impl SigningSession for PgSigningSession {
    fn next_nonce(&self) -> u64 {
        self.next_nonce
    }

    async fn claim_approved(
        &mut self,
        assets: &[AssetCode],
        limit: u32,
    ) -> Result<Vec<Payout>, StoreError> {
        let assets: Vec<String> = assets.iter().map(|a| a.as_str().to_owned()).collect();
        let limit = i64::from(limit);
        let mut claimed: Vec<Payout> = Vec::new();
        // A narrow window first (this session's turns and one racing session's); the wide one only
        // when the narrow one held fewer free turns than the limit and the queue goes on.
        for window in
            [limit * pg_claim::CLAIM_WINDOW_FIRST, limit * pg_claim::CLAIM_RACING_SESSIONS_MAX]
        {
            // The turns are read apart from the lock: a locking read joined to the ranking is
            // planned by PostgreSQL as a read of the whole approved queue.
            let queue: Vec<String> = sqlx::query_scalar(pg_claim::RANK_APPROVED_SQL)
                .bind(&assets)
                .bind(window)
                .fetch_all(&mut *self.tx)
                .await
                .map_err(classify)?;
            // Rows this session locked already are not skipped by `SKIP LOCKED`: left out here.
            let held: HashSet<&str> = claimed.iter().map(|p| p.id.as_str()).collect();
            let fresh: Vec<&str> =
                queue.iter().map(String::as_str).filter(|id| !held.contains(id)).collect();
            // Locked rows (another wallet's session) are skipped before the limit: that session
            // takes the first turns, this one the next.
            let rows = sqlx::query(pg_claim::LOCK_RANKED_SQL)
                .bind(&fresh)
                .bind(&assets)
                .bind(limit - claimed.len() as i64)
                .fetch_all(&mut *self.tx)
                .await
                .map_err(classify)?;
            for row in &rows {
                claimed.push(payout_row(row)?);
            }
            if claimed.len() as i64 >= limit || (queue.len() as i64) < window {
                break;
            }
        }
        Ok(claimed)
    }

    async fn record_signed(
        &mut self,
        payout: &Payout,
        attempt: &Attempt,
        event: &NewEvent,
    ) -> Result<(), StoreError> {
        rows::assert_signed_attempt(payout, attempt, event, &self.wallet_id, self.next_nonce);
        assert!(
            self.signed.iter().all(|r| r.attempt.payout_id != payout.id),
            "payout {} recorded twice in one signing session",
            payout.id
        );
        self.signed.push(SignedRow {
            attempt: attempt.clone(),
            asset: payout.asset.clone(),
            destination: payout.destination,
            amount: payout.amount,
            merchant_id: payout.merchant_id.as_str().to_owned(),
            from_version: payout.version,
            event: event.clone(),
        });
        self.next_nonce += 1;
        Ok(())
    }

    async fn lock_destinations(
        &mut self,
        destinations: &[(AssetCode, Destination)],
    ) -> Result<(), StoreError> {
        if destinations.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> =
            destinations.iter().map(|(asset, to)| rows::cap_lock_key(asset, to)).collect();
        // One statement, keys in one global order: a session waits for at most the sessions ahead of
        // it in that order, never in a cycle.
        sqlx::query(
            "SELECT count(pg_advisory_xact_lock(k)) FROM \
             (SELECT DISTINCT hashtextextended(x, 0) AS k FROM unnest($1::text[]) AS x ORDER BY k) AS ordered",
        )
        .bind(&keys)
        .fetch_one(&mut *self.tx)
        .await
        .map_err(classify)?;
        Ok(())
    }

    async fn cap_reading(
        &mut self,
        payout: &Payout,
        caps: &CapCheck,
    ) -> Result<CapReading, StoreError> {
        let (reviewed, since_ms) = (shared_sql::reviewed_in!(&mut *self.tx, caps), caps.since_ms);
        let to_destination: String = sqlx::query_scalar(VOLUME_TO_DESTINATION)
            .bind(payout.asset.as_str())
            .bind(payout.destination.to_string())
            .bind(since_ms)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(classify)?;
        let of_wallet: String = sqlx::query_scalar(VOLUME_OF_WALLET)
            .bind(&self.wallet_id)
            .bind(payout.asset.as_str())
            .bind(since_ms)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(classify)?;
        // The attempts this session signed are written at commit: they count as if written.
        let mut reading = CapReading {
            reviewed,
            to_destination: volume(&to_destination)?,
            of_account: volume(&of_wallet)?,
        };
        for row in self.signed.iter().filter(|r| r.asset == payout.asset) {
            // Saturating: an overflowing sum is over any cap anyway.
            reading.of_account = reading.of_account.checked_add(row.amount).unwrap_or(Amount::MAX);
            if row.destination == payout.destination {
                reading.to_destination =
                    reading.to_destination.checked_add(row.amount).unwrap_or(Amount::MAX);
            }
        }
        Ok(reading)
    }

    async fn claim_awaiting_next_attempt(
        &mut self,
        assets: &[AssetCode],
        limit: u32,
    ) -> Result<Vec<(Payout, u32)>, StoreError> {
        let assets: Vec<String> = assets.iter().map(|a| a.as_str().to_owned()).collect();
        let rows = sqlx::query(concat!(
            "SELECT ",
            payout_columns!(""),
            ", next_attempt_no FROM payouts WHERE next_attempt_no IS NOT NULL AND status = 'processing' AND asset = ANY($1)              ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED"
        ))
        .bind(&assets)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(classify)?;
        rows.iter().map(rows::payout_awaiting_row).collect()
    }

    async fn record_next_attempt(
        &mut self,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<(), StoreError> {
        rows::assert_next_attempt(payout, attempt, &self.wallet_id, self.next_nonce);
        shared_sql::write_next_attempt!(self.tx, payout, attempt);
        self.next_nonce += 1;
        self.next_attempts += 1;
        Ok(())
    }

    async fn transition(&mut self, transition: &PayoutTransition) -> Result<(), StoreError> {
        crate::evm_line_port::session_transition(
            apply_transition(&mut self.tx, transition).await?,
            transition,
        )
    }

    async fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        assert_eq!(
            self.start_nonce + self.signed.len() as u64 + self.next_attempts,
            self.next_nonce,
            "one nonce per signed attempt"
        );
        let signed = std::mem::take(&mut self.signed);
        for chunk in chunks_under(&signed, SIGNED_STATEMENT_BYTES_MAX) {
            self.write_signed(chunk).await?;
        }
        crate::evm_line_port::advance_counter!(
            self.tx,
            &self.wallet_id,
            self.start_nonce,
            self.next_nonce
        );
        self.tx.commit().await.map_err(classify)
    }
}

crate::evm_line_port::evm_line_port!(PgStore, pg, {
    async fn begin_signing(
        &self,
        wallet_id: &str,
    ) -> Result<Option<Box<dyn SigningSession>>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(classify)?;
        let locked: Option<i64> = sqlx::query_scalar(
            "SELECT next_nonce FROM hot_wallets WHERE id = $1 FOR UPDATE SKIP LOCKED",
        )
        .bind(wallet_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(classify)?;
        let Some(next) = locked else {
            // No row: either another worker holds the lock, or there is no such wallet.
            let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM hot_wallets WHERE id = $1")
                .bind(wallet_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(classify)?;
            return match exists {
                Some(_) => Ok(None),
                None => Err(StoreError::Invariant(format!("no hot wallet {wallet_id}"))),
            };
        };
        let next = u64::try_from(next)
            .map_err(|e| StoreError::Corrupt(format!("hot wallet next_nonce: {e}")))?;
        Ok(Some(Box::new(PgSigningSession::open(tx, wallet_id, next))))
    }
});
