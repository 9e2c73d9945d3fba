//! Operator actions: review decisions, cancels after signing and verdicts on payouts that need a person; every proof comes from the family paying the payout.

use payoutd_domain::{
    Attempt, AttemptStatus, AttemptTx, EventType, Journal, Payout, PayoutId, PayoutStatus,
};

use super::family::{NothingMoved, PaidFrom, RailFamily, family_for_attempt, owner_of};
use super::settle::{AttemptEnd, PayoutEnd};
use super::{Core, LastAttempt, PipelineError, Verdict, payout_transition, transition_after};
use crate::store::NewEvent;

/// The operator stage.
pub(super) struct Operator<'a> {
    pub core: &'a Core,
    pub families: &'a [Box<dyn RailFamily>],
}

impl Operator<'_> {
    /// The family making attempt `attempt_no` of `payout` (its route's rail for that number).
    fn family_for(
        &self,
        payout: &Payout,
        attempt_no: u32,
    ) -> Result<&dyn RailFamily, PipelineError> {
        family_for_attempt(self.families, &self.core.routes, payout, attempt_no).ok_or_else(|| {
            PipelineError::Refused(format!(
                "no rail for attempt {attempt_no} of a payout in {} in this process",
                payout.asset
            ))
        })
    }

    /// The family whose rail made `attempt`: only it can prove what became of it.
    fn owner(&self, attempt: &Attempt, payout: &Payout) -> Result<&dyn RailFamily, PipelineError> {
        owner_of(self.families, &self.core.routes, attempt, payout).ok_or_else(|| {
            PipelineError::Refused(format!(
                "no rail in this process made attempt {} of a payout in {}",
                attempt.attempt_no, payout.asset
            ))
        })
    }

    /// The family that must prove what the payout's last attempt did: the rail of the attempt the
    /// send guard remembers and the database lost, else the rail that made the last stored one.
    async fn last_attempts_family(
        &self,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<&dyn RailFamily, PipelineError> {
        match self.core.last_attempt(payout, attempts).await? {
            LastAttempt::Stored(last) => self.owner(last, payout),
            LastAttempt::Lost { attempt_no, .. } => self.family_for(payout, attempt_no),
            LastAttempt::NoneMade => self.family_for(payout, 1),
        }
    }

    pub async fn approve(&self, id: &PayoutId) -> Result<Payout, PipelineError> {
        let payout = self.core.operator_payout(id, PayoutStatus::HeldForReview).await?;
        self.decide(&payout, PayoutStatus::Approved, EventType::PayoutReviewApproved, vec![]).await
    }

    pub async fn reject(&self, id: &PayoutId) -> Result<Payout, PipelineError> {
        let payout = self.core.operator_payout(id, PayoutStatus::HeldForReview).await?;
        let journals = payout.release_journals();
        let rejected = self
            .decide(&payout, PayoutStatus::Rejected, EventType::PayoutRejected, journals)
            .await?;
        metrics::counter!("payoutd_payouts_rejected_total").increment(1);
        Ok(rejected)
    }

    /// The payout fails only when the resolver sees the cancel proven; if the payout lands first,
    /// it is paid. Asked again, it sends the cancel already stored instead of making a new one.
    pub async fn cancel_signed(&self, id: &PayoutId) -> Result<AttemptTx, PipelineError> {
        let payout = self.core.operator_payout(id, PayoutStatus::Processing).await?;
        let attempt = self.core.live_attempt(&payout).await?;
        self.owner(&attempt, &payout)?.cancel(self.core, &payout, &attempt).await
    }

    /// A person settles a payout in needs_attention, with evidence. Every verdict rests on the
    /// rail's proof too. With a live attempt, paid or failed needs it unable to land. Without one,
    /// failed and retry need the last attempt (stored, or only remembered by the send guard)
    /// proven to have moved nothing (a transfer that succeeded may have moved money, I6). Retry
    /// starts the next attempt under the same hold, within the rail's limit of attempts.
    pub async fn resolve_needs_attention(
        &self,
        id: &PayoutId,
        verdict: Verdict,
        evidence: &str,
    ) -> Result<Payout, PipelineError> {
        let core = self.core;
        let payout = core.operator_payout(id, PayoutStatus::NeedsAttention).await?;
        if evidence.trim().is_empty() {
            return Err(PipelineError::Refused("evidence is required".into()));
        }
        let attempts = core.store.attempts_of(&payout.id).await?;
        if let Some(live) = attempts.iter().find(|a| a.status.is_live()) {
            return self
                .resolve_with_live_attempt(
                    self.owner(live, &payout)?,
                    &payout,
                    live,
                    verdict,
                    evidence,
                )
                .await;
        }
        let family = self.last_attempts_family(&payout, &attempts).await?;
        tracing::info!(payout = %payout.id, ?verdict, %evidence, "operator verdict");
        match verdict {
            Verdict::Paid => self.verdict_paid(family, &payout, &attempts).await,
            Verdict::Failed => self.verdict_failed(family, &payout, &attempts).await,
            Verdict::Retry => self.verdict_retry(family, &payout, &attempts).await,
        }
    }

    /// Paid with no live attempt: booked out of the wallet the last attempt left.
    async fn verdict_paid(
        &self,
        family: &dyn RailFamily,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<Payout, PipelineError> {
        let journals = self.paid_journals(family, payout, attempts).await?;
        self.decide(payout, PayoutStatus::Paid, EventType::PayoutPaid, journals).await
    }

    /// Failed with no live attempt: only on the rail's proof that the last attempt moved nothing,
    /// and then the hold is released.
    async fn verdict_failed(
        &self,
        family: &dyn RailFamily,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<Payout, PipelineError> {
        let proof = self.nothing_moved(family, payout, attempts).await?;
        let mut journals = proof.journals;
        journals.extend(payout.release_journals());
        self.decide(payout, PayoutStatus::Failed, EventType::PayoutFailed, journals).await
    }

    /// A person's decision written as the payout's transition now, with its books and event;
    /// refused when the payout moved since it was read.
    async fn decide(
        &self,
        payout: &Payout,
        to: PayoutStatus,
        event: EventType,
        journals: Vec<Journal>,
    ) -> Result<Payout, PipelineError> {
        let core = self.core;
        let now = core.clock.now_ms();
        core.applied(core.transition(payout, to, event, journals, now).await?)
    }

    /// Retry: on the same proof as failed, the next attempt under the same hold, within the limit
    /// of attempts of the rail that would make it.
    async fn verdict_retry(
        &self,
        family: &dyn RailFamily,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<Payout, PipelineError> {
        let core = self.core;
        let proof = self.nothing_moved(family, payout, attempts).await?;
        let next = proof.attempt_no + 1;
        let attempts_max = self.family_for(payout, next)?.attempts_max();
        if next > attempts_max {
            return Err(PipelineError::Refused(format!(
                "the rail allows {attempts_max} attempts per payout; resolve it as failed"
            )));
        }
        let now = core.clock.now_ms();
        let after = transition_after(payout, PayoutStatus::Processing, now);
        let mut retry = payout_transition(
            payout,
            PayoutStatus::Processing,
            EventType::PayoutProcessing,
            proof.journals,
            now,
        );
        retry.event = NewEvent::for_payout_attempt(
            EventType::PayoutProcessing,
            &after,
            &crate::store::EventAttemptBody::numbered(next),
            now,
        );
        core.applied(core.store.retry_payout(&retry, next).await?)
    }

    /// Either verdict ends the live attempt: it must provably be unable to land, or the payout
    /// could be paid again (paid) or re-credited while the money leaves (failed).
    async fn resolve_with_live_attempt(
        &self,
        family: &dyn RailFamily,
        payout: &Payout,
        attempt: &Attempt,
        verdict: Verdict,
        evidence: &str,
    ) -> Result<Payout, PipelineError> {
        let core = self.core;
        let payout_end = match verdict {
            Verdict::Paid => PayoutEnd::Paid,
            Verdict::Failed => PayoutEnd::Failed,
            Verdict::Retry => {
                return Err(PipelineError::Refused(
                    "the payout has a live attempt; cancel it first".into(),
                ));
            }
        };
        self.cannot_land(family, attempt, payout).await?;
        let proof = format!("operator resolved the payout as {verdict:?}: {evidence}");
        let end = AttemptEnd {
            attempt_to: AttemptStatus::Dead,
            evidence: proof,
            mined: None,
            fee: None,
            payout: payout_end,
            incident: None,
            paid_from: self.paid_from(family, attempt, payout),
        };
        if core.settle(attempt, payout, end, core.clock.now_ms()).await?.is_none() {
            return Err(PipelineError::Refused(
                "the payout changed concurrently; look again".into(),
            ));
        }
        core.store.payout_by_id(&payout.id).await?.ok_or(PipelineError::NotFound)
    }

    /// What a `paid` verdict without a live attempt books: the payout out of the account the
    /// money left, with the fee, as the family reads it.
    async fn paid_journals(
        &self,
        family: &dyn RailFamily,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<Vec<Journal>, PipelineError> {
        #[cfg(feature = "defects")]
        if self.core.config.defects.verdict_books_wallet_nothing {
            return Ok(vec![Journal::settle(
                &payout.merchant_id,
                &payout.asset,
                payout.id.as_str(),
                payout.amount,
            )]);
        }
        family.paid_journals(self.core, payout, attempts).await
    }

    /// The account a live attempt's money leaves when a verdict ends it.
    fn paid_from(&self, family: &dyn RailFamily, attempt: &Attempt, payout: &Payout) -> PaidFrom {
        #[cfg(feature = "defects")]
        if self.core.config.defects.verdict_books_wallet_nothing {
            return PaidFrom::Elsewhere;
        }
        family.paid_from(attempt, payout)
    }

    /// The family's proof that the payout's last attempt moved nothing.
    async fn nothing_moved(
        &self,
        family: &dyn RailFamily,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<NothingMoved, PipelineError> {
        #[cfg(feature = "defects")]
        if self.core.config.defects.verdict_without_proof {
            return Ok(NothingMoved {
                attempt_no: attempts.last().map_or(1, |a| a.attempt_no),
                journals: Vec::new(),
            });
        }
        family.prove_nothing_moved(self.core, payout, attempts).await
    }

    /// The family's proof that a live attempt can never land.
    async fn cannot_land(
        &self,
        family: &dyn RailFamily,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<(), PipelineError> {
        #[cfg(feature = "defects")]
        if self.core.config.defects.verdict_without_proof {
            return Ok(());
        }
        family.prove_cannot_land(self.core, attempt, payout).await
    }
}
