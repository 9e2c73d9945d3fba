//! Reconcile (SPEC 4 step 6, 8.10), rail-neutral: what a family read off its accounts is matched against stored attempts; an unknown transfer or a dead attempt's landing opens an incident.

use std::collections::HashSet;

use payoutd_domain::ledger::WalletSend;
use payoutd_domain::{
    Amount, Attempt, AttemptStatus, IncidentKind, Journal, Payout, PayoutId, TxRef,
};

use super::family::{Detection, Landing, PaidFrom, RailFamily, owner_of};
use super::{Core, PipelineError, TickReport};
use crate::pipeline_store::{AwaitingBooks, BooksCursor, IncidentSubject, NewIncident};

/// How many second payments whose books wait are judged again per pass; the rest on later passes.
const AWAITING_BOOKS_PER_PASS_MAX: u32 = 100;

/// A listed transfer carrying `reference`, by the rail's own id for it, on rails that name a
/// transfer apart from the reference an attempt stored (a provider's transfer id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarriedReference {
    pub reference: TxRef,
    pub transfer_id: TxRef,
}

/// A transfer found to pay a payout a second time: which transfer, the stored reference that
/// leads to its attempt, and how it was found.
struct SecondPayment<'a> {
    transfer: &'a TxRef,
    reference: &'a TxRef,
    payout_id: &'a PayoutId,
    how: String,
}

