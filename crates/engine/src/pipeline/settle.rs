//! Settlement: an attempt reaching its end together with what it means for its payout, the ledger and incidents.

use payoutd_domain::{
    Amount, Attempt, AttemptStatus, EventType, IncidentKind, Journal, Payout, PayoutStatus, TxRef,
    WalletSend,
};

use super::family::PaidFrom;
use super::{Core, PipelineError, TickReport, count_error, payout_transition, transition_after};
use crate::pipeline_store::{AttemptSettlement, NextAttempt, PayoutEffect};
use crate::store::{
    EventAttemptBody, NewEvent, PayoutTransition, TransitionOutcome, payout_attempt_event_json,
};

/// How an attempt ends, as a rail's reasoning decided it; `settle` writes it as one transaction.
#[derive(Debug, Clone)]
pub(crate) struct AttemptEnd {
    pub attempt_to: AttemptStatus,
    /// The proof (for `dead`) or what was seen (the landed hash, its block and depth).
    pub evidence: String,
    /// The transaction that was mined and final, if one was (rails with blocks).
    pub mined: Option<MinedTx>,
    /// What the attempt's landed transaction cost its hot wallet in the rail's native asset.
    pub fee: Option<FeePaid>,
    pub payout: PayoutEnd,
    pub incident: Option<(IncidentKind, String)>,
    /// Where the payout and the fee leave from: the family paying the attempt says.
    pub paid_from: PaidFrom,
}

/// A final transaction of the attempt: where it landed.
#[derive(Debug, Clone)]
pub(crate) struct MinedTx {
    pub block: u64,
    pub hash: TxRef,
}

/// The network fee (and rent) a landed transaction of the attempt cost its hot wallet.
#[derive(Debug, Clone)]
pub(crate) struct FeePaid {
    /// The landed transaction: the fee journal's reference.
    pub reference: TxRef,
    /// In the rail's native asset's base units (EVM: gas used times the effective gas price).
    pub amount: Amount,
}

/// What the attempt's end does to the payout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PayoutEnd {
    /// The transfer landed and is final: the hold becomes a final debit.
    Paid,
    /// As `Paid`, with part of the amount withheld on the way within what the rail tolerates (a
    /// provider's gas taken from the amount): the merchant pays the whole amount, and the ledger
    /// says how much of it reached the provider rather than the recipient.
    PaidLessWithheld(Amount),
    /// Proven never paid (an operator's cancel landed): the hold is released.
    Failed,
    /// The attempt landed and the money did not move as intended: a person decides, the hold stays.
    NeedsAttention,
    /// Proven dead without moving money: the next attempt under the same hold, or, past the
    /// rail's limit of `attempts_max`, failed with the hold released.
    NextAttempt { attempts_max: u32 },
}

impl PayoutEnd {
    /// A matching transfer that delivered `moved` of the payout's `amount`: paid, less what was
    /// withheld on the way when it delivered less (the rail judged it a match within its tolerance).
    pub(crate) fn paid_having_moved(amount: Amount, moved: Amount) -> PayoutEnd {
        match amount.checked_sub(moved) {
            Some(withheld) if !withheld.is_zero() => PayoutEnd::PaidLessWithheld(withheld),
            _ => PayoutEnd::Paid,
        }
    }
}

/// What an attempt's end books besides the payout's own move: the hot wallet it left, when the
/// ledger holds one, and the fee its landed transaction cost that wallet.
struct EndBooks {
    wallet: Option<WalletSend>,
    fee: Option<Journal>,
    withheld: Amount,
}

impl EndBooks {
    fn of(attempt: &Attempt, end: &AttemptEnd) -> EndBooks {
        let wallet = match &end.paid_from {
            PaidFrom::HotWallet { wallet_id, native, sent_as } => {
                Some((wallet_id, native, sent_as))
            }
            PaidFrom::Elsewhere => None,
        };
        let fee = end.fee.as_ref().filter(|fee| !fee.amount.is_zero()).map(|fee| {
            // A fee nobody can book would leave the wallet unexplained: stop rather than lose it.
            let (wallet_id, native, _) = wallet.unwrap_or_else(|| {
                panic!("attempt {} paid a fee from no hot wallet the ledger holds", attempt.id)
            });
            Journal::fee(wallet_id, native, fee.reference.as_str(), fee.amount)
        });
        let wallet = wallet.map(|(wallet_id, _, sent_as)| WalletSend {
            wallet_id: wallet_id.clone(),
            sent_as: sent_as.clone(),
        });
        let withheld = match end.payout {
            PayoutEnd::PaidLessWithheld(withheld) => withheld,
            _ => Amount::ZERO,
        };
        EndBooks { wallet, fee, withheld }
    }
}

