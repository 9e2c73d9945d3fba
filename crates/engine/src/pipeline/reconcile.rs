//! Reconcile (SPEC 4 step 6, 8.10): every final block read back per hot wallet; an unknown outgoing hash is an incident.

use std::collections::HashSet;

use payoutd_domain::{Amount, Attempt, HotWallet, IncidentKind, Journal, Payout, TxRef};

use super::{EvmChain, Pipeline, PipelineError, RECONCILE_BLOCKS_PER_PASS_MAX, TickReport};
use crate::pipeline_store::{IncidentSubject, NewIncident};
use crate::rail::{StandaloneRail, StandaloneStatus};

impl Pipeline {

    /// I7 in production (SPEC 8.10): every transaction a final block lists as sent from a hot
    /// wallet must be one whose bytes payoutd stored before sending (I4); any other is an
    /// `unmatched_transfer` incident, opened once per hash. Each wallet's scan goes on from a stored
    /// cursor, `RECONCILE_BLOCKS_PER_PASS_MAX` blocks per pass; it starts at the first block that
    /// was not final yet at the wallet's first pass. Only final blocks are read, so a reorg cannot slip a
    /// transaction in behind the cursor.
    pub async fn reconcile_pass(&self) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        for chain in &self.chains {
            let first_unfinal = match chain.rail.final_block().await {
                Ok(last_final) => last_final.map_or(0, |b| b + 1),
                Err(e) => {
                    tracing::warn!(chain = chain.rail.chain_id(), error = %e, "no final block; not reconciling this pass");
                    continue;
                }
            };
            for wallet in &chain.wallets {
                report.add(self.reconcile_wallet(chain, wallet, first_unfinal).await?);
            }
        }
        for line in &self.standalone {
            report.add(self.reconcile_standalone(line.rail.as_ref()).await?);
        }
        Ok(report)
    }

    /// A payout transfer of an attempt declared dead that appears on the account is a second
    /// payment of its payout (the proof of death was wrong, or a transfer landed past it): one
    /// `duplicate_transfer` incident per reference, opened at once, and in the same write its
    /// outflow booked against the platform (`platform:losses`), never the merchant, with its fee
    /// out of the hot wallet, so the books keep explaining the account. `landed` asks the rail
    /// whether the transfer moved money (a provider lists failed transfers too); a final block's
    /// listing on EVM is itself the proof, its receipt says what it cost.
    async fn open_duplicates(&self, refs: &[TxRef], rail: &str, landed: LandedCheck<'_>) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        if refs.is_empty() {
            return Ok(report);
        }
        for (reference, payout_id) in self.store.dead_attempt_transfers(refs).await? {
            let payout = self.store.payout_by_id(&payout_id).await?;
            let attempts = self.store.attempts_of(&payout_id).await?;
            let attempt = attempts.iter().find(|a| a.txs.iter().any(|t| t.hash == reference));
            let (landing, journals) = match (&payout, attempt) {
                (Some(payout), Some(attempt)) => {
                    let Some(landing) = landed.landing(self, &reference, payout, attempt).await? else { continue };
                    let journals = self.duplicate_journals(&landing, &reference, payout, attempt);
                    (landing, journals)
                }
                _ => (Landing::presumed("its payout or attempt is not stored"), Vec::new()),
            };
            tracing::error!(rail, %reference, payout = %payout_id, state = %landing.state, "a transfer of an attempt declared dead moved money: the payout is paid twice");
            let booked = if journals.is_empty() { "nothing booked" } else { "its outflow is booked against the platform (platform:losses)" };
            let detail = format!("{rail}: {reference}, a transfer of a dead attempt of payout {payout_id}, {}: the payout is paid twice; {booked}", landing.state);
            let subject = IncidentSubject { merchant_id: payout.map(|p| p.merchant_id), payout_id: Some(payout_id), attempt_id: attempt.map(|a| a.id.clone()) };
            let incident = NewIncident::new(IncidentKind::DuplicateTransfer, subject, detail, self.clock.now_ms());
            report.duplicate_transfers += u32::from(self.store.open_incident_with_journals(&incident, reference.as_str(), &journals).await?);
        }
        Ok(report)
    }

    /// What a second payment cost: the payout's amount out of the account it left (a hot wallet
    /// the ledger holds, else the provider's), borne by the platform, and the wallet's fee.
    fn duplicate_journals(&self, landing: &Landing, reference: &TxRef, payout: &Payout, attempt: &Attempt) -> Vec<Journal> {
        let wallet = self.ledger_wallet_of(attempt, payout);
        let mut journals = Vec::new();
        if landing.moved {
            journals.push(match &wallet {
                Some((wallet_id, _)) => Journal::duplicate_from_wallet(&payout.asset, reference.as_str(), payout.amount, wallet_id),
                None => Journal::duplicate_at_provider(&payout.asset, reference.as_str(), payout.amount),
            });
        }
        if let (Some((wallet_id, native)), false) = (&wallet, landing.fee_paid.is_zero()) {
            journals.push(Journal::fee(wallet_id, native, reference.as_str(), landing.fee_paid));
        }
        journals
    }

    /// The same rule on a rail without block numbers: everything that left its account since the
    /// stored cursor, at finality, must be a stored attempt's; anything else opens an
    /// `unmatched_transfer` incident, once per reference.
    async fn reconcile_standalone(&self, rail: &dyn StandaloneRail) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let Some(name) = rail.reconcile_cursor_name() else { return Ok(report) };
        let cursor = self.store.rail_cursor(&name).await?;
        let since = match rail.outgoing_since(cursor.as_deref()).await {
            Ok(since) => since,
            Err(e) => {
                tracing::warn!(rail = rail.name(), error = %e, "cannot list the account's transfers; not reconciling this pass");
                return Ok(report);
            }
        };
        assert!(cursor.is_some() || since.refs.is_empty(), "{} judged transfers before its starting point", rail.name());
        report.add(self.open_duplicates(&since.refs, rail.name(), LandedCheck::ByRail(rail)).await?);
        // Read after the listing: an attempt of ours was stored before it was sent, so before it landed.
        let unknown = self.not_stored(&since.refs).await?;
        let foreign = if unknown.is_empty() {
            Vec::new()
        } else {
            match rail.outgoing_of(&unknown).await {
                Ok(foreign) => foreign,
                Err(e) => {
                    tracing::warn!(rail = rail.name(), error = %e, "cannot read unmatched transfers; not reconciling this pass");
                    return Ok(report);
                }
            }
        };
        for reference in &foreign {
            tracing::error!(rail = rail.name(), %reference, "transfer out of a hot wallet matches no stored attempt");
            let detail = format!("{} sent {reference}, which matches no attempt payoutd stored", rail.name());
            report.unmatched_transfers += u32::from(self.open_unmatched(reference, detail).await?);
        }
        // A cursor that did not move is not written again (one write saved per rail and pass).
        if let Some(next) = since.cursor.filter(|next| Some(next.as_str()) != cursor.as_deref()) {
            self.store.advance_rail_cursor(&name, cursor.as_deref(), &next).await?;
        }
        Ok(report)
    }

    /// Of `refs`, those no stored attempt holds, in their order.
    async fn not_stored(&self, refs: &[TxRef]) -> Result<Vec<TxRef>, PipelineError> {
        let owners = self.store.tx_owners(refs).await?;
        let known: HashSet<&TxRef> = owners.iter().map(|(r, _)| r).collect();
        Ok(refs.iter().filter(|r| !known.contains(r)).cloned().collect())
    }

    /// One `unmatched_transfer` incident per reference, ever; true when this call opened it.
    async fn open_unmatched(&self, reference: &TxRef, detail: String) -> Result<bool, PipelineError> {
        let incident = NewIncident::new(IncidentKind::UnmatchedTransfer, IncidentSubject::default(), detail, self.clock.now_ms());
        Ok(self.store.open_incident_once(&incident, reference.as_str()).await?)
    }

    async fn reconcile_wallet(&self, chain: &EvmChain, wallet: &HotWallet, first_unfinal: u64) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let from = match self.store.reconcile_cursor(&wallet.id).await? {
            Some(block) => block,
            None => self.store.start_reconcile_cursor(&wallet.id, first_unfinal).await?,
        };
        if from >= first_unfinal {
            return Ok(report);
        }
        let to = (first_unfinal - 1).min(from + RECONCILE_BLOCKS_PER_PASS_MAX - 1);
        let scan = match chain.rail.outgoing(&wallet.address, from, to).await {
            Ok(scan) => scan,
            Err(e) => {
                // Unread blocks are read on a later pass: the cursor stays.
                tracing::warn!(wallet = %wallet.id, from, to, error = %e, "cannot read outgoing transactions; not reconciling this pass");
                return Ok(report);
            }
        };
        assert!(scan.next_block >= from && scan.next_block <= to + 1, "the rail scanned outside {from}..={to}: next {}", scan.next_block);
        let hashes: Vec<TxRef> = scan.txs.iter().map(|t| t.hash.clone()).collect();
        report.add(self.open_duplicates(&hashes, &wallet.address.to_string(), LandedCheck::MinedInFinalBlock(chain)).await?);
        // Read after the scan: a transaction of ours was stored before it was sent, so before it was mined.
        let unknown: HashSet<TxRef> = self.not_stored(&hashes).await?.into_iter().collect();
        for tx in scan.txs.iter().filter(|t| unknown.contains(&t.hash)) {
            tracing::error!(wallet = %wallet.address, hash = %tx.hash, nonce = tx.nonce, block = tx.block, "transfer out of a hot wallet matches no stored transaction");
            let detail = format!(
                "hot wallet {} sent {} (nonce {}, block {}), which matches no transaction payoutd stored",
                wallet.address, tx.hash, tx.nonce, tx.block
            );
            report.unmatched_transfers += u32::from(self.open_unmatched(&tx.hash, detail).await?);
        }
        self.store.advance_reconcile_cursor(&wallet.id, from, scan.next_block).await?;
        Ok(report)
    }

}