impl Detection<'_> {
    /// A payout transfer of an attempt declared dead that appears on the account is a second
    /// payment of its payout (the proof of death was wrong, or a transfer landed past it): one
    /// `duplicate_transfer` incident per reference, opened at once, and in the same write its
    /// outflow booked against the platform (`platform:losses`), never the merchant, with its fee
    /// out of the hot wallet, so the books keep explaining the account. The family says whether
    /// the transfer moved money and what it cost.
    pub(crate) async fn open_duplicates(
        &self,
        refs: &[TxRef],
        rail: &str,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        if refs.is_empty() || self.unreported_by_defect() {
            return Ok(report);
        }
        for (reference, payout_id) in self.core.store.dead_attempt_transfers(refs).await? {
            let attempts = self.core.store.attempts_of(&payout_id).await?;
            let seen = SecondPayment {
                transfer: &reference,
                reference: &reference,
                payout_id: &payout_id,
                how: "a transfer of a dead attempt".to_owned(),
            };
            report.duplicate_transfers +=
                u32::from(self.open_duplicate(&seen, &attempts, rail).await?);
        }
        Ok(report)
    }

    /// Transfers the rail names by its own id (a provider's transfer id) behind a reference of
    /// ours, judged one by one, so that two behind one reference are two: behind an attempt
    /// declared dead, every one that moved money is a second payment; behind any other attempt,
    /// every one but the transfer the attempt recorded as its own (a provider that made a second
    /// transfer for one reference: a key reused after its window, the same request sent again
    /// under another key). Same incident and booking as above, one per transfer id. A live
    /// attempt that has recorded no transfer yet (its answer was lost) records the first listed
    /// here as its own, as the resolver's lookup would: the listing is read once, so judging
    /// waits for nothing.
    pub(crate) async fn open_second_transfers(
        &self,
        carried: &[CarriedReference],
        rail: &str,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        if carried.is_empty() || self.unreported_by_defect() {
            return Ok(report);
        }
        #[cfg(feature = "defects")]
        if self.core.config.defects.second_transfers_unreported {
            return Ok(report);
        }
        let refs: Vec<TxRef> = carried.iter().map(|c| c.reference.clone()).collect();
        for (reference, payout_id) in self.core.store.tx_owners(&refs).await? {
            let attempts = self.core.store.attempts_of(&payout_id).await?;
            let Some(attempt) = attempts.iter().find(|a| a.txs.iter().any(|t| t.hash == reference))
            else {
                continue;
            };
            let dead = attempt.status == AttemptStatus::Dead;
            let listed: Vec<&CarriedReference> =
                carried.iter().filter(|c| c.reference == reference).collect();
            let recorded = if dead {
                attempt.slot.transfer_id().cloned()
            } else {
                self.own_transfer(attempt, listed[0]).await?
            };
            if !dead && recorded.is_none() {
                continue;
            }
            for other in listed.into_iter().filter(|c| Some(&c.transfer_id) != recorded.as_ref()) {
                let how = match &recorded {
                    Some(own) if !dead => format!(
                        "a second transfer carrying our reference {reference} of attempt {} (whose transfer is {own})",
                        attempt.attempt_no
                    ),
                    _ => format!(
                        "a transfer carrying our reference {reference} of attempt {}, declared dead",
                        attempt.attempt_no
                    ),
                };
                let seen = SecondPayment {
                    transfer: &other.transfer_id,
                    reference: &reference,
                    payout_id: &payout_id,
                    how,
                };
                report.duplicate_transfers +=
                    u32::from(self.open_duplicate(&seen, &attempts, rail).await?);
            }
        }
        Ok(report)
    }

    /// The transfer a live or settled attempt made, by the rail's id: the one it recorded, else,
    /// while it is live, `first_listed`, recorded now (`None` when the attempt settled without
    /// one). Recorded concurrently by the resolver, the stored one wins.
    async fn own_transfer(
        &self,
        attempt: &Attempt,
        first_listed: &CarriedReference,
    ) -> Result<Option<TxRef>, PipelineError> {
        if let Some(own) = attempt.slot.transfer_id() {
            return Ok(Some(own.clone()));
        }
        if !attempt.status.is_live() {
            return Ok(None);
        }
        if self.core.store.record_reference(&attempt.id, &first_listed.transfer_id).await? {
            tracing::info!(attempt = %attempt.id, transfer = %first_listed.transfer_id, "reconciliation recorded the attempt's transfer, whose answer was lost");
            return Ok(Some(first_listed.transfer_id.clone()));
        }
        let stored = self.core.store.attempts_of(&attempt.payout_id).await?;
        Ok(stored
            .into_iter()
            .find(|a| a.id == attempt.id)
            .and_then(|a| a.slot.transfer_id().cloned()))
    }

    fn unreported_by_defect(&self) -> bool {
        #[cfg(feature = "defects")]
        if self.core.config.defects.duplicates_unreported {
            return true;
        }
        false
    }

    /// One `duplicate_transfer` incident for `seen.transfer`, ever, with its journals in the same
    /// write; false when it was open already or the rail proves the transfer moved nothing.
    /// `attempts`: the payout's, as just read.
    async fn open_duplicate(
        &self,
        seen: &SecondPayment<'_>,
        attempts: &[Attempt],
        rail: &str,
    ) -> Result<bool, PipelineError> {
        let core = self.core;
        let (transfer, payout_id) = (seen.transfer, seen.payout_id);
        let payout = core.store.payout_by_id(payout_id).await?;
        let attempt = attempts.iter().find(|a| a.txs.iter().any(|t| &t.hash == seen.reference));
        let (landing, journals) = match (&payout, attempt) {
            (Some(payout), Some(attempt)) => {
                let Some(landing) = self.second_landing(transfer, payout, attempt).await? else {
                    return Ok(false);
                };
                let journals = if landing.is_final {
                    self.duplicate_journals(&landing, transfer, payout, attempt)
                } else {
                    Vec::new()
                };
                (landing, journals)
            }
            // Nothing can be booked without the payout; the incident stays open for a person.
            _ => {
                (Landing::presumed("its payout or attempt is not stored", Amount::ZERO), Vec::new())
            }
        };
        tracing::error!(rail, %transfer, payout = %payout_id, state = %landing.state, how = %seen.how, "a transfer paid a payout a second time");
        let booked = match (landing.is_final, journals.is_empty()) {
            (false, _) => "nothing is booked until the rail reports it final",
            (true, true) => "nothing booked",
            (true, false) => "its outflow is booked against the platform (platform:losses)",
        };
        let detail = format!(
            "{rail}: {transfer}, {} of payout {payout_id}, {}: the payout is paid twice; {booked}",
            seen.how, landing.state
        );
        let subject = IncidentSubject {
            merchant_id: payout.map(|p| p.merchant_id),
            payout_id: Some(payout_id.clone()),
            attempt_id: attempt.map(|a| a.id.clone()),
        };
        let incident =
            NewIncident::new(IncidentKind::DuplicateTransfer, subject, detail, core.clock.now_ms());
        if landing.is_final {
            Ok(core
                .store
                .open_incident_with_journals(&incident, transfer.as_str(), &journals)
                .await?)
        } else {
            Ok(core.store.open_incident_awaiting_books(&incident, transfer.as_str()).await?)
        }
    }

    /// What a second payment cost: what it moved (which may differ from the payout's amount: a
    /// provider's fee taken out of it, a transfer reversed in part) out of the account it left (a
    /// hot wallet the ledger holds, else the provider's), borne by the platform, and the wallet's fee.
    pub(super) fn duplicate_journals(
        &self,
        landing: &Landing,
        reference: &TxRef,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Vec<Journal> {
        let paid_from = self.family.paid_from(attempt, payout);
        let mut journals = Vec::new();
        if !landing.moved.is_zero() {
            journals.extend(match &paid_from {
                PaidFrom::HotWallet { wallet_id, sent_as, .. } => Journal::duplicate_from_wallet(
                    &payout.asset,
                    reference.as_str(),
                    landing.moved,
                    &WalletSend { wallet_id: wallet_id.clone(), sent_as: sent_as.clone() },
                ),
                PaidFrom::Elsewhere => vec![Journal::duplicate_at_provider(
                    &payout.asset,
                    reference.as_str(),
                    landing.moved,
                )],
            });
        }
        if let (PaidFrom::HotWallet { wallet_id, native, .. }, false) =
            (&paid_from, landing.fee_paid.is_zero())
        {
            journals.push(Journal::fee(wallet_id, native, reference.as_str(), landing.fee_paid));
        }
        journals
    }

    /// Of `refs`, those no stored attempt holds, in their order. Called after the rail was read:
    /// an attempt is stored before it is sent, so before it could appear there.
    pub(crate) async fn not_stored(&self, refs: &[TxRef]) -> Result<Vec<TxRef>, PipelineError> {
        let owners = self.core.store.tx_owners(refs).await?;
        let known: HashSet<&TxRef> = owners.iter().map(|(r, _)| r).collect();
        Ok(refs.iter().filter(|r| !known.contains(r)).cloned().collect())
    }

    /// One `unmatched_transfer` incident per reference, ever; true when this call opened it.
    pub(crate) async fn open_unmatched(
        &self,
        reference: &TxRef,
        detail: String,
    ) -> Result<bool, PipelineError> {
        let incident = NewIncident::new(
            IncidentKind::UnmatchedTransfer,
            IncidentSubject::default(),
            detail,
            self.core.clock.now_ms(),
        );
        Ok(self.core.store.open_incident_once(&incident, reference.as_str()).await?)
    }
}