impl Core {
    /// Writes `end` for `attempt` and `payout` in one store transaction, and says what it did. `None`
    /// if another worker (or an operator) moved either first (I5): nothing was written.
    pub(crate) async fn settle(
        &self,
        attempt: &Attempt,
        payout: &Payout,
        end: AttemptEnd,
        now: i64,
    ) -> Result<Option<TickReport>, PipelineError> {
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
    pub(crate) fn settlement_of(
        &self,
        attempt: &Attempt,
        payout: &Payout,
        end: AttemptEnd,
        now: i64,
    ) -> (AttemptSettlement, TickReport) {
        let mut report = TickReport::default();
        let books = EndBooks::of(attempt, &end);
        let effect = match end.payout {
            PayoutEnd::Paid | PayoutEnd::PaidLessWithheld(_) => {
                report.confirmed += 1;
                // The payout is paid once, whichever attempt paid it: the event stays the payout's,
                // and names the attempt (and so the rail) that paid.
                PayoutEffect::Transition(self.ending(
                    attempt,
                    payout,
                    (PayoutStatus::Paid, EventType::PayoutPaid),
                    &books,
                    now,
                ))
            }
            PayoutEnd::NextAttempt { attempts_max } if attempt.attempt_no < attempts_max => {
                // Only a transition carries journals: a mined transaction never ends this way.
                assert!(
                    books.fee.is_none(),
                    "attempt {} ends with a mined transaction but no payout transition to book its fee",
                    attempt.id
                );
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
                PayoutEffect::Transition(self.ending(
                    attempt,
                    payout,
                    (PayoutStatus::Failed, EventType::PayoutFailed),
                    &books,
                    now,
                ))
            }
            PayoutEnd::NeedsAttention => {
                report.needs_attention += 1;
                PayoutEffect::Transition(self.needing_a_person(attempt, payout, &books, now))
            }
        };
        let settlement = AttemptSettlement {
            attempt_id: attempt.id.clone(),
            attempt_from: attempt.status,
            attempt_to: end.attempt_to,
            incident: end
                .incident
                .map(|(kind, detail)| self.incident(kind, payout, attempt, detail, now)),
            evidence: end.evidence,
            mined: end.mined.map(|m| (m.block, m.hash)),
            payout: effect,
            attempt_created_at_ms: attempt.created_at_ms,
        };
        (settlement, report)
    }

    /// The payout's final transition (`Paid` or `Failed`) with its books; its event names the
    /// attempt (and so the rail) that ended it.
    fn ending(
        &self,
        attempt: &Attempt,
        payout: &Payout,
        (to, event_type): (PayoutStatus, EventType),
        books: &EndBooks,
        now: i64,
    ) -> PayoutTransition {
        let journals = Self::journals(payout, to, books);
        let mut transition = payout_transition(payout, to, event_type, journals, now);
        transition.event.payload_json = payout_attempt_event_json(
            &transition_after(payout, to, now),
            &EventAttemptBody::of(attempt),
        );
        transition
    }

    /// The payout put before a person, the hold kept.
    fn needing_a_person(
        &self,
        attempt: &Attempt,
        payout: &Payout,
        books: &EndBooks,
        now: i64,
    ) -> PayoutTransition {
        let to = PayoutStatus::NeedsAttention;
        let journals = Self::journals(payout, to, books);
        let mut transition =
            payout_transition(payout, to, EventType::PayoutNeedsAttention, journals, now);
        // A payout may need a person once per attempt: the event is the attempt's, not the payout's.
        transition.event = NewEvent::for_payout_attempt(
            EventType::PayoutNeedsAttention,
            &transition_after(payout, to, now),
            &EventAttemptBody::of(attempt),
            now,
        );
        transition
    }

    /// The journals of the payout moving to `to`: paid settles the hold (out of the wallet the
    /// ledger holds, if any), failed releases it, and the landed transaction's fee rides along.
    fn journals(payout: &Payout, to: PayoutStatus, books: &EndBooks) -> Vec<Journal> {
        let mut journals = match (to, &books.wallet) {
            (PayoutStatus::Paid, Some(wallet)) => Journal::settle_from_wallet(
                &payout.merchant_id,
                &payout.asset,
                payout.id.as_str(),
                payout.amount,
                wallet,
            ),
            (PayoutStatus::Paid, None) => vec![Journal::settle(
                &payout.merchant_id,
                &payout.asset,
                payout.id.as_str(),
                payout.amount,
            )],
            (PayoutStatus::Failed, _) => payout.release_journals(),
            _ => vec![],
        };
        if to == PayoutStatus::Paid && !books.withheld.is_zero() {
            // Never more than the payout: the rail judged it within its tolerance.
            assert!(
                books.withheld < payout.amount,
                "payout {} withheld its whole amount",
                payout.id
            );
            journals.push(Journal::withheld(&payout.asset, payout.id.as_str(), books.withheld));
        }
        journals.extend(books.fee.clone());
        journals
    }

    /// Writes the settlements a sweep decided in one store transaction. If that fails as a whole,
    /// each goes again on its own, so one that cannot be written holds back no other.
    pub(crate) async fn settle_many(
        &self,
        settlements: Vec<(AttemptSettlement, TickReport)>,
    ) -> TickReport {
        let mut report = TickReport::default();
        let batch: Vec<AttemptSettlement> = settlements.iter().map(|(s, _)| s.clone()).collect();
        match self.store.settle_attempts(&batch).await {
            Ok(outcomes) => {
                assert_eq!(
                    outcomes.len(),
                    settlements.len(),
                    "the store answers one outcome per settlement"
                );
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
                tracing::warn!(
                    settlements = settlements.len(),
                    "settling the sweep's attempts together failed; one by one instead"
                );
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
}
