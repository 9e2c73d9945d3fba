//! What every stage shares: the store, the clock, the configuration and the send guard, with the conditional moves and incidents each stage makes.

use std::sync::Arc;

use payoutd_domain::{
    Attempt, AttemptId, AttemptTx, EventType, IncidentKind, Journal, Payout, PayoutId, PayoutStatus,
};

use super::guard::Guard;
use super::{PipelineConfig, PipelineError, payout_transition};
use crate::clock::Clock;
use crate::pipeline_store::{IncidentSubject, NewIncident, PipelineStore};
use crate::store::{NewEvent, PayoutTransition, StoreError, TransitionOutcome};

/// The attempt an operator's verdict is about (`Core::last_attempt`).
pub(crate) enum LastAttempt<'a> {
    /// Attempt `attempt_no`, which the database lost; `record` is what the send guard kept of it.
    Lost { attempt_no: u32, record: String },
    /// The payout's last stored attempt.
    Stored(&'a Attempt),
    /// The payout has made no attempt.
    NoneMade,
}

impl LastAttempt<'_> {
    /// A verdict that something moved nothing needs an attempt to judge.
    pub(crate) fn no_attempt_to_judge() -> PipelineError {
        PipelineError::Refused("the payout has no attempt to judge".into())
    }
}

/// The pipeline's shared services; every stage and every rail family works through it.
/// Approved payouts read to match one reference found on a chain, oldest first. Past it a
/// transfer stays unmatched, for a person.
const RELINK_CANDIDATES_MAX: u32 = 10_000;

pub(crate) struct Core {
    pub(crate) store: Arc<dyn PipelineStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: PipelineConfig,
    pub(crate) guard: Guard,
    /// Where the next pass over second payments awaiting their books resumes (this process's turn
    /// through them: each pass takes the next `AWAITING_BOOKS_PER_PASS_MAX`).
    pub(crate) books_cursor: std::sync::Mutex<crate::pipeline_store::BooksCursor>,
    /// Every hot wallet the pipeline's families pay from, as destinations.
    pub(crate) own_wallets: Vec<payoutd_domain::Destination>,
    /// Which rail makes each attempt of a payout in a routed asset (the others stay on their own).
    pub(crate) routes: payoutd_domain::Routes,
    /// The deployment's reference key, read from the store the first time it is needed.
    pub(crate) reference_key: tokio::sync::OnceCell<payoutd_domain::ReferenceKey>,
}

impl Core {
    pub(crate) async fn transition(
        &self,
        payout: &Payout,
        to: PayoutStatus,
        event_type: EventType,
        journals: Vec<Journal>,
        now: i64,
    ) -> Result<TransitionOutcome, PipelineError> {
        Ok(self
            .store
            .transition_payout(&payout_transition(payout, to, event_type, journals, now))
            .await?)
    }

    /// Whether `payout` would pay one of this deployment's own hot wallets. Intake refuses those,
    /// but a process that knew no wallet (an API-only process started before a wallet was
    /// registered) may have accepted one: on every rail its first attempt is then never made, and
    /// the payout fails unsent, its hold released.
    pub(crate) fn pays_own_wallet(&self, payout: &Payout) -> bool {
        self.own_wallets.contains(&payout.destination)
    }

    pub(crate) fn applied(&self, outcome: TransitionOutcome) -> Result<Payout, PipelineError> {
        match outcome {
            TransitionOutcome::Applied(p) => Ok(p),
            TransitionOutcome::Stale => {
                Err(PipelineError::Refused("the payout changed concurrently; look again".into()))
            }
        }
    }

    pub(crate) async fn operator_payout(
        &self,
        id: &PayoutId,
        expected: PayoutStatus,
    ) -> Result<Payout, PipelineError> {
        let payout = self.store.payout_by_id(id).await?.ok_or(PipelineError::NotFound)?;
        if payout.status != expected {
            return Err(PipelineError::WrongState(payout.status));
        }
        Ok(payout)
    }

    /// The reference `payout`'s transactions carry: its business event's, under the deployment's
    /// key (the same in any payout made for that event).
    pub(crate) async fn reference_of(
        &self,
        payout: &Payout,
    ) -> Result<payoutd_domain::ChainReference, PipelineError> {
        let key = self.reference_key.get_or_try_init(|| self.store.reference_key()).await?;
        Ok(payoutd_domain::ChainReference::of(key, &payout.merchant_id, &payout.key))
    }

    /// The approved payout in an asset `pays` accepts whose business event's reference is
    /// `reference`, if one is among the oldest `RELINK_CANDIDATES_MAX` approved payouts: a final
    /// transfer out of a hot wallet that names it is its attempt whose commit the database lost
    /// after it was sent (a lost attempt's payout was approved before those approved since).
    pub(crate) async fn approved_payout_carrying(
        &self,
        reference: &payoutd_domain::ChainReference,
        pays: impl Fn(&payoutd_domain::AssetCode) -> bool,
    ) -> Result<Option<Payout>, PipelineError> {
        let candidates =
            self.store.payouts_in_status(PayoutStatus::Approved, RELINK_CANDIDATES_MAX).await?;
        for payout in candidates.into_iter().filter(|p| pays(&p.asset)) {
            if &self.reference_of(&payout).await? == reference {
                return Ok(Some(payout));
            }
        }
        Ok(None)
    }