/// Second payments reported while their transfer was not final, judged again by the family paying
/// their payout: once the rail reports the transfer final, what it moved and cost is booked (as at
/// first sight); when it proves the transfer moved nothing, the alarm is resolved with that proof.
/// Money never leaves the books on a guess: a transfer that may still fail is booked by nobody.
pub(super) async fn judge_duplicates_awaiting_books(
    core: &Core,
    families: &[Box<dyn RailFamily>],
) -> Result<(), PipelineError> {
    let after = core.books_cursor.lock().expect("books cursor lock").clone();
    let read = core.store.incidents_awaiting_books(&after, AWAITING_BOOKS_PER_PASS_MAX).await?;
    *core.books_cursor.lock().expect("books cursor lock") =
        BooksCursor::after_pass(&read, AWAITING_BOOKS_PER_PASS_MAX);
    for awaiting in &read {
        let incident = &awaiting.incident;
        let (Some(payout_id), Some(attempt_id)) = (&incident.payout_id, &incident.attempt_id)
        else {
            continue;
        };
        let Some(payout) = core.store.payout_by_id(payout_id).await? else { continue };
        let attempts = core.store.attempts_of(payout_id).await?;
        let Some(attempt) = attempts.iter().find(|a| &a.id == attempt_id) else { continue };
        let Some(family) = owner_of(families, &core.routes, attempt, &payout) else { continue };
        let detection = Detection { core, family };
        detection.judge_awaiting(awaiting, &payout, attempt).await?;
    }
    Ok(())
}

impl Detection<'_> {
    /// What a second payment did, as its rail reports it: what it moved, whatever the payout's
    /// amount (with the deliberate defect, nothing unless it moved exactly the payout's amount).
    async fn second_landing(
        &self,
        transfer: &TxRef,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<Option<Landing>, PipelineError> {
        let landing = self.family.duplicate_landing(transfer, payout, attempt).await?;
        #[cfg(feature = "defects")]
        if self.core.config.defects.second_payment_exact_amount_only {
            return Ok(landing.map(|mut landing| {
                if landing.moved != payout.amount {
                    landing.moved = Amount::ZERO;
                }
                landing
            }));
        }
        Ok(landing)
    }

    async fn judge_awaiting(
        &self,
        awaiting: &AwaitingBooks,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<(), PipelineError> {
        let (core, transfer, id) = (self.core, &awaiting.subject, &awaiting.incident.id);
        let now = core.clock.now_ms();
        let Some(landing) = self.second_landing(transfer, payout, attempt).await? else {
            let proof = "the rail proves the transfer moved nothing, or that it is the attempt's one payment (the attempt's own transfer failed): the payout was not paid twice";
            if core.store.book_awaited(id, &[], &format!(" [since then: {proof}]"), now).await? {
                tracing::info!(incident = %id, %transfer, "a reported second payment moved nothing");
                core.store.resolve_incident(id, proof, now).await?;
            }
            return Ok(());
        };
        if !landing.is_final {
            return Ok(());
        }
        let journals = self.duplicate_journals(&landing, transfer, payout, attempt);
        let note = if !landing.moved_nothing() {
            format!(
                " [since then {}: its outflow of {} is booked against the platform (platform:losses)]",
                landing.state, landing.moved
            )
        } else {
            format!(" [since then {}: it moved nothing; its fee, if any, is booked]", landing.state)
        };
        // Closed by itself only when the transfer provably moved nothing: any amount it moved,
        // however far from the payout's, is a second payment a person must see.
        if core.store.book_awaited(id, &journals, &note, now).await? && landing.moved_nothing() {
            tracing::info!(incident = %id, %transfer, state = %landing.state, "a reported second payment moved nothing");
            core.store
                .resolve_incident(
                    id,
                    &format!("the transfer {}: it moved nothing", landing.state),
                    now,
                )
                .await?;
        }
        Ok(())
    }
}
