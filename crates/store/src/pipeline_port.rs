//! The pipeline port on both databases from one macro: every method whose statement and code are the same on PostgreSQL and SQLite is written here once, and each store passes in the methods where the databases really differ (how a list is bound, how money is summed, how rows are locked).

/// One conditional write behind the store's writer slot: `true` when it changed exactly one row
/// (its condition held), `false` when it changed none.
macro_rules! update_one {
    ($store:ident, $query:expr) => {{
        let _guard = $store.write_guard().await;
        let updated = $query.execute(&$store.pool).await.map_err(classify)?;
        Ok(updated.rows_affected() == 1)
    }};
}
pub(crate) use update_one;

/// `$store` implements `PipelineStore` with these shared methods and its own `$($own)*`. Writes go
/// through the store's `write_tx` or behind its `write_guard` (SQLite's one writer; nothing on
/// PostgreSQL, whose statements lock their rows themselves). A list of ids is bound as `$list`
/// makes it and tested with the SQL `$in_list!("$n")` writes for placeholder `$n`. `$share_lock`
/// keeps a read row from changing until the transaction ends (`FOR SHARE`; nothing under SQLite's
/// one writer). `$live_from!(filter, limit)` reads the live attempts in the sweep's order (each
/// store's own plan), and an amount is bound as `$amount_text` makes it for `$amount_param!("$n")`.
macro_rules! pipeline_port {
    (
        $store:ty,
        $in_list:ident,
        $list:path,
        $share_lock:literal,
        $live_from:ident,
        $amount_param:ident,
        $amount_text:path,
        { $($own:tt)* }
    ) => {
        impl $store {
            /// Leases those of `candidates` no other sweep leased since they were read; only
            /// those are returned (each store reads its candidates its own way).
            async fn lease_read(
                &self,
                candidates: Vec<(Attempt, Payout)>,
                now_ms: i64,
                lease_ms: i64,
            ) -> Result<Vec<(Attempt, Payout)>, StoreError> {
                if candidates.is_empty() {
                    return Ok(candidates);
                }
                let ids = $list(candidates.iter().map(|(a, _)| a.id.as_str()));
                let _guard = self.write_guard().await;
                let leased: Vec<String> = sqlx::query_scalar(concat!(
                    "UPDATE attempts SET leased_until_ms = $1 WHERE id ",
                    $in_list!("$2"),
                    " AND (leased_until_ms IS NULL OR leased_until_ms <= $3) RETURNING id"
                ))
                .bind(now_ms + lease_ms)
                .bind(ids)
                .bind(now_ms)
                .fetch_all(&self.pool)
                .await
                .map_err(classify)?;
                Ok(candidates
                    .into_iter()
                    .filter(|(a, _)| leased.iter().any(|id| id == a.id.as_str()))
                    .collect())
            }
        }

        #[async_trait]
        impl PipelineStore for $store {
            $($own)*

            async fn count_similar_payouts(
                &self,
                payout: &Payout,
                since_ms: i64,
            ) -> Result<u64, StoreError> {
                let n: i64 = sqlx::query_scalar(concat!(
                    "SELECT count(*) FROM payouts WHERE merchant_id = $1 AND asset = $2 \
                     AND destination = $3 AND amount = ",
                    $amount_param!("$4"),
                    " AND created_at_ms >= $5 AND id <> $6 \
                     AND status NOT IN ('canceled', 'rejected', 'failed')"
                ))
                .bind(payout.merchant_id.as_str())
                .bind(payout.asset.as_str())
                .bind(payout.destination.to_string())
                .bind($amount_text(&payout.amount))
                .bind(since_ms)
                .bind(payout.id.as_str())
                .fetch_one(&self.pool)
                .await
                .map_err(classify)?;
                Ok(n as u64)
            }

            async fn live_attempts(
                &self,
                limit: u32,
            ) -> Result<Vec<(Attempt, Payout)>, StoreError> {
                let mut conn = self.pool.acquire().await.map_err(classify)?;
                let rows = sqlx::query(concat!(
                    "SELECT ",
                    attempt_columns!(),
                    ", ",
                    payout_columns!("p."),
                    $live_from!("", "$1"),
                    "LIMIT $1"
                ))
                .bind(i64::from(limit))
                .fetch_all(&mut *conn)
                .await
                .map_err(classify)?;
                Ok(shared_sql::attempts_with_payouts!(conn, &rows))
            }

            async fn lease_live_attempts(
                &self,
                assets: &[AssetCode],
                limit: u32,
                now_ms: i64,
                lease_ms: i64,
            ) -> Result<Vec<(Attempt, Payout)>, StoreError> {
                let candidates = {
                    let mut conn = self.pool.acquire().await.map_err(classify)?;
                    let rows = sqlx::query(concat!(
                        "SELECT ",
                        attempt_columns!(),
                        ", ",
                        payout_columns!("p."),
                        $live_from!(
                            concat!(
                                " AND (a.leased_until_ms IS NULL OR a.leased_until_ms <= $1) \
                                 AND p.asset ",
                                $in_list!("$3")
                            ),
                            "$2"
                        ),
                        "LIMIT $2"
                    ))
                    .bind(now_ms)
                    .bind(i64::from(limit))
                    .bind($list(assets.iter().map(AssetCode::as_str)))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(classify)?;
                    shared_sql::attempts_with_payouts!(conn, &rows)
                };
                self.lease_read(candidates, now_ms, lease_ms).await
            }

            async fn add_attempt_tx(
                &self,
                attempt_id: &AttemptId,
                tx: &AttemptTx,
            ) -> Result<(), StoreError> {
                assert_ne!(
                    tx.kind,
                    TxKind::Original,
                    "an attempt's original transaction is stored when it is signed"
                );
                let (_guard, mut db) = self.write_tx().await?;
                // A settlement cannot end the attempt between this check and the insert.
                let status: Option<String> = sqlx::query_scalar(concat!(
                    "SELECT status FROM attempts WHERE id = $1 ",
                    $share_lock
                ))
                .bind(attempt_id.as_str())
                .fetch_optional(&mut *db)
                .await
                .map_err(classify)?;
                let status = status
                    .ok_or_else(|| StoreError::Invariant(format!("no attempt {attempt_id}")))?;
                let status = AttemptStatus::parse(&status)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                if !matches!(status, AttemptStatus::Signed | AttemptStatus::Broadcast) {
                    return Err(StoreError::Invariant(format!(
                        "attempt {attempt_id} is {status}; only a live attempt takes a new transaction"
                    )));
                }
                insert_attempt_tx(&mut db, attempt_id, tx).await?;
                db.commit().await.map_err(classify)
            }

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
                crate::pipeline_port::update_one!(
                    self,
                    sqlx::query(
                        "UPDATE attempts SET status = 'broadcast', last_sent_at_ms = $2, \
                         updated_at_ms = $2 WHERE id = $1 AND status = 'signed'",
                    )
                    .bind(attempt_id.as_str())
                    .bind(at_ms)
                )
            }

            async fn record_sent(
                &self,
                attempt_id: &AttemptId,
                at_ms: i64,
            ) -> Result<bool, StoreError> {
                crate::pipeline_port::update_one!(
                    self,
                    sqlx::query(shared_sql::RECORD_SENT).bind(at_ms).bind(attempt_id.as_str())
                )
            }

            async fn record_mined(
                &self,
                attempt_id: &AttemptId,
                block: u64,
                hash: &TxRef,
            ) -> Result<bool, StoreError> {
                let block = rows::to_db_int(block, "block")?;
                crate::pipeline_port::update_one!(
                    self,
                    sqlx::query(shared_sql::RECORD_MINED)
                        .bind(block)
                        .bind(hash.as_str())
                        .bind(attempt_id.as_str())
                )
            }

            async fn clear_mined(&self, attempt_id: &AttemptId) -> Result<bool, StoreError> {
                crate::pipeline_port::update_one!(self, sqlx::query(shared_sql::CLEAR_MINED).bind(attempt_id.as_str()))
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
                crate::pipeline_port::update_one!(
                    self,
                    sqlx::query(shared_sql::RECORD_REFERENCE)
                        .bind(reference.as_str())
                        .bind(attempt_id.as_str())
                )
            }

            async fn record_key_spent(
                &self,
                attempt_id: &AttemptId,
                at_ms: i64,
            ) -> Result<bool, StoreError> {
                crate::pipeline_port::update_one!(
                    self,
                    sqlx::query(shared_sql::RECORD_KEY_SPENT).bind(at_ms).bind(attempt_id.as_str())
                )
            }

            async fn reference_key(&self) -> Result<payoutd_domain::ReferenceKey, StoreError> {
                // One key per database, whichever port asks first.
                payoutd_engine::EvmLineStore::reference_key(self).await
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

/// The helpers the shared statement macros call by name, typed for one database (`$conn` its
/// connection, `$db` its driver): written once, expanded by each store's pipeline module.
macro_rules! typed_helpers {
    ($conn:ty, $db:ty) => {
        /// Inserts the incident and its event, if it has one. With a subject, nothing is inserted
        /// when an incident of the same kind about the same subject exists; returns whether it was
        /// inserted.
        async fn insert_incident(
            conn: &mut $conn,
            incident: &NewIncident,
            subject: Option<&str>,
        ) -> Result<bool, StoreError> {
            shared_incidents::insert_incident_on!(conn, incident, subject)
        }

        /// `create_first_attempt` inside an open transaction, committed here when it applies.
        async fn create_first_in(
            mut tx: Transaction<'_, $db>,
            payout: &Payout,
            attempt: &Attempt,
            event: &NewEvent,
        ) -> Result<bool, StoreError> {
            shared_sql::create_first_attempt_in!(tx, payout, attempt, event)
        }

        /// The first attempt under the caps just read in `tx`: nothing written when the payout
        /// would breach one (the transaction rolls back on drop), else `create_first_in`.
        async fn create_first_under_caps(
            tx: Transaction<'_, $db>,
            payout: &Payout,
            attempt: &Attempt,
            event: &NewEvent,
            caps: &CapCheck,
            reading: &CapReading,
        ) -> Result<FirstAttempt, StoreError> {
            if let Some(why) = caps.breach(payout.amount, reading) {
                return Ok(FirstAttempt::OverCap(why));
            }
            Ok(if create_first_in(tx, payout, attempt, event).await? {
                FirstAttempt::Created
            } else {
                FirstAttempt::Stale
            })
        }
    };
}
pub(crate) use typed_helpers;
