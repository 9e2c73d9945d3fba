//! The EVM part of the SQLite store (hot wallets, nonce counters, per-wallet cursors) and its signing session: the single writer slot and one `BEGIN IMMEDIATE` transaction per session.

use super::*;
use crate::sqlite::apply_transition;

/// Owns the store's writer slot and a `BEGIN IMMEDIATE` transaction from `begin_signing` to
/// `commit`. SQLite has no `FOR UPDATE SKIP LOCKED` and needs none: while a session lives no
/// other writer (in this process or another on the file) can claim a payout or take a nonce.
/// A consequence: the task holding a session must not call the store's own writes until it
/// commits or drops the session, or it waits for itself.
pub(super) struct SqliteSigningSession {
    // Declared before the guard so the rollback is queued before the writer slot is released.
    tx: Transaction<'static, Sqlite>,
    _writer: OwnedMutexGuard<()>,
    wallet_id: String,
    /// The counter as read in this transaction; `commit` checks nobody moved it.
    start_nonce: u64,
    next_nonce: u64,
}

impl SqliteSigningSession {
    /// A session owning the writer slot and `tx`, the wallet's counter read as `next`.
    pub(super) fn open(
        tx: Transaction<'static, Sqlite>,
        writer: OwnedMutexGuard<()>,
        wallet_id: &str,
        next: u64,
    ) -> SqliteSigningSession {
        SqliteSigningSession {
            tx,
            _writer: writer,
            wallet_id: wallet_id.to_owned(),
            start_nonce: next,
            next_nonce: next,
        }
    }
}

#[async_trait]
impl SigningSession for SqliteSigningSession {
    fn next_nonce(&self) -> u64 {
        self.next_nonce
    }

    async fn claim_approved(
        &mut self,
        assets: &[AssetCode],
        limit: u32,
    ) -> Result<Vec<Payout>, StoreError> {
        let rows = sqlx::query(shared_reads::fair_select!(
            "status = 'approved' AND asset IN (SELECT value FROM json_each(?1))",
            "?2"
        ))
        .bind(json_array(assets.iter().map(AssetCode::as_str)))
        .bind(i64::from(limit))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(classify)?;
        rows.iter().map(payout_row).collect()
    }

    async fn record_signed(
        &mut self,
        payout: &Payout,
        attempt: &Attempt,
        event: &NewEvent,
    ) -> Result<(), StoreError> {
        rows::assert_signed_attempt(payout, attempt, event, &self.wallet_id, self.next_nonce);
        // The attempt goes in first: a second live attempt for the payout is refused by the
        // partial unique index (I3), whatever state the caller believes the payout is in.
        // The EVM (wallet, nonce) slot, a CHECK on PostgreSQL, is always set here.
        let inserted = shared_sql::bind_new_attempt!(
            sqlx::query(shared_sql::INSERT_SIGNED_ATTEMPT),
            attempt,
            rows::attempt_no(attempt)?
        )
        .execute(&mut *self.tx)
        .await
        .map_err(classify)?
        .rows_affected();
        assert_eq!(
            inserted, 1,
            "an EVM attempt holds no durable nonce value: its insert cannot be skipped"
        );
        insert_attempt_tx(&mut self.tx, &attempt.id, &attempt.txs[0]).await?;
        let to_processing = shared_sql::to_processing(payout, event);
        match apply_transition(&mut self.tx, &to_processing).await? {
            TransitionOutcome::Applied(_) => {}
            // No other writer runs during the session; anything else was never claimed here.
            TransitionOutcome::Stale => {
                return Err(StoreError::Invariant(format!(
                    "payout {} is not approved at version {}",
                    payout.id, payout.version
                )));
            }
        }
        self.next_nonce += 1;
        Ok(())
    }

    async fn lock_destinations(
        &mut self,
        _destinations: &[(AssetCode, Destination)],
    ) -> Result<(), StoreError> {
        // The session owns the single writer slot: no other session can sign until it ends.
        Ok(())
    }

    async fn cap_reading(
        &mut self,
        payout: &Payout,
        caps: &CapCheck,
    ) -> Result<CapReading, StoreError> {
        let (reviewed, since_ms) = (shared_sql::reviewed_in!(&mut *self.tx, caps), caps.since_ms);
        let to_destination: Vec<String> = sqlx::query_scalar(AMOUNTS_TO_DESTINATION)
            .bind(payout.asset.as_str())
            .bind(payout.destination.to_string())
            .bind(since_ms)
            .fetch_all(&mut *self.tx)
            .await
            .map_err(classify)?;
        let of_wallet: Vec<String> = sqlx::query_scalar(AMOUNTS_OF_WALLET)
            .bind(&self.wallet_id)
            .bind(payout.asset.as_str())
            .bind(since_ms)
            .fetch_all(&mut *self.tx)
            .await
            .map_err(classify)?;
        Ok(CapReading {
            reviewed,
            to_destination: sum(to_destination)?,
            of_account: sum(of_wallet)?,
        })
    }

    async fn claim_awaiting_next_attempt(
        &mut self,
        assets: &[AssetCode],
        limit: u32,
    ) -> Result<Vec<(Payout, u32)>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            payout_columns!(""),
            ", next_attempt_no FROM payouts WHERE next_attempt_no IS NOT NULL AND status = 'processing' \
             AND asset IN (SELECT value FROM json_each(?1)) ORDER BY id LIMIT ?2"
        ))
        .bind(json_array(assets.iter().map(AssetCode::as_str)))
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
        Ok(())
    }

    async fn transition(&mut self, transition: &PayoutTransition) -> Result<(), StoreError> {
        crate::evm_line_port::session_transition(
            apply_transition(&mut self.tx, transition).await?,
            transition,
        )
    }

    async fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        crate::evm_line_port::advance_counter!(
            self.tx,
            &self.wallet_id,
            self.start_nonce,
            self.next_nonce
        );
        let SqliteSigningSession { tx, _writer, .. } = *self;
        // The writer slot is released only after COMMIT returns.
        tx.commit().await.map_err(classify)
    }
}

crate::evm_line_port::evm_line_port!(SqliteStore, sqlite, {
    /// Never `None`: sessions queue for the writer slot instead of skipping a busy wallet.
    async fn begin_signing(
        &self,
        wallet_id: &str,
    ) -> Result<Option<Box<dyn SigningSession>>, StoreError> {
        let writer = self.write_lock.clone().lock_owned().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(classify)?;
        let next: Option<i64> =
            sqlx::query_scalar("SELECT next_nonce FROM hot_wallets WHERE id = ?1")
                .bind(wallet_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(classify)?;
        let next =
            next.ok_or_else(|| StoreError::Invariant(format!("no hot wallet {wallet_id}")))?;
        let next = u64::try_from(next)
            .map_err(|e| StoreError::Corrupt(format!("hot wallet next_nonce: {e}")))?;
        Ok(Some(Box::new(SqliteSigningSession::open(tx, writer, wallet_id, next))))
    }
});
