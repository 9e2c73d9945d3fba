//! Resolve and recover (SPEC 4 step 5): the sweep over every live attempt, leased, handed to the family paying its asset, settled together.

use std::collections::HashSet;

use payoutd_domain::{AssetCode, Attempt, AttemptId, IncidentKind, Payout};

use crate::pipeline_store::AttemptSettlement;

use super::family::{RailFamily, Resolved, owner_of};
use super::{Core, PipelineError, RESOLVE_LEASE_MS, TickReport, count_error};
use crate::pipeline_store::{IncidentSubject, NewIncident};

/// The resolve stage.
pub(super) struct Sweep<'a> {
    pub core: &'a Core,
    pub families: &'a [Box<dyn RailFamily>],
}

/// What one sweep read from the rails and decided, waiting to be written.
pub(super) struct Decided {
    /// What the sweep did already (incidents opened, attempts settled without a settlement).
    report: TickReport,
    settlements: Vec<(AttemptSettlement, TickReport)>,
    /// Attempts decided on: they end, or move to the back of their line's ties.
    checked: Vec<AttemptId>,
    /// Attempts the sweep decided nothing on (an unreadable rail, an error): free for the next.
    undecided: Vec<AttemptId>,
}

impl Decided {
    /// Whether the sweep leased anything: nothing leased, nothing to write.
    pub fn is_empty(&self) -> bool {
        self.checked.is_empty() && self.undecided.is_empty() && !self.report.did_work()
    }
}

impl Sweep<'_> {
    /// One sweep: its attempts decided, then written.
    pub async fn pass(&self) -> Result<TickReport, PipelineError> {
        let decided = self.decide().await?;
        self.write(decided).await
    }

    /// Leases live attempts and lets each family resolve its own (concurrently, each decision
    /// resting on its own attempt's reads: I5). An error on one attempt is logged with its ids and
    /// counted; the others go on. Nothing is settled yet: the attempts stay leased until `write`.
    pub async fn decide(&self) -> Result<Decided, PipelineError> {
        let core = self.core;
        // Leased: a second worker's sweep takes other attempts instead of reading the same rail.
        let assets: Vec<AssetCode> =
            self.families.iter().flat_map(|f| f.assets()).map(|a| a.code.clone()).collect();
        let live = core
            .store
            .lease_live_attempts(
                &assets,
                core.config.resolve_batch_max,
                core.clock.now_ms(),
                RESOLVE_LEASE_MS,
            )
            .await?;
        let mut decided = Decided {
            report: self.escalate_unresolved(&live).await?,
            settlements: Vec::new(),
            checked: Vec::with_capacity(live.len()),
            undecided: Vec::new(),
        };
        for (attempt, outcome) in self.resolve(&live).await {
            match outcome {
                Ok(Resolved::Done(r)) => {
                    decided.report.add(r);
                    decided.checked.push(attempt.id.clone());
                }
                Ok(Resolved::Settle(settlement, counted)) => {
                    decided.settlements.push((*settlement, counted));
                    decided.checked.push(attempt.id.clone());
                }
                Err(e) => {
                    count_error("resolve", &e);
                    tracing::warn!(attempt = %attempt.id, payout = %attempt.payout_id, error = %e, "resolving an attempt failed; it is looked at again next pass");
                }
            }
        }
        // A set: a sweep holds up to `resolve_batch_max` attempts, each looked up once.
        let done: HashSet<&AttemptId> = decided.checked.iter().collect();
        decided.undecided =
            live.iter().map(|(a, _)| &a.id).filter(|id| !done.contains(id)).cloned().collect();
        Ok(decided)
    }

    /// Each family resolves its share of the leased attempts, one family after the other,
    /// concurrently inside (as `sign_pass`).
    async fn resolve<'a>(
        &self,
        live: &'a [(Attempt, Payout)],
    ) -> Vec<(&'a Attempt, Result<Resolved, PipelineError>)> {
        let core = self.core;
        let mut outcomes = Vec::with_capacity(live.len());
        let owners: Vec<Option<&dyn RailFamily>> = live
            .iter()
            .map(|(attempt, payout)| owner_of(self.families, &core.routes, attempt, payout))
            .collect();
        for ((attempt, payout), _) in live.iter().zip(&owners).filter(|(_, owner)| owner.is_none())
        {
            // A rail taken out of the configuration (or its route) while its attempt was live: the
            // attempt waits for it (and, past its age, for a person through `attempt_unresolved`).
            tracing::error!(attempt = %attempt.id, payout = %payout.id, rail = attempt.slot.rail(), "no rail of this process made this live attempt; it is left as it is");
        }
        for family in self.families {
            let mine: Vec<&(Attempt, Payout)> = live
                .iter()
                .zip(&owners)
                .filter(|(_, owner)| owner.is_some_and(|o| std::ptr::addr_eq(o, family.as_ref())))
                .map(|(pair, _)| pair)
                .collect();
            if !mine.is_empty() {
                outcomes.extend(family.resolve(core, &mine).await);
            }
        }
        outcomes
    }

    /// Writes what a sweep decided: its settlements in one transaction (every write conditional on
    /// the state it read: I5), its checked attempts to the back of their ties, its undecided
    /// attempts' leases released.
    pub async fn write(&self, decided: Decided) -> Result<TickReport, PipelineError> {
        let core = self.core;
        let Decided { mut report, settlements, checked, undecided } = decided;
        report.add(core.settle_many(settlements).await);
        if !checked.is_empty() {
            core.store.record_checked(&checked, core.clock.now_ms()).await?;
        }
        if !undecided.is_empty() {
            core.store.release_leases(&undecided).await?;
        }
        Ok(report)
    }

    /// Scans that cannot reach an answer must not wait unseen: every attempt live past
    /// `attempt_unresolved_after_ms`, whatever its rail, opens one `attempt_unresolved` incident
    /// (the attempt keeps being resolved; the hold stays).
    async fn escalate_unresolved(
        &self,
        live: &[(Attempt, Payout)],
    ) -> Result<TickReport, PipelineError> {
        let core = self.core;
        let mut report = TickReport::default();
        #[cfg(feature = "defects")]
        if core.config.defects.unresolved_not_escalated {
            return Ok(report);
        }
        let now = core.clock.now_ms();
        for (attempt, payout) in live
            .iter()
            .filter(|(a, _)| now - a.created_at_ms >= core.config.attempt_unresolved_after_ms)
        {
            let detail = format!(
                "attempt {} of payout {} on rail {} is still unresolved {} s after it was made: its rail has not proven it landed or dead",
                attempt.attempt_no,
                payout.id,
                attempt.slot.rail(),
                (now - attempt.created_at_ms) / 1_000
            );
            let subject = IncidentSubject {
                merchant_id: Some(payout.merchant_id.clone()),
                payout_id: Some(payout.id.clone()),
                attempt_id: Some(attempt.id.clone()),
            };
            let incident = NewIncident::new(IncidentKind::AttemptUnresolved, subject, detail, now);
            if core.store.open_incident_once(&incident, attempt.id.as_str()).await? {
                tracing::error!(attempt = %attempt.id, payout = %payout.id, rail = attempt.slot.rail(), "attempt unresolved past its age limit: incident opened");
                report.unresolved_attempts += 1;
            }
        }
        Ok(report)
    }
}
