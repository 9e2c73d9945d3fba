//! The attempt lifecycle on standalone rails (`StandaloneRail`): prepare, store with the payout's move, submit the stored request unchanged, resolve from the rail, settle.

use futures::{FutureExt, StreamExt};

use payoutd_domain::{
    Attempt, AttemptId, AttemptSlot, AttemptStatus, AttemptTx, EventType, IncidentKind, Payout,
    PayoutStatus, TxKind, TxRef,
};

use super::{PrepareError, Prepared, StandaloneFamily, StandaloneStatus, SubmitOutcome};
use crate::pipeline::{
    AttemptEnd, Core, FeePaid, PayoutEnd, PipelineError, RESOLVE_CONCURRENCY_MAX, TickReport,
    count_error, payout_transition,
};
use crate::pipeline_store::FirstAttempt;
use crate::store::{NewEvent, TransitionOutcome};

/// Payouts awaiting their next attempt that one pass takes at most per rail.
const STANDALONE_NEXT_ATTEMPTS_PER_PASS_MAX: u32 = 32;
/// Attempts of one rail prepared, stored and submitted at once.
pub const STANDALONE_ATTEMPTS_IN_FLIGHT_MAX: usize = 16;

/// Why a rail's answer needs a person, and what the attempt cost the hot wallet (when the rail
/// reads it).
struct PersonNeeded {
    kind: IncidentKind,
    evidence: String,
    fee_paid: Option<payoutd_domain::Amount>,
}

impl StandaloneFamily {
    /// Next attempts first, then approved payouts: each prepared (reads only), stored together with
    /// its payout's move (bytes or request before any send, I4), then submitted. A rail's failure is
    /// logged and counted; the other rails go on.
    pub(super) async fn sign_line(&self, core: &Core) -> TickReport {
        match self.sign_attempts(core).await {
            Ok(report) => report,
            Err(e) => {
                count_error("sign", &e);
                tracing::warn!(rail = self.line.rail.name(), error = %e, "signing on this rail failed this pass; the others went on");
                TickReport::default()
            }
        }
    }

    async fn sign_attempts(&self, core: &Core) -> Result<TickReport, PipelineError> {
        if !self.records_hold_the_account(core).await {
            return Ok(TickReport::default());
        }
        let codes = self.line.codes();
        // Next attempts of its own unrouted payouts, and those the routes give this rail.
        let turns = core.routes.next_attempt_turns(&codes);
        let mut work: Vec<(Payout, u32)> = core
            .store
            .awaiting_next_attempt_in(&turns, STANDALONE_NEXT_ATTEMPTS_PER_PASS_MAX)
            .await?;
        work.extend(
            core.store
                .approved_in(&codes, core.config.sign_batch_max)
                .await?
                .into_iter()
                .map(|p| (p, 1)),
        );
        // Each payout's attempt stands alone (no shared counter): prepared, stored and sent side by
        // side, so one node round trip does not wait for the next.
        let attempts: Vec<_> =
            work.iter().map(|(payout, n)| self.attempt(core, payout, *n).boxed()).collect();
        let results: Vec<Result<TickReport, PipelineError>> = futures::stream::iter(attempts)
            .buffer_unordered(STANDALONE_ATTEMPTS_IN_FLIGHT_MAX)
            .collect()
            .await;
        let mut report = TickReport::default();
        for result in results {
            report.add(result?);
        }
        Ok(report)
    }

