//! Reconcile (SPEC 4 step 6, 8.10), rail-neutral: what a family read off its accounts is matched against stored attempts; an unknown transfer or a dead attempt's landing opens an incident.

use std::collections::HashSet;

use payoutd_domain::{Attempt, IncidentKind, Journal, Payout, TxRef};

use super::family::{Detection, Landing, PaidFrom};
use super::{PipelineError, TickReport};
use crate::pipeline_store::{IncidentSubject, NewIncident};

impl Detection<'_> {
    /// A payout transfer of an attempt declared dead that appears on the account is a second
    /// payment of its payout (the proof of death was wrong, or a transfer landed past it): one
    /// `duplicate_transfer` incident per reference, opened at once, and in the same write its
    /// outflow booked against the platform (`platform:losses`), never the merchant, with its fee
    /// out of the hot wallet, so the books keep explaining the account. The family says whether
    /// the transfer moved money and what it cost.
    pub(crate) async fn open_duplicates(&self, refs: &[TxRef], rail: &str) -> Result<TickReport, PipelineError> {
        let core = self.core;
        let mut report = TickReport::default();
        if refs.is_empty() {
            return Ok(report);
        }
        #[cfg(feature = "defects")]
        if core.config.defects.duplicates_unreported {
            return Ok(report);
        }
        for (reference, payout_id) in core.store.dead_attempt_transfers(refs).await? {
            let payout = core.store.payout_by_id(&payout_id).await?;
            let attempts = core.store.attempts_of(&payout_id).await?;
            let attempt = attempts.iter().find(|a| a.txs.iter().any(|t| t.hash == reference));
            let (landing, journals) = match (&payout, attempt) {
                (Some(payout), Some(attempt)) => {
                    let Some(landing) = self.family.duplicate_landing(&reference, payout, attempt).await? else { continue };
                    let journals = self.duplicate_journals(&landing, &reference, payout, attempt);
                    (landing, journals)
                }
                _ => (Landing::presumed("its payout or attempt is not stored"), Vec::new()),
            };
            tracing::error!(rail, %reference, payout = %payout_id, state = %landing.state, "a transfer of an attempt declared dead moved money: the payout is paid twice");
            let booked = if journals.is_empty() { "nothing booked" } else { "its outflow is booked against the platform (platform:losses)" };
            let detail = format!("{rail}: {reference}, a transfer of a dead attempt of payout {payout_id}, {}: the payout is paid twice; {booked}", landing.state);
            let subject = IncidentSubject { merchant_id: payout.map(|p| p.merchant_id), payout_id: Some(payout_id), attempt_id: attempt.map(|a| a.id.clone()) };
            let incident = NewIncident::new(IncidentKind::DuplicateTransfer, subject, detail, core.clock.now_ms());
            report.duplicate_transfers += u32::from(core.store.open_incident_with_journals(&incident, reference.as_str(), &journals).await?);
        }
        Ok(report)
    }

    /// What a second payment cost: the payout's amount out of the account it left (a hot wallet
    /// the ledger holds, else the provider's), borne by the platform, and the wallet's fee.
    fn duplicate_journals(&self, landing: &Landing, reference: &TxRef, payout: &Payout, attempt: &Attempt) -> Vec<Journal> {
        let paid_from = self.family.paid_from(attempt, payout);
        let mut journals = Vec::new();
        if landing.moved {
            journals.push(match &paid_from {
                PaidFrom::HotWallet { wallet_id, .. } => Journal::duplicate_from_wallet(&payout.asset, reference.as_str(), payout.amount, wallet_id),
                PaidFrom::Elsewhere => Journal::duplicate_at_provider(&payout.asset, reference.as_str(), payout.amount),
            });
        }
        if let (PaidFrom::HotWallet { wallet_id, native }, false) = (&paid_from, landing.fee_paid.is_zero()) {
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
    pub(crate) async fn open_unmatched(&self, reference: &TxRef, detail: String) -> Result<bool, PipelineError> {
        let incident = NewIncident::new(IncidentKind::UnmatchedTransfer, IncidentSubject::default(), detail, self.core.clock.now_ms());
        Ok(self.core.store.open_incident_once(&incident, reference.as_str()).await?)
    }
}
