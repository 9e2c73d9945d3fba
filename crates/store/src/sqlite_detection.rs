//! The detection port on SQLite: reconciliation's cursors and lease, incidents (with the second payments they book), and the books a hot wallet is compared with.

use super::*;
use payoutd_engine::pipeline_store::DetectionStore;

#[async_trait]
impl DetectionStore for SqliteStore {
    async fn rail_cursor(&self, name: &str) -> Result<Option<String>, StoreError> {
        crate::cursors::sqlite::rail_cursor(self, name).await
    }

    async fn advance_rail_cursor(
        &self,
        name: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<bool, StoreError> {
        crate::cursors::sqlite::advance_rail_cursor(self, name, from, to).await
    }

    async fn lease_detection(
        &self,
        scope: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<bool, StoreError> {
        crate::cursors::sqlite::lease_detection(self, scope, now_ms, until_ms).await
    }

    async fn release_detection(&self, scope: &str, until_ms: i64) -> Result<(), StoreError> {
        crate::cursors::sqlite::release_detection(self, scope, until_ms).await
    }

    async fn open_incident(&self, incident: &NewIncident) -> Result<(), StoreError> {
        let _guard = self.write_lock.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(classify)?;
        insert_incident(&mut tx, incident, None).await?;
        tx.commit().await.map_err(classify)
    }

    async fn open_incident_with_journals(
        &self,
        incident: &NewIncident,
        subject: &str,
        journals: &[payoutd_domain::Journal],
    ) -> Result<bool, StoreError> {
        let _guard = self.write_lock.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(classify)?;
        shared_incidents::open_incident_with_journals_in!(
            tx,
            incident,
            subject,
            journals,
            crate::sqlite::apply_journal
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
        shared_incidents::book_awaited_in!(
            tx,
            id,
            journals,
            note,
            at_ms,
            crate::sqlite::apply_journal
        )
    }

    async fn open_incident_once(
        &self,
        incident: &NewIncident,
        subject: &str,
    ) -> Result<bool, StoreError> {
        let _guard = self.write_lock.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(classify)?;
        let opened = insert_incident(&mut tx, incident, Some(subject)).await?;
        tx.commit().await.map_err(classify)?;
        Ok(opened)
    }

    async fn tx_owners(&self, hashes: &[TxRef]) -> Result<Vec<(TxRef, PayoutId)>, StoreError> {
        let known: Vec<(String, String)> = sqlx::query_as(
            "SELECT t.tx_hash, a.payout_id FROM attempt_transactions t JOIN attempts a ON a.id = t.attempt_id \
             WHERE t.tx_hash IN (SELECT value FROM json_each(?1))",
        )
        .bind(json_array(hashes.iter().map(TxRef::as_str)))
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
            "SELECT t.tx_hash, a.payout_id FROM attempt_transactions t JOIN attempts a ON a.id = t.attempt_id \
             WHERE t.tx_hash IN (SELECT value FROM json_each(?1)) AND a.status = 'dead' AND t.kind <> 'cancel'",
        )
        .bind(json_array(hashes.iter().map(TxRef::as_str)))
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
        crate::wallet_books::sqlite::settled_wallet_books(self, wallet_id).await
    }

    async fn book_wallet_funding(
        &self,
        funding: &payoutd_engine::pipeline_store::WalletFunding,
    ) -> Result<bool, StoreError> {
        crate::wallet_books::sqlite::book_wallet_funding(self, funding).await
    }
}
