//! The incidents' statements and transaction bodies both stores run as written: opening one with its
//! event, resolving it, and the books an incident waits for.

/// An incident, unless one of its kind about its subject exists (no subject: always inserted).
pub(crate) const INSERT_INCIDENT: &str = "INSERT INTO incidents (id, kind, merchant_id, payout_id, attempt_id, detail, status, created_at_ms, subject) \
     VALUES ($1, $2, $3, $4, $5, $6, 'open', $7, $8) ON CONFLICT (kind, subject) WHERE subject IS NOT NULL DO NOTHING";

/// Inserts `$incident` (a `NewIncident`) and its event on the connection `$conn` of either store,
/// unless an incident of its kind about `$subject` exists; whether it was inserted.
macro_rules! insert_incident_on {
    ($conn:expr, $incident:expr, $subject:expr) => {{
        let (conn, incident) = ($conn, $incident);
        let inserted = sqlx::query($crate::shared_incidents::INSERT_INCIDENT)
            .bind(incident.id.as_str())
            .bind(incident.kind.as_str())
            .bind(incident.merchant_id.as_ref().map(|m| m.as_str()))
            .bind(incident.payout_id.as_ref().map(|p| p.as_str()))
            .bind(incident.attempt_id.as_ref().map(|a| a.as_str()))
            .bind(&incident.detail)
            .bind(incident.at_ms)
            .bind($subject)
            .execute(&mut *conn)
            .await
            .map_err(classify)?
            .rows_affected()
            == 1;
        if inserted {
            insert_event(conn, &incident.event).await?;
        }
        Ok(inserted)
    }};
}
pub(crate) use insert_incident_on;

/// An incident just opened whose books wait for what it is about to be final.
pub(crate) const MARK_AWAITING_BOOKS: &str =
    "UPDATE incidents SET awaiting_books = TRUE WHERE id = $1";
/// Incidents whose books wait, open or resolved by a person meanwhile (money that moved is
/// booked whatever anyone said about the alarm), oldest first after a cursor.
pub(crate) const INCIDENTS_AWAITING_BOOKS: &str = "SELECT id, kind, payout_id, attempt_id, detail, resolution, created_at_ms, subject \
     FROM incidents WHERE awaiting_books AND (created_at_ms > $1 OR (created_at_ms = $1 AND id > $2)) ORDER BY created_at_ms, id LIMIT $3";
/// Ends an incident's wait for its books, once, noting what was booked.
pub(crate) const BOOK_AWAITED: &str = "UPDATE incidents SET awaiting_books = FALSE, detail = detail || $1 WHERE id = $2 AND awaiting_books";

/// The oldest open incident of a kind whose subject begins with a prefix (no `LIKE`: a subject's
/// own `_` or `%` must not match anything else).
pub(crate) const OPEN_INCIDENT_ABOUT: &str = "SELECT id FROM incidents \
     WHERE kind = $1 AND substr(subject, 1, length(CAST($2 AS TEXT))) = $2 AND status = 'open' \
     ORDER BY created_at_ms, id LIMIT 1";

/// Closes an open incident; what it returns names the subject of its `incident.resolved` event.
pub(crate) const RESOLVE_INCIDENT: &str = "UPDATE incidents SET status = 'resolved', resolution = $1, resolved_at_ms = $2 \
     WHERE id = $3 AND status = 'open' RETURNING kind, merchant_id, payout_id, attempt_id";