    pub(crate) async fn live_attempt(&self, payout: &Payout) -> Result<Attempt, PipelineError> {
        self.store
            .attempts_of(&payout.id)
            .await?
            .into_iter()
            .find(|a| a.status.is_live())
            .ok_or_else(|| PipelineError::Refused("the payout has no live attempt".into()))
    }

    /// What the send guard remembers of attempt `attempt_no` of `payout`, which the database is about
    /// to create: anything means the database lost an attempt that may have gone out (SPEC 4 step 3).
    pub(crate) async fn remembered(
        &self,
        payout: &Payout,
        attempt_no: u32,
    ) -> Result<Option<String>, PipelineError> {
        self.guard.remembered(payout, attempt_no).await
    }

    /// The attempt a verdict on `payout` is about: one only the send guard remembers (the database
    /// lost it after it may have gone out), else the last stored one.
    pub(crate) async fn last_attempt<'a>(
        &self,
        payout: &Payout,
        attempts: &'a [Attempt],
    ) -> Result<LastAttempt<'a>, PipelineError> {
        let next_no = attempts.last().map_or(0, |a| a.attempt_no) + 1;
        if let Some(record) = self.remembered(payout, next_no).await? {
            return Ok(LastAttempt::Lost { attempt_no: next_no, record });
        }
        Ok(attempts.last().map_or(LastAttempt::NoneMade, LastAttempt::Stored))
    }

    /// A payout whose attempt the database lost waits for a person: its bytes may be out there, so it
    /// can be neither signed again nor released until its rail proves that attempt cannot land.
    pub(crate) fn lost_attempt_transition(
        &self,
        payout: &Payout,
        attempt_no: u32,
        now: i64,
    ) -> PayoutTransition {
        let after = super::transition_after(payout, PayoutStatus::NeedsAttention, now);
        let mut transition = payout_transition(
            payout,
            PayoutStatus::NeedsAttention,
            EventType::PayoutNeedsAttention,
            vec![],
            now,
        );
        transition.event = NewEvent::for_payout_attempt(
            EventType::PayoutNeedsAttention,
            &after,
            &crate::store::EventAttemptBody::numbered(attempt_no),
            now,
        );
        transition
    }

    pub(crate) async fn open_lost_attempt_incident(
        &self,
        payout: &Payout,
        attempt_no: u32,
        record: &str,
        now: i64,
    ) -> Result<(), PipelineError> {
        tracing::error!(payout = %payout.id, attempt_no, %record, "the send guard remembers an attempt the database does not have: the payout needs a person");
        let detail = format!(
            "the send guard remembers attempt {attempt_no} ({record}) that the database does not have; it may have been sent. \
             Resolve with the rail's proof: retry or failed once it cannot land, paid if it landed"
        );
        let incident = self.incident_about(IncidentKind::LostAttempt, payout, None, detail, now);
        self.store
            .open_incident_once(&incident, &format!("lost:{}:{attempt_no}", payout.id))
            .await?;
        Ok(())
    }

    /// The payout fails before anything that could land exists, and its hold is released with it.
    pub(crate) fn fail_unsent(&self, payout: &Payout, now: i64) -> PayoutTransition {
        payout_transition(
            payout,
            PayoutStatus::Failed,
            EventType::PayoutFailed,
            payout.release_journals(),
            now,
        )
    }

    /// Stores a replacement or cancel before it is sent. Two workers that built the same bytes (signing is
    /// deterministic) store one row: the second finds its hash already on the attempt and goes on.
    pub(crate) async fn store_attempt_tx(
        &self,
        attempt: &Attempt,
        tx: &AttemptTx,
    ) -> Result<(), PipelineError> {
        match self.store.add_attempt_tx(&attempt.id, tx).await {
            Ok(()) => Ok(()),
            Err(StoreError::Invariant(why)) => {
                let stored = self.store.attempts_of(&attempt.payout_id).await?;
                if stored
                    .iter()
                    .any(|a| a.id == attempt.id && a.txs.iter().any(|t| t.hash == tx.hash))
                {
                    Ok(())
                } else {
                    Err(StoreError::Invariant(why).into())
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn incident(
        &self,
        kind: IncidentKind,
        payout: &Payout,
        attempt: &Attempt,
        detail: String,
        now: i64,
    ) -> NewIncident {
        self.incident_about(kind, payout, Some(&attempt.id), detail, now)
    }

    /// An incident about a payout (and the attempt concerned, when the database has it), with its
    /// `incident.opened` event for the merchant.
    pub(crate) fn incident_about(
        &self,
        kind: IncidentKind,
        payout: &Payout,
        attempt_id: Option<&AttemptId>,
        detail: String,
        now: i64,
    ) -> NewIncident {
        let subject = IncidentSubject {
            merchant_id: Some(payout.merchant_id.clone()),
            payout_id: Some(payout.id.clone()),
            attempt_id: attempt_id.cloned(),
        };
        NewIncident::new(kind, subject, detail, now)
    }
}
