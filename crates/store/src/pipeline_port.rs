//! The pipeline port on both databases from one macro: every method whose statement and code are the same on PostgreSQL and SQLite is written here once, and each store passes in the methods where the databases really differ (how a list is bound, how money is summed, how rows are locked).

/// `$store` implements `PipelineStore` with these shared methods and its own `$($own)*`. Writes go
/// through the store's `write_tx` or behind its `write_guard` (SQLite's one writer; nothing on
/// PostgreSQL, whose statements lock their rows themselves). A list of ids is bound as `$list`
/// makes it and tested with the SQL `$in_list!("$n")` writes for placeholder `$n`.
macro_rules! pipeline_port {
    ($store:ty, $in_list:ident, $list:path, { $($own:tt)* }) => {
        #[async_trait]
        impl PipelineStore for $store {
            $($own)*

            async fn release_leases(&self, attempt_ids: &[AttemptId]) -> Result<(), StoreError> {
                let ids = $list(attempt_ids.iter().map(AttemptId::as_str));
                let _guard = self.write_guard().await;
                sqlx::query(concat!(
                    "UPDATE attempts SET leased_until_ms = NULL WHERE id ",
                    $in_list!("$1")
                ))
                .bind(ids)
                .execute(&self.pool)
                .await
                .map_err(classify)?;
                Ok(())
            }

            async fn mark_broadcast_many(
                &self,
                attempt_ids: &[AttemptId],
                at_ms: i64,
            ) -> Result<u64, StoreError> {
                let ids = $list(attempt_ids.iter().map(AttemptId::as_str));
                let _guard = self.write_guard().await;
                let updated = sqlx::query(concat!(
                    "UPDATE attempts SET status = 'broadcast', last_sent_at_ms = $2, updated_at_ms = $2 \
                     WHERE status = 'signed' AND id ",
                    $in_list!("$1")
                ))
                .bind(ids)
                .bind(at_ms)
                .execute(&self.pool)
                .await
                .map_err(classify)?;
                Ok(updated.rows_affected())
            }

            async fn record_checked(
                &self,
                attempt_ids: &[AttemptId],
                at_ms: i64,
            ) -> Result<(), StoreError> {
                let ids = $list(attempt_ids.iter().map(AttemptId::as_str));
                let _guard = self.write_guard().await;
                let updated = sqlx::query(concat!(
                    "UPDATE attempts SET last_checked_at_ms = $2, leased_until_ms = NULL WHERE id ",
                    $in_list!("$1")
                ))
                .bind(ids)
                .bind(at_ms)
                .execute(&self.pool)
                .await
                .map_err(classify)?;
                // An update that must hit every one of the (distinct) attempts it names.
                if updated.rows_affected() != attempt_ids.len() as u64 {
                    return Err(StoreError::Invariant(format!(
                        "{} of {} attempts exist",
                        updated.rows_affected(),
                        attempt_ids.len()
                    )));
                }
                Ok(())
            }
            async fn payouts_in_status(
                &self,
                status: PayoutStatus,
                limit: u32,
            ) -> Result<Vec<Payout>, StoreError> {
                let rows = sqlx::query(shared_reads::fair_select!("status = $1", "$2"))
                    .bind(status.as_str())
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(classify)?;
                rows.iter().map(payout_row).collect()
            }

            async fn payout_by_id(&self, id: &PayoutId) -> Result<Option<Payout>, StoreError> {
                let row = sqlx::query(shared_reads::SELECT_PAYOUT_BY_ID_ALONE)
                    .bind(id.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(classify)?;
                row.as_ref().map(payout_row).transpose()
            }

            async fn attempts_of(&self, payout_id: &PayoutId) -> Result<Vec<Attempt>, StoreError> {
                let mut conn = self.pool.acquire().await.map_err(classify)?;
                let rows = sqlx::query(concat!(
                    "SELECT ",
                    attempt_columns!(),
                    " FROM attempts a WHERE a.payout_id = $1 ORDER BY a.attempt_no"
                ))
                .bind(payout_id.as_str())
                .fetch_all(&mut *conn)
                .await
                .map_err(classify)?;
                let attempts = rows.iter().map(attempt_row).collect::<Result<Vec<_>, _>>()?;
                let ids: Vec<String> = attempts.iter().map(|a| a.id.clone()).collect();
                let txs = txs_of(&mut conn, &ids).await?;
                rows::assemble_attempts(attempts, txs)
            }

            async fn mark_broadcast(
                &self,
                attempt_id: &AttemptId,
                at_ms: i64,
            ) -> Result<bool, StoreError> {
                debug_assert!(AttemptStatus::Signed.can_become(AttemptStatus::Broadcast));
                let _guard = self.write_guard().await;
                let updated = sqlx::query(
                    "UPDATE attempts SET status = 'broadcast', last_sent_at_ms = $2, updated_at_ms = $2 \
                     WHERE id = $1 AND status = 'signed'",
                )
                .bind(attempt_id.as_str())
                .bind(at_ms)
                .execute(&self.pool)
                .await
                .map_err(classify)?;
                Ok(updated.rows_affected() == 1)
            }

            async fn record_sent(
                &self,
                attempt_id: &AttemptId,
                at_ms: i64,
            ) -> Result<bool, StoreError> {
                let _guard = self.write_guard().await;
                let updated = sqlx::query(shared_sql::RECORD_SENT)
                    .bind(at_ms)
                    .bind(attempt_id.as_str())
                    .execute(&self.pool)
                    .await
                    .map_err(classify)?;
                Ok(updated.rows_affected() == 1)
            }

            async fn record_mined(
                &self,
                attempt_id: &AttemptId,
                block: u64,
                hash: &TxRef,
            ) -> Result<bool, StoreError> {
                let _guard = self.write_guard().await;
                let updated = sqlx::query(shared_sql::RECORD_MINED)
                    .bind(rows::to_db_int(block, "block")?)
                    .bind(hash.as_str())
                    .bind(attempt_id.as_str())
                    .execute(&self.pool)
                    .await
                    .map_err(classify)?;
                Ok(updated.rows_affected() == 1)
            }

            async fn clear_mined(&self, attempt_id: &AttemptId) -> Result<bool, StoreError> {
                let _guard = self.write_guard().await;
                let updated = sqlx::query(shared_sql::CLEAR_MINED)
                    .bind(attempt_id.as_str())
                    .execute(&self.pool)
                    .await
                    .map_err(classify)?;
                Ok(updated.rows_affected() == 1)
            }

            async fn settle_attempt(
                &self,
                s: &AttemptSettlement,
            ) -> Result<TransitionOutcome, StoreError> {
                rows::assert_settlement(s)?;
                let (_guard, mut tx) = self.write_tx().await?;
                shared_sql::settle_in!(
                    tx,
                    s,
                    concat!(shared_sql::await_next_attempt_returning!(), payout_columns!(""))
                )
            }

            async fn retry_payout(
                &self,
                transition: &PayoutTransition,
                next_attempt_no: u32,
            ) -> Result<TransitionOutcome, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                shared_sql::retry_in!(tx, transition, next_attempt_no)
            }

            async fn create_first_attempt(
                &self,
                payout: &Payout,
                attempt: &Attempt,
                event: &NewEvent,
            ) -> Result<bool, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                shared_sql::create_first_attempt_in!(tx, payout, attempt, event)
            }

            async fn create_next_attempt(
                &self,
                payout: &Payout,
                attempt: &Attempt,
            ) -> Result<bool, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                shared_sql::create_next_attempt_in!(tx, payout, attempt)
            }

            async fn record_reference(
                &self,
                attempt_id: &AttemptId,
                reference: &TxRef,
            ) -> Result<bool, StoreError> {
                let _guard = self.write_guard().await;
                let updated = sqlx::query(shared_sql::RECORD_REFERENCE)
                    .bind(reference.as_str())
                    .bind(attempt_id.as_str())
                    .execute(&self.pool)
                    .await
                    .map_err(classify)?;
                Ok(updated.rows_affected() == 1)
            }

            async fn ensure_signing_wallet(
                &self,
                chain: &str,
                address: &str,
            ) -> Result<String, StoreError> {
                let id = shared_sql::signing_wallet_id(chain, address);
                let _guard = self.write_guard().await;
                sqlx::query(shared_sql::ENSURE_SIGNING_WALLET)
                    .bind(&id)
                    .bind(chain)
                    .bind(address)
                    .execute(&self.pool)
                    .await
                    .map_err(classify)?;
                Ok(id)
            }

            async fn signing_wallet(
                &self,
                chain: &str,
                address: &str,
            ) -> Result<Option<String>, StoreError> {
                let id = shared_sql::signing_wallet_id(chain, address);
                sqlx::query_scalar(shared_sql::SIGNING_WALLET)
                    .bind(&id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(classify)
            }

            async fn event_exists(&self, id: &EventId) -> Result<bool, StoreError> {
                let found: Option<i32> = sqlx::query_scalar(shared_sql::EVENT_EXISTS)
                    .bind(id.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(classify)?;
                Ok(found.is_some())
            }
        }
    };
}
pub(crate) use pipeline_port;
