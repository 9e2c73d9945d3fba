//! The `Store` port on both databases from one macro: every method whose statement and code are the same on PostgreSQL and SQLite is written here once; each store expands it with its own modules, which hold only what the databases do differently (a deposit's and a payout's intake under their locks, a batch's intake, how a balance's money is read, the ledger audit's sums).

/// `$db` is the store's own module (`pg`, `sqlite`: its write transaction, intake, transition and
/// audit), `$intake` its batch intake module, `$balances` its statement reading a merchant's
/// balances as text (PostgreSQL casts NUMERIC, SQLite stores padded text), `$now_ms` its statement
/// reading the server's clock in milliseconds since the Unix epoch.
macro_rules! store_port {
    ($store:ty, $db:ident, $intake:ident, $balances:expr, $now_ms:expr) => {
        #[async_trait::async_trait]
        impl payoutd_engine::DatabaseTime for $store {
            async fn database_now_ms(&self) -> Result<i64, StoreError> {
                sqlx::query_scalar($now_ms).fetch_one(&self.pool).await.map_err(crate::classify)
            }
        }

        #[async_trait::async_trait]
        impl payoutd_engine::Store for $store {
            async fn ping(&self) -> Result<(), StoreError> {
                sqlx::query("SELECT 1").execute(&self.pool).await.map_err(crate::classify)?;
                Ok(())
            }

            async fn create_merchant(
                &self,
                id: &MerchantId,
                name: &str,
                key_hash: &ApiKeyHash,
                at_ms: i64,
            ) -> Result<(), StoreError> {
                crate::merchants::$db::create_merchant(self, id, name, key_hash, at_ms).await
            }

            async fn merchant_by_key_hash(
                &self,
                key_hash: &ApiKeyHash,
            ) -> Result<Option<MerchantId>, StoreError> {
                crate::merchants::$db::merchant_by_key_hash(self, key_hash).await
            }

            async fn add_api_key(
                &self,
                merchant: &MerchantId,
                key_hash: &ApiKeyHash,
                at_ms: i64,
            ) -> Result<bool, StoreError> {
                crate::merchants::$db::add_api_key(self, merchant, key_hash, at_ms).await
            }

            async fn revoke_api_key(&self, id: &ApiKeyId, at_ms: i64) -> Result<bool, StoreError> {
                crate::merchants::$db::revoke_api_key(self, id, at_ms).await
            }

            async fn api_keys(&self, merchant: &MerchantId) -> Result<Vec<ApiKeyInfo>, StoreError> {
                crate::merchants::$db::api_keys(self, merchant).await
            }

            async fn record_deposit(&self, new: &NewDeposit) -> Result<DepositOutcome, StoreError> {
                crate::$db::record_deposit(self, new).await
            }

            async fn payout_by_key(
                &self,
                merchant: &MerchantId,
                key: &PayoutKey,
            ) -> Result<Option<Payout>, StoreError> {
                let mut conn = self.pool.acquire().await.map_err(crate::classify)?;
                crate::shared_reads::payout_by_key!(&mut *conn, merchant, key)
            }

            async fn merchant_and_payout_by_key(
                &self,
                key_hash: &ApiKeyHash,
                key: &PayoutKey,
            ) -> Result<Option<(MerchantId, Option<Payout>)>, StoreError> {
                let row = sqlx::query(crate::shared_reads::SELECT_KEY_MERCHANT_AND_PAYOUT)
                    .bind(key_hash.as_str())
                    .bind(key.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                row.as_ref().map(crate::rows::key_merchant_and_payout_row).transpose()
            }

            async fn insert_payout(
                &self,
                new: &NewPayout,
            ) -> Result<InsertPayoutOutcome, StoreError> {
                crate::$db::insert_payout(self, new).await
            }

            async fn payout(
                &self,
                merchant: &MerchantId,
                id: &PayoutId,
            ) -> Result<Option<Payout>, StoreError> {
                let row = sqlx::query(crate::shared_reads::SELECT_PAYOUT_BY_ID)
                    .bind(merchant.as_str())
                    .bind(id.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                row.as_ref().map(crate::rows::payout_row).transpose()
            }

            async fn list_payouts(
                &self,
                merchant: &MerchantId,
                q: &PayoutQuery,
            ) -> Result<Vec<Payout>, StoreError> {
                let rows = sqlx::query(crate::shared_reads::LIST_PAYOUTS)
                    .bind(merchant.as_str())
                    .bind(q.key.as_ref().map(|k| k.as_str()))
                    .bind(q.status.map(|s| s.as_str()))
                    .bind(q.before.as_ref().map(|id| id.as_str()))
                    .bind(i64::from(q.limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                rows.iter().map(crate::rows::payout_row).collect()
            }

            async fn transition_payout(
                &self,
                t: &PayoutTransition,
            ) -> Result<TransitionOutcome, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                let outcome = crate::$db::apply_transition(&mut tx, t).await?;
                if let TransitionOutcome::Applied(_) = outcome {
                    tx.commit().await.map_err(crate::classify)?;
                }
                Ok(outcome)
            }

            async fn insert_payouts(
                &self,
                lines: &[NewPayout],
            ) -> Result<Vec<InsertPayoutOutcome>, StoreError> {
                crate::$intake::insert_payouts(self, lines).await
            }

            async fn payouts_by_keys(
                &self,
                merchant: &MerchantId,
                keys: &[PayoutKey],
            ) -> Result<Vec<Payout>, StoreError> {
                crate::$intake::payouts_by_keys(self, merchant, keys).await
            }

            async fn insert_transfer(
                &self,
                new: &NewTransfer,
            ) -> Result<TransferOutcome, StoreError> {
                crate::$db::transfers::insert_transfer(self, new).await
            }

            async fn transfer(
                &self,
                merchant: &MerchantId,
                id: &TransferId,
            ) -> Result<Option<Transfer>, StoreError> {
                let row = sqlx::query(crate::shared_reads::SELECT_TRANSFER_BY_ID)
                    .bind(id.as_str())
                    .bind(merchant.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                row.map(|row| crate::rows::transfer_row!(&row)).transpose()
            }

            async fn open_batch(&self, batch: &NewBatch) -> Result<BatchId, StoreError> {
                crate::batches::$db::open_batch(self, batch).await
            }

            async fn save_batch_lines(
                &self,
                id: &BatchId,
                lines: BatchLines<'_>,
            ) -> Result<(), StoreError> {
                crate::batches::$db::save_batch_lines(self, id, lines).await
            }

            async fn batch(
                &self,
                merchant: &MerchantId,
                id: &BatchId,
                page: BatchPage,
            ) -> Result<Option<BatchView>, StoreError> {
                crate::batches::$db::batch(self, merchant, id, page).await
            }

            async fn count_open_incidents_by_kind(&self) -> Result<Vec<(String, u64)>, StoreError> {
                let rows = sqlx::query(crate::shared_sql::OPEN_INCIDENTS_BY_KIND)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                rows.iter()
                    .map(|r| {
                        let n: i64 = r.try_get("n").map_err(crate::classify)?;
                        Ok((
                            r.try_get("kind").map_err(crate::classify)?,
                            u64::try_from(n)
                                .map_err(|e| StoreError::Corrupt(format!("count: {e}")))?,
                        ))
                    })
                    .collect()
            }

            async fn balances(&self, merchant: &MerchantId) -> Result<Vec<Balance>, StoreError> {
                let rows = sqlx::query($balances)
                    .bind(merchant.as_str())
                    .fetch_all(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                rows.iter().map(crate::rows::balance_row).collect()
            }

            async fn count_payouts_by_status(
                &self,
            ) -> Result<Vec<(PayoutStatus, u64)>, StoreError> {
                let rows = sqlx::query(crate::shared_sql::PAYOUTS_BY_STATUS)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                rows.iter().map(crate::shared_sql::status_count).collect()
            }

            async fn count_live_payouts_by_status(
                &self,
            ) -> Result<Vec<(PayoutStatus, u64)>, StoreError> {
                let rows = sqlx::query(crate::shared_sql::LIVE_PAYOUTS_BY_STATUS)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                rows.iter().map(crate::shared_sql::status_count).collect()
            }

            async fn count_events(
                &self,
                merchant: &MerchantId,
                event_type: EventType,
            ) -> Result<u64, StoreError> {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM events WHERE merchant_id = $1 AND type = $2",
                )
                .bind(merchant.as_str())
                .bind(event_type.as_str())
                .fetch_one(&self.pool)
                .await
                .map_err(crate::classify)?;
                Ok(n as u64)
            }

            async fn audit_ledger(&self) -> Result<LedgerAudit, StoreError> {
                crate::$db::audit_ledger(self).await
            }
        }
    };
}
pub(crate) use store_port;
