//! Settlement: an attempt reaching its end together with what it means for its payout, the ledger and incidents.

use payoutd_domain::{Amount, Attempt, AttemptId, AttemptStatus, EventType, IncidentKind, Journal, Payout, PayoutStatus, TxRef};

use super::{Pipeline, PipelineError, TickReport, count_error, payout_transition};
use crate::pipeline_store::{AttemptSettlement, IncidentSubject, NewIncident, NextAttempt, PayoutEffect};
use crate::store::{NewEvent, TransitionOutcome};

/// How an attempt ends, as a rail's reasoning decided it; `settle` writes it as one transaction.
#[derive(Debug, Clone)]
pub(super) struct AttemptEnd {
    pub attempt_to: AttemptStatus,
    /// The proof (for `dead`) or what was seen (the landed hash, its block and depth).
    pub evidence: String,
    /// The transaction that was mined and final, if one was.
    pub mined: Option<MinedTx>,
    pub payout: PayoutEnd,
    pub incident: Option<(IncidentKind, String)>,
}

/// A final transaction of the attempt: where it landed and the network fee its wallet paid.
#[derive(Debug, Clone)]
pub(super) struct MinedTx {
    pub block: u64,
    pub hash: TxRef,
    /// In the chain's native asset's base units (gas used times the effective gas price).
    pub fee_paid: Amount,
}

/// What the attempt's end does to the payout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PayoutEnd {
    /// The transfer landed and is final: the hold becomes a final debit.
    Paid,
    /// Proven never paid (a final cancel): the hold is released.
    Failed,
    /// The nonce is used and the money did not move as intended: a person decides, the hold stays.
    NeedsAttention,
    /// Proven dead without moving money: the next attempt under the same hold, or, past the
    /// chain's limit of `attempts_max`, failed with the hold released.
    NextAttempt { attempts_max: u32 },
}

impl Pipeline {
    /// Writes `end` for `attempt` and `payout` in one store transaction, and says what it did. `None`
    /// if another worker (or an operator) moved either first (I5): nothing was written.
    pub(super) async fn settle(&self, attempt: &Attempt, payout: &Payout, end: AttemptEnd, now: i64) -> Result<Option<TickReport>, PipelineError> {
        let (settlement, report) = self.settlement_of(attempt, payout, end, now);
        match self.store.settle_attempt(&settlement).await? {
            TransitionOutcome::Applied(_) => {
                settlement.observe_applied(self.clock.now_ms());
                Ok(Some(report))
            }
            TransitionOutcome::Stale => Ok(None),
        }
    }

    /// The store write `end` means, and what it counts once applied.
    pub(super) fn settlement_of(&self, attempt: &Attempt, payout: &Payout, end: AttemptEnd, now: i64) -> (AttemptSettlement, TickReport) {
        let mut report = TickReport::default();
        let wallet_id = attempt.slot.as_evm().map(|slot| slot.wallet_id.as_str());
        let fee = end.mined.as_ref().and_then(|mined| self.fee_journal(attempt, mined));
        let journal_of = |kind: PayoutStatus| {
            let mut journals = match (kind, wallet_id) {
                (PayoutStatus::Paid, Some(wallet_id)) => {
                    vec![Journal::settle_from_wallet(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount, wallet_id)]
                }
                (PayoutStatus::Paid, None) => vec![Journal::settle(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount)],
                (PayoutStatus::Failed, _) => vec![Journal::release(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount)],
                _ => vec![],
            };
            journals.extend(fee.clone());
            journals
        };
        let effect = match end.payout {
            PayoutEnd::Paid => {
                report.confirmed += 1;
                PayoutEffect::Transition(payout_transition(payout, PayoutStatus::Paid, EventType::PayoutPaid, journal_of(PayoutStatus::Paid), now))
            }
            PayoutEnd::NextAttempt { attempts_max } if attempt.attempt_no < attempts_max => {
                // Only a transition carries journals: a mined transaction never ends this way.
                assert!(fee.is_none(), "attempt {} ends with a mined transaction but no payout transition to book its fee", attempt.id);
                report.next_attempts += 1;
                PayoutEffect::AwaitNextAttempt(NextAttempt {
                    payout_id: payout.id.clone(),
                    from_version: payout.version,
                    next_attempt_no: attempt.attempt_no + 1,
                    at_ms: now,
                })
            }
            PayoutEnd::Failed | PayoutEnd::NextAttempt { .. } => {
                report.failed += 1;
                PayoutEffect::Transition(payout_transition(payout, PayoutStatus::Failed, EventType::PayoutFailed, journal_of(PayoutStatus::Failed), now))
            }
            PayoutEnd::NeedsAttention => {
                report.needs_attention += 1;
                let mut transition =
                    payout_transition(payout, PayoutStatus::NeedsAttention, EventType::PayoutNeedsAttention, journal_of(PayoutStatus::NeedsAttention), now);
                // A payout may need a person once per attempt: the event is the attempt's (SPEC 6).
                transition.event = NewEvent::for_payout_attempt(EventType::PayoutNeedsAttention, &transition_after(payout, PayoutStatus::NeedsAttention, now), attempt.attempt_no, now);
                PayoutEffect::Transition(transition)
            }
        };
        let settlement = AttemptSettlement {
            attempt_id: attempt.id.clone(),
            attempt_from: attempt.status,
            attempt_to: end.attempt_to,
            incident: end.incident.map(|(kind, detail)| self.incident(kind, payout, attempt, detail, now)),
            evidence: end.evidence,
            mined: end.mined.map(|m| (m.block, m.hash)),
            payout: effect,
            attempt_created_at_ms: attempt.created_at_ms,
        };
        (settlement, report)
    }