    async fn attempt(
        &self,
        core: &Core,
        payout: &Payout,
        attempt_no: u32,
    ) -> Result<TickReport, PipelineError> {
        let line = &self.line;
        let mut report = TickReport::default();
        let now = core.clock.now_ms();
        if let Some(record) = core.remembered(payout, attempt_no).await? {
            // The send guard saw this attempt go out and the database lost it: its request may
            // have been taken, so the payout waits for a person instead of a second create.
            if let TransitionOutcome::Applied(_) = core
                .store
                .transition_payout(&core.lost_attempt_transition(payout, attempt_no, now))
                .await?
            {
                report.needs_attention += 1;
                core.open_lost_attempt_incident(payout, attempt_no, &record, now).await?;
            }
            return Ok(report);
        }
        if attempt_no == 1 && core.pays_own_wallet(payout) {
            tracing::error!(rail = line.rail.name(), payout = %payout.id, destination = %payout.destination, "the destination is one of this deployment's hot wallets: the payout fails unsent");
            if let TransitionOutcome::Applied(_) =
                core.store.transition_payout(&core.fail_unsent(payout, now)).await?
            {
                report.failed += 1;
            }
            return Ok(report);
        }
        let Some(prepared) = self.prepared(core, payout, attempt_no, now, &mut report).await?
        else {
            return Ok(report);
        };
        let attempt = Attempt {
            id: AttemptId::new(),
            payout_id: payout.id.clone(),
            attempt_no,
            status: AttemptStatus::Signed,
            slot: prepared.slot,
            txs: vec![prepared.tx],
            mined: None,
            last_sent_at_ms: 0,
            created_at_ms: now,
            updated_at_ms: now,
        };
        assert!(attempt.slot.as_evm().is_none(), "a standalone rail prepared an EVM slot");
        let created = self.store_attempt(core, payout, &attempt, now, &mut report).await?;
        if !created {
            line.rail.discarded(&attempt);
            return Ok(report); // another worker's, or over a cap
        }
        report.signed += 1;
        if !core.guard.allows(payout, &attempt, &super::remembered::record_of(&attempt)).await {
            // Not sent; recorded as if its answer were lost, so the resolver sends it once the
            // guard answers (a refusal then proves nothing, which only costs time).
            core.store.record_sent(&attempt.id, now).await?;
            return Ok(report);
        }
        let outcome = line.rail.submit_first(&attempt).await;
        report.add(self.record_submission(core, &attempt, outcome).await?);
        Ok(report)
    }

    /// The rail's attempt for the payout, or none this pass: the rail cannot be asked now, or it
    /// refused, and the payout failed unsent (nothing exists that could land).
    async fn prepared(
        &self,
        core: &Core,
        payout: &Payout,
        attempt_no: u32,
        now: i64,
        report: &mut TickReport,
    ) -> Result<Option<Prepared>, PipelineError> {
        let line = &self.line;
        let reference = core.reference_of(payout).await?;
        match line.rail.prepare(payout, attempt_no, &reference).await {
            Ok(prepared) => Ok(Some(prepared)),
            Err(PrepareError::Unavailable(e)) => {
                tracing::warn!(rail = line.rail.name(), payout = %payout.id, error = %e, "cannot prepare an attempt this pass");
                Ok(None)
            }
            Err(PrepareError::Refused(why)) => {
                // Nothing exists that could land (SPEC 4, failure rules): the payout fails, the hold is released.
                tracing::error!(rail = line.rail.name(), payout = %payout.id, %why, "the rail refused to prepare; nothing was produced, the payout fails");
                if let TransitionOutcome::Applied(_) =
                    core.store.transition_payout(&core.fail_unsent(payout, now)).await?
                {
                    report.failed += 1;
                }
                Ok(None)
            }
        }
    }

    /// Stores the attempt: a first one with the payout's move to `processing`, re-checked against
    /// the caps when some apply (over one, the payout is held for review instead); a next one
    /// beside its dead predecessor. `false` when it was not stored, and must not be sent.
    async fn store_attempt(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
        now: i64,
        report: &mut TickReport,
    ) -> Result<bool, PipelineError> {
        if attempt.attempt_no > 1 {
            return Ok(core.store.create_next_attempt(payout, attempt).await?);
        }
        let mut after = payout.clone();
        after.status = PayoutStatus::Processing;
        after.version += 1;
        let event = NewEvent::for_payout(EventType::PayoutProcessing, &after, now);
        let Some(caps) = core.signing_caps(payout, now) else {
            return Ok(core.store.create_first_attempt(payout, attempt, &event).await?);
        };
        match core.store.create_first_attempt_within_caps(payout, attempt, &event, &caps).await? {
            FirstAttempt::Created => Ok(true),
            FirstAttempt::Stale => Ok(false),
            FirstAttempt::OverCap(why) => {
                tracing::warn!(rail = self.line.rail.name(), payout = %payout.id, %why, "over a cap at signing: held for review");
                let held = payout_transition(
                    payout,
                    PayoutStatus::HeldForReview,
                    EventType::PayoutHeldForReview,
                    vec![],
                    now,
                );
                if let TransitionOutcome::Applied(_) = core.store.transition_payout(&held).await? {
                    report.held += 1;
                }
                Ok(false)
            }
        }
    }

