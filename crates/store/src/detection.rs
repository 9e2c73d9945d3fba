//! The detection port on both databases from one macro: reconciliation's cursors and lease, incidents (with the second payments they book), and the books a hot wallet is compared with. Each store expands it with its own module (`$db`: its write transaction and journal function) and its way of binding a list of hashes.

/// `$in_list` is the SQL that tests `t.tx_hash` against the list bound as `$1`; `$list` turns the
/// hashes into that bound value (PostgreSQL binds an array, SQLite a JSON array it reads with
/// `json_each`).
macro_rules! detection_store {
    ($store:ty, $db:ident, $in_list:literal, $list:path) => {
        #[async_trait]
        impl DetectionStore for $store {
            async fn rail_cursor(&self, name: &str) -> Result<Option<String>, StoreError> {
                crate::cursors::$db::rail_cursor(self, name).await
            }

            async fn advance_rail_cursor(
                &self,
                name: &str,
                from: Option<&str>,
                to: &str,
            ) -> Result<bool, StoreError> {
                crate::cursors::$db::advance_rail_cursor(self, name, from, to).await
            }

            async fn lease_detection(
                &self,
                scope: &str,
                now_ms: i64,
                until_ms: i64,
            ) -> Result<bool, StoreError> {
                crate::cursors::$db::lease_detection(self, scope, now_ms, until_ms).await
            }

            async fn release_detection(&self, scope: &str, until_ms: i64) -> Result<(), StoreError> {
                crate::cursors::$db::release_detection(self, scope, until_ms).await
            }

            async fn open_incident(&self, incident: &NewIncident) -> Result<(), StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                insert_incident(&mut tx, incident, None).await?;
                tx.commit().await.map_err(classify)
            }

            async fn open_incident_with_journals(
                &self,
                incident: &NewIncident,
                subject: &str,
                journals: &[payoutd_domain::Journal],
            ) -> Result<bool, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                shared_incidents::open_incident_with_journals_in!(
                    tx,
                    incident,
                    subject,
                    journals,
                    crate::$db::apply_journal
                )
            }

            async fn open_incident_awaiting_books(
                &self,
                incident: &NewIncident,
                subject: &str,
            ) -> Result<bool, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                shared_incidents::open_incident_awaiting_books_in!(tx, incident, subject)
            }

            async fn incidents_awaiting_books(
                &self,
                after: &payoutd_engine::pipeline_store::BooksCursor,
                limit: u32,
            ) -> Result<Vec<payoutd_engine::pipeline_store::AwaitingBooks>, StoreError> {
                shared_incidents::incidents_awaiting_books_on!(&self.pool, after, limit)
            }

            async fn book_awaited(
                &self,
                id: &IncidentId,
                journals: &[payoutd_domain::Journal],
                note: &str,
                at_ms: i64,
            ) -> Result<bool, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                shared_incidents::book_awaited_in!(tx, id, journals, note, at_ms, crate::$db::apply_journal)
            }

            async fn open_incident_once(
                &self,
                incident: &NewIncident,
                subject: &str,
            ) -> Result<bool, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                let opened = insert_incident(&mut tx, incident, Some(subject)).await?;
                tx.commit().await.map_err(classify)?;
                Ok(opened)
            }

            async fn tx_owners(&self, hashes: &[TxRef]) -> Result<Vec<(TxRef, PayoutId)>, StoreError> {
                let known: Vec<(String, String)> = sqlx::query_as(
                    concat!(
                        "SELECT t.tx_hash, a.payout_id FROM attempt_transactions t JOIN attempts a ON a.id = t.attempt_id \
                         WHERE t.tx_hash ",
                        $in_list
                    ),
                )
                .bind($list(hashes))
                .fetch_all(&self.pool)
                .await
                .map_err(classify)?;
                known
                    .iter()
                    .map(|(hash, payout)| Ok((rows::tx_ref(hash)?, rows::payout_id(payout)?)))
                    .collect()
            }

            async fn dead_attempt_transfers(
                &self,
                hashes: &[TxRef],
            ) -> Result<Vec<(TxRef, PayoutId)>, StoreError> {
                let dead: Vec<(String, String)> = sqlx::query_as(
                    concat!(
                        "SELECT t.tx_hash, a.payout_id FROM attempt_transactions t JOIN attempts a ON a.id = t.attempt_id \
                         WHERE t.tx_hash ",
                        $in_list,
                        " AND a.status = 'dead' AND t.kind <> 'cancel'"
                    ),
                )
                .bind($list(hashes))
                .fetch_all(&self.pool)
                .await
                .map_err(classify)?;
                dead.iter()
                    .map(|(hash, payout)| Ok((rows::tx_ref(hash)?, rows::payout_id(payout)?)))
                    .collect()
            }

            async fn open_incidents(&self, limit: u32) -> Result<Vec<Incident>, StoreError> {
                let rows: Vec<IncidentRow> = sqlx::query_as(shared_sql::OPEN_INCIDENTS)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err(classify)?;
                rows.into_iter().map(IncidentRow::into_domain).collect()
            }

            async fn open_incident_about(
                &self,
                kind: payoutd_domain::IncidentKind,
                subject_prefix: &str,
            ) -> Result<Option<IncidentId>, StoreError> {
                let id: Option<String> = sqlx::query_scalar(shared_incidents::OPEN_INCIDENT_ABOUT)
                    .bind(kind.as_str())
                    .bind(subject_prefix)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(classify)?;
                id.map(|id| crate::rows::incident_id(&id)).transpose()
            }

            async fn resolve_incident(
                &self,
                id: &IncidentId,
                resolution: &str,
                at_ms: i64,
            ) -> Result<bool, StoreError> {
                let (_guard, mut tx) = self.write_tx().await?;
                crate::shared_incidents::resolve_incident_in!(tx, id, resolution, at_ms)
            }

            async fn settled_wallet_books(
                &self,
                wallet_id: &str,
            ) -> Result<payoutd_engine::pipeline_store::WalletBooks, StoreError> {
                crate::wallet_books::$db::settled_wallet_books(self, wallet_id).await
            }

            async fn book_wallet_funding(
                &self,
                funding: &payoutd_engine::pipeline_store::WalletFunding,
            ) -> Result<bool, StoreError> {
                crate::wallet_books::$db::book_wallet_funding(self, funding).await
            }
        }
    };
}
pub(crate) use detection_store;