    /// Writes the settlements a sweep decided in one store transaction. If that fails as a whole,
    /// each goes again on its own, so one that cannot be written holds back no other.
    pub(super) async fn settle_many(&self, settlements: Vec<(AttemptSettlement, TickReport)>) -> TickReport {
        let mut report = TickReport::default();
        let batch: Vec<AttemptSettlement> = settlements.iter().map(|(s, _)| s.clone()).collect();
        match self.store.settle_attempts(&batch).await {
            Ok(outcomes) => {
                assert_eq!(outcomes.len(), settlements.len(), "the store answers one outcome per settlement");
                let now = self.clock.now_ms();
                for (outcome, (settlement, counted)) in outcomes.iter().zip(&settlements) {
                    if let TransitionOutcome::Applied(_) = outcome {
                        report.add(*counted);
                        settlement.observe_applied(now);
                    }
                }
            }
            Err(e) => {
                count_error("settle", &e.into());
                tracing::warn!(settlements = settlements.len(), "settling the sweep's attempts together failed; one by one instead");
                for (settlement, counted) in &settlements {
                    match self.store.settle_attempt(settlement).await {
                        Ok(TransitionOutcome::Applied(_)) => {
                            report.add(*counted);
                            settlement.observe_applied(self.clock.now_ms());
                        }
                        Ok(TransitionOutcome::Stale) => {}
                        Err(e) => {
                            tracing::warn!(attempt = %settlement.attempt_id, error = %e, "settling this attempt failed; it is looked at again next pass");
                            count_error("settle", &e.into());
                        }
                    }
                }
            }
        }
        report
    }

    /// The fee journal of a mined transaction of an EVM attempt, in its chain's native asset.
    fn fee_journal(&self, attempt: &Attempt, mined: &MinedTx) -> Option<Journal> {
        if mined.fee_paid.is_zero() {
            return None;
        }
        let slot = attempt.slot.as_evm().unwrap_or_else(|| panic!("attempt {} has a mined transaction but no hot wallet", attempt.id));
        let (chain, _) = self.wallet_of(&slot.wallet_id).unwrap_or_else(|| panic!("attempt {} settles on unknown wallet {}", attempt.id, slot.wallet_id));
        let native = chain.native_asset();
        Some(Journal::fee(&slot.wallet_id, &native.code, mined.hash.as_str(), mined.fee_paid))
    }

    pub(super) fn incident(&self, kind: IncidentKind, payout: &Payout, attempt: &Attempt, detail: String, now: i64) -> NewIncident {
        self.incident_about(kind, payout, Some(&attempt.id), detail, now)
    }

    /// An incident about a payout (and the attempt concerned, when the database has it), with its
    /// `incident.opened` event for the merchant.
    pub(super) fn incident_about(&self, kind: IncidentKind, payout: &Payout, attempt_id: Option<&AttemptId>, detail: String, now: i64) -> NewIncident {
        let subject = IncidentSubject {
            merchant_id: Some(payout.merchant_id.clone()),
            payout_id: Some(payout.id.clone()),
            attempt_id: attempt_id.cloned(),
        };
        NewIncident::new(kind, subject, detail, now)
    }
}

/// The payout as it will read after moving to `to`: what its event carries.
fn transition_after(payout: &Payout, to: PayoutStatus, now: i64) -> Payout {
    let mut after = payout.clone();
    after.status = to;
    after.version += 1;
    after.updated_at_ms = now;
    after
}