    /// Sends the stored request and records what the rail said. Only an accept moves the attempt;
    /// anything else is left for the resolver, which asks the rail before deciding.
    async fn submit(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<TickReport, PipelineError> {
        if !core.guard.allows(payout, attempt, &super::remembered::record_of(attempt)).await {
            return Ok(TickReport::default());
        }
        let outcome = self.line.rail.submit(attempt).await;
        self.record_submission(core, attempt, outcome).await
    }

    async fn record_submission(
        &self,
        core: &Core,
        attempt: &Attempt,
        outcome: SubmitOutcome,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let now = core.clock.now_ms();
        match outcome {
            SubmitOutcome::Accepted { reference } => {
                if let Some(reference) = reference {
                    core.store.record_reference(&attempt.id, &reference).await?;
                }
                if !core.store.mark_broadcast(&attempt.id, now).await? {
                    core.store.record_sent(&attempt.id, now).await?;
                }
                report.sent += 1;
            }
            SubmitOutcome::NotAccepted(why) => {
                tracing::info!(rail = self.line.rail.name(), attempt = %attempt.id, %why, "not accepted; the resolver asks the rail");
                core.store.record_sent(&attempt.id, now).await?;
            }
            SubmitOutcome::Refused { proof } => {
                report.add(self.end_refused(core, attempt, proof, now).await?)
            }
            SubmitOutcome::KeySpent(why) => {
                tracing::info!(rail = self.line.rail.name(), attempt = %attempt.id, %why, "key spent at the provider; lookups decide");
                core.store.record_key_spent(&attempt.id, now).await?;
                core.store.record_sent(&attempt.id, now).await?;
            }
        }
        Ok(report)
    }

    /// An attempt stored and never recorded as sent: while its first send may still be under way
    /// in the worker that stored it (whose refusal would end the attempt), nothing. Past the time
    /// that send takes, its worker died or lost the database's answer: the attempt is claimed
    /// (`signed` to `broadcast`, so a refusal its first sender records late finds it moved and
    /// ends nothing) and sent, the same bytes or key; a claim another worker won sends nothing.
    async fn send_left_unsent(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
        now: i64,
    ) -> Result<TickReport, PipelineError> {
        let unsent_for_ms = now - attempt.created_at_ms;
        if attempt.status != AttemptStatus::Signed
            || unsent_for_ms < self.line.rail.first_send_within_ms()
            || !core.store.mark_broadcast(&attempt.id, now).await?
        {
            return Ok(TickReport::default());
        }
        tracing::warn!(rail = self.line.rail.name(), attempt = %attempt.id, unsent_for_ms, "no first send was recorded for this attempt: the resolver sends it");
        let mut report = self.submit(core, payout, attempt).await?;
        report.rebroadcasts += 1;
        Ok(report)
    }

    fn may_resend(&self, core: &Core, attempt: &Attempt, now: i64) -> bool {
        attempt.last_sent_at_ms != 0
            && now - attempt.last_sent_at_ms >= core.config.rebroadcast_after_ms
    }

    /// The first call was refused with proof that it created nothing: the attempt ends now, while
    /// nobody else can have sent it (the resolver re-sends only once a first send's outcome is
    /// recorded, and a refused one never is); the payout goes on to its next attempt.
    async fn end_refused(
        &self,
        core: &Core,
        attempt: &Attempt,
        proof: String,
        now: i64,
    ) -> Result<TickReport, PipelineError> {
        let line = &self.line;
        assert_eq!(
            attempt.last_sent_at_ms, 0,
            "attempt {} was refused on a first send after it had been sent",
            attempt.id
        );
        let Some(payout) = core.store.payout_by_id(&attempt.payout_id).await? else {
            return Err(PipelineError::NotFound);
        };
        let end = AttemptEnd {
            attempt_to: AttemptStatus::Dead,
            evidence: format!(
                "{} refused the first call with the attempt's key and reference: {proof}",
                line.rail.name()
            ),
            mined: None,
            fee: None,
            payout: PayoutEnd::NextAttempt { attempts_max: line.rail.attempts_max() },
            incident: None,
            paid_from: self.paid_from_rail(attempt, &payout),
        };
        // Stale: the payout moved meanwhile (an operator); the attempt is then decided by lookup.
        Ok(core.settle(attempt, &payout, end, now).await?.unwrap_or_default())
    }

    /// The operator's cancel on a standalone rail: the rail's killing transaction (`StandaloneRail::cancel`)
    /// is stored with the attempt, then sent; once the rail proves the attempt dead
    /// the payout fails and its hold is released, instead of a next attempt. A cancel already
    /// stored is sent again, never made twice.
    pub(super) async fn cancel_attempt(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<AttemptTx, PipelineError> {
        let line = &self.line;
        let cancel = match attempt.txs.iter().find(|t| t.kind == TxKind::Cancel) {
            Some(existing) => existing.clone(),
            None => {
                let cancel = line.rail.cancel(attempt).await.map_err(|e| match e {
                    PrepareError::Refused(why) => PipelineError::Refused(why),
                    PrepareError::Unavailable(e) => PipelineError::RailUnavailable(e.0),
                })?;
                assert_eq!(cancel.kind, TxKind::Cancel, "a rail's cancel is a cancel");
                core.store_attempt_tx(attempt, &cancel).await?;
                cancel
            }
        };
        let mut with_cancel = attempt.clone();
        if !with_cancel.txs.iter().any(|t| t.hash == cancel.hash) {
            with_cancel.txs.push(cancel.clone());
        }
        tracing::info!(rail = line.rail.name(), payout = %payout.id, attempt = %attempt.id, cancel = %cancel.hash, "operator cancel sent");
        self.submit(core, payout, &with_cancel).await?;
        Ok(cancel)
    }

    /// The family's part of the sweep: up to `RESOLVE_CONCURRENCY_MAX` attempts at once, each
    /// settled on its own as soon as it is decided.
    pub(super) async fn resolve_live<'a>(
        &self,
        core: &Core,
        live: &[&'a (Attempt, Payout)],
    ) -> Vec<(&'a Attempt, Result<TickReport, PipelineError>)> {
        let resolutions: Vec<_> = live
            .iter()
            .map(|(attempt, payout)| async move {
                (attempt, self.resolve_attempt(core, attempt, payout).await)
            })
            .collect();
        futures::stream::iter(resolutions).buffer_unordered(RESOLVE_CONCURRENCY_MAX).collect().await
    }

    /// The rail holds the attempt until a person acts: one `attempt_unresolved` incident (the same
    /// one the age limit would open later), the attempt left live.
    async fn stalled(
        &self,
        core: &Core,
        attempt: &Attempt,
        payout: &Payout,
        reference: &TxRef,
        detail: &str,
        now: i64,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let detail = format!(
            "{} {reference} waits: {detail}; the attempt stays live and the hold stays until it moves",
            self.line.rail.name()
        );
        let incident = core.incident(IncidentKind::AttemptUnresolved, payout, attempt, detail, now);
        if core.store.open_incident_once(&incident, attempt.id.as_str()).await? {
            tracing::error!(rail = self.line.rail.name(), attempt = %attempt.id, payout = %payout.id, %reference, "the rail holds the attempt until a person acts: incident opened");
            report.unresolved_attempts += 1;
        }
        Ok(report)
    }

    /// The rail's answer needs a person: the attempt ends `reverted` with an incident and the
    /// hold stays; `None` when the payout already waits for one.
    async fn awaiting_a_person(
        &self,
        core: &Core,
        attempt: &Attempt,
        payout: &Payout,
        reference: TxRef,
        person: PersonNeeded,
    ) -> Result<Option<AttemptEnd>, PipelineError> {
        if payout.status == PayoutStatus::NeedsAttention {
            return Ok(None);
        }
        record_found_reference(core, attempt, &reference).await?;
        Ok(Some(AttemptEnd {
            attempt_to: AttemptStatus::Reverted,
            incident: Some((person.kind, person.evidence.clone())),
            evidence: person.evidence,
            mined: None,
            fee: person.fee_paid.map(|amount| FeePaid { reference, amount }),
            payout: PayoutEnd::NeedsAttention,
            paid_from: self.paid_from_rail(attempt, payout),
        }))
    }

    /// The end of an attempt its rail proved dead: after an operator's cancel the payout fails
    /// (with the cancel's fee); otherwise the next attempt may follow, up to the limit.
    fn dead_end(
        &self,
        attempt: &Attempt,
        payout: &Payout,
        proof: String,
        cancel_fee_paid: payoutd_domain::Amount,
    ) -> AttemptEnd {
        let cancel = attempt.txs.iter().find(|t| t.kind == TxKind::Cancel);
        let fee = match cancel {
            Some(cancel) => {
                Some(FeePaid { reference: cancel.hash.clone(), amount: cancel_fee_paid })
            }
            None => {
                assert!(
                    cancel_fee_paid.is_zero(),
                    "attempt {} has no cancel, yet its rail reports a cancel's fee",
                    attempt.id
                );
                None
            }
        };
        AttemptEnd {
            attempt_to: AttemptStatus::Dead,
            evidence: if cancel.is_some() {
                format!("canceled by an operator: {proof}")
            } else {
                proof
            },
            mined: None,
            fee,
            payout: if cancel.is_some() {
                PayoutEnd::Failed
            } else {
                PayoutEnd::NextAttempt { attempts_max: self.line.rail.attempts_max() }
            },
            incident: None,
            paid_from: self.paid_from_rail(attempt, payout),
        }
    }

    async fn resolve_attempt(
        &self,
        core: &Core,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<TickReport, PipelineError> {
        let line = &self.line;
        let now = core.clock.now_ms();
        let status = match line.rail.status(attempt, payout).await {
            Ok(status) => status,
            Err(_) => return Ok(TickReport::default()), // unknown, never absent
        };
        let end = match status {
            StandaloneStatus::Pending if attempt.last_sent_at_ms == 0 => {
                return self.send_left_unsent(core, payout, attempt, now).await;
            }
            StandaloneStatus::Pending => {
                if !self.may_resend(core, attempt, now) {
                    return Ok(TickReport::default());
                }
                // The same stored bytes or request (same idempotency key): never a new one.
                let mut report = self.submit(core, payout, attempt).await?;
                report.rebroadcasts += 1;
                return Ok(report);
            }
            StandaloneStatus::Stalled { reference, detail } => {
                record_found_reference(core, attempt, &reference).await?;
                return self.stalled(core, attempt, payout, &reference, &detail, now).await;
            }
            StandaloneStatus::Landed { reference, final_: false, .. } => {
                record_found_reference(core, attempt, &reference).await?;
                return Ok(TickReport::default());
            }
            StandaloneStatus::Landed {
                reference,
                final_: true,
                transfer_matches: true,
                fee_paid,
                moved,
            } => {
                record_found_reference(core, attempt, &reference).await?;
                AttemptEnd {
                    attempt_to: AttemptStatus::Confirmed,
                    evidence: format!("{} {reference} landed, final", line.rail.name()),
                    mined: None,
                    fee: Some(FeePaid { reference, amount: fee_paid }),
                    payout: PayoutEnd::paid_having_moved(payout.amount, moved),
                    incident: None,
                    paid_from: self.paid_from_rail(attempt, payout),
                }
            }
            status @ (StandaloneStatus::Landed {
                final_: true, transfer_matches: false, ..
            }
            | StandaloneStatus::Reverted { .. }
            | StandaloneStatus::Unrecognised { .. }) => {
                let (reference, person) = self.person_needed(status);
                match self.awaiting_a_person(core, attempt, payout, reference, person).await? {
                    Some(end) => end,
                    None => return Ok(TickReport::default()),
                }
            }
            StandaloneStatus::Dead { proof, cancel_fee_paid } => {
                if payout.status != PayoutStatus::Processing {
                    return Ok(TickReport::default()); // a person already looks at it
                }
                self.dead_end(attempt, payout, proof, cancel_fee_paid)
            }
        };
        Ok(core.settle(attempt, payout, end, now).await?.unwrap_or_default())
    }

    /// Why a status that proves neither payment nor death needs a person: a final transfer that
    /// is not the payout's, a transaction that failed at finality, a state the rail does not know.
    fn person_needed(&self, status: StandaloneStatus) -> (TxRef, PersonNeeded) {
        let rail = self.line.rail.name();
        match status {
            StandaloneStatus::Landed {
                reference,
                final_: true,
                transfer_matches: false,
                fee_paid,
                ..
            } => {
                let evidence = format!("{rail} {reference} landed without the payout's transfer");
                let kind = IncidentKind::TransferMismatch;
                (reference, PersonNeeded { kind, evidence, fee_paid: Some(fee_paid) })
            }
            StandaloneStatus::Reverted { reference, detail, fee_paid } => {
                let evidence = format!(
                    "{rail} {reference} failed at finality ({detail}): nothing but its fee moved"
                );
                let kind = IncidentKind::Reverted;
                (reference, PersonNeeded { kind, evidence, fee_paid: Some(fee_paid) })
            }
            StandaloneStatus::Unrecognised { reference, detail } => {
                let evidence = format!("{rail} {reference}: {detail}");
                let kind = IncidentKind::ProviderStateUnrecognised;
                (reference, PersonNeeded { kind, evidence, fee_paid: None })
            }
            other => unreachable!("{other:?} decides without a person"),
        }
    }
}

/// A provider's answer that was lost: the lookup carries the reference, recorded before anything
/// is decided on it.
async fn record_found_reference(
    core: &Core,
    attempt: &Attempt,
    reference: &TxRef,
) -> Result<(), PipelineError> {
    if let AttemptSlot::Provider { reference: None, .. } = &attempt.slot {
        core.store.record_reference(&attempt.id, reference).await?;
    }
    Ok(())
}
