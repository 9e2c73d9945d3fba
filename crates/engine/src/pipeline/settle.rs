//! Settlement: an attempt reaching its end together with what it means for its payout, the ledger and incidents.

use payoutd_domain::{Amount, AssetCode, Attempt, AttemptId, AttemptSlot, AttemptStatus, EventType, IncidentKind, Journal, Payout, PayoutStatus, TxRef};

use super::{Pipeline, PipelineError, TickReport, count_error, payout_transition};
use crate::pipeline_store::{AttemptSettlement, IncidentSubject, NewIncident, NextAttempt, PayoutEffect};
use crate::store::{NewEvent, TransitionOutcome};

/// How an attempt ends, as a rail's reasoning decided it; `settle` writes it as one transaction.
#[derive(Debug, Clone)]
pub(super) struct AttemptEnd {
    pub attempt_to: AttemptStatus,
    /// The proof (for `dead`) or what was seen (the landed hash, its block and depth).
    pub evidence: String,
    /// The transaction that was mined and final, if one was (rails with blocks).
    pub mined: Option<MinedTx>,
    /// What the attempt's landed transaction cost its hot wallet in the rail's native asset.
    pub fee: Option<FeePaid>,
    pub payout: PayoutEnd,
    pub incident: Option<(IncidentKind, String)>,
}

/// A final transaction of the attempt: where it landed.
#[derive(Debug, Clone)]
pub(super) struct MinedTx {
    pub block: u64,
    pub hash: TxRef,
}

/// The network fee (and rent) a landed transaction of the attempt cost its hot wallet.
#[derive(Debug, Clone)]
pub(super) struct FeePaid {
    /// The landed transaction: the fee journal's reference.
    pub reference: TxRef,
    /// In the rail's native asset's base units (EVM: gas used times the effective gas price).
    pub amount: Amount,
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
        let wallet = self.ledger_wallet_of(attempt, payout);
        let fee = end.fee.as_ref().filter(|fee| !fee.amount.is_zero()).map(|fee| {
            let (wallet_id, native) = wallet.as_ref().unwrap_or_else(|| panic!("attempt {} paid a fee from no hot wallet the ledger holds", attempt.id));
            Journal::fee(wallet_id, native, fee.reference.as_str(), fee.amount)
        });
        let journal_of = |kind: PayoutStatus| {
            let mut journals = match (kind, &wallet) {
                (PayoutStatus::Paid, Some((wallet_id, _))) => {
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

    /// The hot wallet whose ledger account the attempt's payout and fees leave, with the native
    /// asset fees are paid in; `None` on a rail whose source account the ledger does not hold.
    pub(super) fn ledger_wallet_of(&self, attempt: &Attempt, payout: &Payout) -> Option<(String, AssetCode)> {
        if let Some(slot) = attempt.slot.as_evm() {
            let (chain, _) = self.wallet_of(&slot.wallet_id).unwrap_or_else(|| panic!("attempt {} settles on unknown wallet {}", attempt.id, slot.wallet_id));
            return Some((slot.wallet_id.clone(), chain.native_asset().code.clone()));
        }
        let wallet = self.standalone_of(&payout.asset)?.rail.hot_wallet()?;
        if let AttemptSlot::Solana { fee_payer, .. } = &attempt.slot {
            // Booking one wallet's payout against another's account would be wrong money.
            assert_eq!(fee_payer, &wallet.id, "attempt {} was paid by a hot wallet its rail does not hold", attempt.id);
        }
        Some((wallet.id.clone(), wallet.native.code.clone()))
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
