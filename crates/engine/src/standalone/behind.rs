//! Records behind the account: before a standalone rail signs, every transfer out of its account that reconciliation has not judged yet (final or not) must be an attempt the database holds; otherwise commits were lost (a failover, a restore) or its key signed elsewhere, and signing could pay a payout a second time.

use std::sync::atomic::Ordering;

use payoutd_domain::{IncidentKind, TxRef};

use super::StandaloneFamily;
use crate::pipeline::{Core, PipelineError};
use crate::pipeline_store::{IncidentSubject, NewIncident};

impl StandaloneFamily {
    /// Whether the rail may sign this pass: everything that left its account since
    /// reconciliation's cursor is a stored attempt. While a transfer is unknown (or the account
    /// cannot be read) nothing is signed; once reconciliation has judged it (relinked to the payout
    /// its memo names, or reported unmatched), signing resumes and the incident is resolved.
    pub(super) async fn records_hold_the_account(&self, core: &Core) -> bool {
        let rail = self.line.rail.name();
        match self.unknown_outgoing(core).await {
            Ok(unknown) if unknown.is_empty() => {
                if self.behind_seen.load(Ordering::Relaxed) {
                    match self.resolve_behind(core).await {
                        Ok(()) => self.behind_seen.store(false, Ordering::Relaxed),
                        Err(e) => {
                            tracing::warn!(rail, error = %e, "cannot resolve the records_behind_chain incident")
                        }
                    }
                }
                true
            }
            Ok(unknown) => {
                self.behind_seen.store(true, Ordering::Relaxed);
                if let Err(e) = self.open_behind(core, &unknown).await {
                    tracing::warn!(rail, error = %e, "cannot open the records_behind_chain incident");
                }
                false
            }
            Err(e) => {
                tracing::warn!(rail, error = %e, "cannot prove the account's records are not behind it; not signing on this rail this pass");
                false
            }
        }
    }

    /// Transfers out of the account since reconciliation's cursor that no stored attempt holds.
    /// None before reconciliation has set its starting point (nothing was signed before it).
    async fn unknown_outgoing(&self, core: &Core) -> Result<Vec<TxRef>, PipelineError> {
        let rail = self.line.rail.as_ref();
        let Some(name) = rail.reconcile_cursor_name() else { return Ok(Vec::new()) };
        let Some(cursor) = core.store.rail_cursor(&name).await? else { return Ok(Vec::new()) };
        let unavailable = |e: crate::rail::ReadError| PipelineError::RailUnavailable(e.0);
        let listed = rail.listed_since(&cursor).await.map_err(unavailable)?;
        if listed.is_empty() {
            return Ok(Vec::new());
        }
        let owners = core.store.tx_owners(&listed).await?;
        let unknown: Vec<TxRef> =
            listed.into_iter().filter(|r| !owners.iter().any(|(owned, _)| owned == r)).collect();
        if unknown.is_empty() {
            return Ok(Vec::new());
        }
        // Money in is no payment; a transfer out not final yet is an error here: it waits.
        let outgoing = rail.outgoing_of(&unknown).await.map_err(unavailable)?;
        Ok(outgoing.into_iter().map(|f| f.reference).collect())
    }

    /// One open `records_behind_chain` incident per account at a time.
    async fn open_behind(&self, core: &Core, unknown: &[TxRef]) -> Result<(), PipelineError> {
        let about = self.behind_subject();
        if core.store.open_incident_about(IncidentKind::RecordsBehindChain, &about).await?.is_some()
        {
            return Ok(());
        }
        let rail = self.line.rail.name();
        tracing::error!(rail, unknown = unknown.len(), first = %unknown[0], "the account sent transfers the database does not record: signing on this rail stops until reconciliation has read each back");
        let detail = format!(
            "{rail}: its account sent {} transfer(s) the database does not record (the first {}): commits were lost (a failover, a restore from a backup) or its key signed elsewhere. Nothing is signed on {rail} until reconciliation has read each back once final: one whose memo names a payout waiting to be signed is recorded as that payout's attempt, any other is reported as an unmatched_transfer",
            unknown.len(),
            unknown[0],
        );
        let incident = NewIncident::new(
            IncidentKind::RecordsBehindChain,
            IncidentSubject::default(),
            detail,
            core.clock.now_ms(),
        );
        core.store.open_incident_once(&incident, &format!("{about}{}", unknown[0])).await?;
        Ok(())
    }

    /// Resolves the account's open `records_behind_chain` incident, if any.
    async fn resolve_behind(&self, core: &Core) -> Result<(), PipelineError> {
        let about = self.behind_subject();
        let Some(id) =
            core.store.open_incident_about(IncidentKind::RecordsBehindChain, &about).await?
        else {
            return Ok(());
        };
        let resolution = "every transfer out of the account was read back by reconciliation (each naming a payout recorded as its attempt, any other reported as an unmatched_transfer): signing resumed";
        if core.store.resolve_incident(&id, resolution, core.clock.now_ms()).await? {
            tracing::info!(
                rail = self.line.rail.name(),
                "the account's records caught up: signing resumes"
            );
        }
        Ok(())
    }

    /// What every `records_behind_chain` subject of this rail's account begins with.
    fn behind_subject(&self) -> String {
        let rail = self.line.rail.as_ref();
        format!("{}:", rail.reconcile_cursor_name().unwrap_or_else(|| rail.name().to_owned()))
    }
}