/// How reconciliation learns whether a dead attempt's listed transfer moved money.
enum LandedCheck<'a> {
    /// EVM: a final block lists the transaction as mined from the hot wallet.
    MinedInFinalBlock(&'a EvmChain),
    /// A rail without nonces: its own status of the dead attempt; only its proof of death again
    /// (a provider's failed transfer) clears the listing.
    ByRail(&'a dyn StandaloneRail),
}

/// What a dead attempt's listed transfer did, as far as the rail can tell.
struct Landing {
    state: String,
    /// The payout's amount moved (presumed while the rail cannot say otherwise: a listed transfer
    /// of a provider that is not failed pays).
    moved: bool,
    /// What it cost the hot wallet beyond the amount; zero where the rail cannot say.
    fee_paid: Amount,
}

impl Landing {
    fn presumed(state: &str) -> Landing {
        Landing { state: state.to_owned(), moved: true, fee_paid: Amount::ZERO }
    }
}

impl LandedCheck<'_> {
    /// `Some` when the transfer moved money (or may have), `None` when the rail proves it did not.
    async fn landing(&self, pipeline: &Pipeline, reference: &TxRef, payout: &Payout, attempt: &Attempt) -> Result<Option<Landing>, PipelineError> {
        match self {
            LandedCheck::MinedInFinalBlock(chain) => {
                let Some(evm) = pipeline.evm_attempt(attempt, payout) else { return Ok(Some(Landing::presumed("mined in a final block"))) };
                Ok(Some(match chain.rail.receipt(reference, &evm.expected).await {
                    Ok(Some(receipt)) => Landing {
                        state: format!("mined in final block {}", receipt.block),
                        moved: receipt.succeeded && receipt.transfer_matches,
                        fee_paid: receipt.fee_paid,
                    },
                    Ok(None) => Landing::presumed("mined in a final block (no receipt yet)"),
                    Err(e) => Landing::presumed(&format!("mined in a final block (its receipt cannot be read: {e})")),
                }))
            }
            LandedCheck::ByRail(rail) => Ok(match rail.status(attempt, payout).await {
                Ok(StandaloneStatus::Dead { .. }) => None,
                Ok(StandaloneStatus::Reverted { fee_paid, detail, .. }) => {
                    Some(Landing { state: format!("failed at finality ({detail})"), moved: false, fee_paid })
                }
                Ok(StandaloneStatus::Landed { final_: true, transfer_matches, fee_paid, .. }) => {
                    Some(Landing { state: "landed, final".to_owned(), moved: transfer_matches, fee_paid })
                }
                Ok(other) => Some(Landing::presumed(&format!("which the rail now reports as {other:?}"))),
                Err(e) => Some(Landing::presumed(&format!("whose state cannot be read ({e})"))),
            }),
        }
    }
}