/// `resolve_incident` inside an open write transaction `$tx`: closes the incident if it is open and
/// writes its `incident.resolved` event, both or neither; evaluates to whether it was open.
macro_rules! resolve_incident_in {
    ($tx:ident, $id:expr, $resolution:expr, $at_ms:expr) => {{
        let (id, resolution, at_ms) = ($id, $resolution, $at_ms);
        let row = sqlx::query($crate::shared_incidents::RESOLVE_INCIDENT)
            .bind(resolution)
            .bind(at_ms)
            .bind(id.as_str())
            .fetch_optional(&mut *$tx)
            .await
            .map_err(classify)?;
        match row {
            None => Ok(false),
            Some(row) => {
                let (kind, subject) = $crate::rows::incident_subject(
                    row.try_get("kind").map_err(classify)?,
                    row.try_get("merchant_id").map_err(classify)?,
                    row.try_get("payout_id").map_err(classify)?,
                    row.try_get("attempt_id").map_err(classify)?,
                )?;
                let event = payoutd_engine::pipeline_store::incident_resolved_event(
                    id, kind, &subject, resolution, at_ms,
                );
                insert_event(&mut $tx, &event).await?;
                $tx.commit().await.map_err(classify)?;
                Ok(true)
            }
        }
    }};
}
pub(crate) use resolve_incident_in;

/// `open_incident_with_journals` inside an open write transaction `$tx` (committed here when the
/// incident is new): the incident once per subject, and its journals with it, both or neither.
/// `$apply_journal` is the store's own.
macro_rules! open_incident_with_journals_in {
    ($tx:ident, $incident:expr, $subject:expr, $journals:expr, $apply_journal:path) => {{
        let incident = $incident;
        if !insert_incident(&mut $tx, incident, Some($subject)).await? {
            return Ok(false);
        }
        for journal in $journals {
            // Only merchant accounts can refuse a journal; these touch none.
            if $apply_journal(&mut $tx, journal, incident.at_ms).await?.is_err() {
                return Err(StoreError::Invariant(format!(
                    "incident {}: journal {} was refused by the ledger",
                    incident.id, journal.reference
                )));
            }
        }
        $tx.commit().await.map_err(classify)?;
        Ok(true)
    }};
}
pub(crate) use open_incident_with_journals_in;

/// `open_incident_awaiting_books` inside an open write transaction `$tx` (committed here).
macro_rules! open_incident_awaiting_books_in {
    ($tx:ident, $incident:expr, $subject:expr) => {{
        let incident = $incident;
        let opened = insert_incident(&mut $tx, incident, Some($subject)).await?;
        if opened {
            sqlx::query($crate::shared_incidents::MARK_AWAITING_BOOKS)
                .bind(incident.id.as_str())
                .execute(&mut *$tx)
                .await
                .map_err(classify)?;
        }
        $tx.commit().await.map_err(classify)?;
        Ok(opened)
    }};
}
pub(crate) use open_incident_awaiting_books_in;

/// `book_awaited` inside an open write transaction `$tx` (committed here when the incident
/// awaited its books): the note and the journals, both or neither.
macro_rules! book_awaited_in {
    ($tx:ident, $id:expr, $journals:expr, $note:expr, $at_ms:expr, $apply_journal:path) => {{
        let id = $id;
        let ended = sqlx::query($crate::shared_incidents::BOOK_AWAITED)
            .bind($note)
            .bind(id.as_str())
            .execute(&mut *$tx)
            .await
            .map_err(classify)?
            .rows_affected();
        if ended == 0 {
            return Ok(false);
        }
        for journal in $journals {
            // Only merchant accounts can refuse a journal; these touch none.
            if $apply_journal(&mut $tx, journal, $at_ms).await?.is_err() {
                return Err(StoreError::Invariant(format!(
                    "incident {id}: journal {} was refused by the ledger",
                    journal.reference
                )));
            }
        }
        $tx.commit().await.map_err(classify)?;
        Ok(true)
    }};
}
pub(crate) use book_awaited_in;

/// `incidents_awaiting_books` on either store's pool.
macro_rules! incidents_awaiting_books_on {
    ($pool:expr, $after:expr, $limit:expr) => {{
        let rows: Vec<$crate::rows::AwaitingRow> =
            sqlx::query_as($crate::shared_incidents::INCIDENTS_AWAITING_BOOKS)
                .bind($after.created_at_ms)
                .bind(&$after.incident_id)
                .bind(i64::from($limit))
                .fetch_all($pool)
                .await
                .map_err(classify)?;
        rows.into_iter().map($crate::rows::AwaitingRow::into_engine).collect()
    }};
}
pub(crate) use incidents_awaiting_books_on;
