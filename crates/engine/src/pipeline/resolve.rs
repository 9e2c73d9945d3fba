//! Resolve and recover (SPEC 4 step 5): the sweep over every live attempt, one chain view per wallet per pass.

use std::collections::HashMap;

use futures::StreamExt;

use payoutd_domain::{Attempt, AttemptId, IncidentKind, Payout, TxRef};

use super::evm::{ReceiptBook, Resolved, WalletView};
use crate::pipeline_store::{IncidentSubject, NewIncident};
use crate::rail::ExpectedTransfer;
use super::{Pipeline, PipelineError, RESOLVE_CONCURRENCY_MAX, RESOLVE_LEASE_MS, TickReport, count_error};

impl Pipeline {
    /// The sweep over every live attempt (SPEC 4.5): receipts of every hash, finality, proof of
    /// death, nonce consumed by someone else; re-send or replace what may still be pending. Up to
    /// `RESOLVE_CONCURRENCY_MAX` attempts are resolved at once: each decision rests on its own
    /// attempt's receipts and every write is conditional (I5), so their order does not matter.
    /// An error on one attempt is logged with its ids and counted; the others go on.
    pub async fn resolve_pass(&self) -> Result<TickReport, PipelineError> {
        // Leased: a second worker's sweep takes other attempts instead of reading the same receipts.
        let live = self.store.lease_live_attempts(self.config.resolve_batch_max, self.clock.now_ms(), RESOLVE_LEASE_MS).await?;
        let mut report = self.escalate_unresolved(&live).await?;
        // Per wallet, the nonces and the final block are read once per pass, before any receipt of the
        // pass: if a nonce is past an attempt's and no receipt of it exists afterwards, none of its
        // transactions was mined (no race with a late receipt). A final block read early only makes
        // fewer receipts final, which errs on the safe side.
        let mut views: HashMap<&str, Option<WalletView>> = HashMap::new();
        for (attempt, _) in &live {
            let Some(slot) = attempt.slot.as_evm() else { continue };
            if !views.contains_key(slot.wallet_id.as_str()) {
                views.insert(slot.wallet_id.as_str(), self.wallet_view(&slot.wallet_id).await);
            }
        }
        // An unreadable chain decides nothing this pass, and the attempt keeps its place at the
        // front of the sweep (marking it checked would starve a stuck nonce behind the others).
        let readable: Vec<(&Attempt, &Payout, WalletView)> = live
            .iter()
            .filter_map(|(attempt, payout)| {
                // Attempts on rails without nonces are resolved by `resolve_standalone` below.
                let slot = attempt.slot.as_evm()?;
                let view = views.get(slot.wallet_id.as_str()).copied().flatten()?;
                Some((attempt, payout, view))
            })
            .collect();
        // Every receipt of the pass, read after the views, in batch requests per chain.
        let receipts = self.prefetch_receipts(&readable).await;
        let resolutions: Vec<_> = readable.into_iter().map(|(attempt, payout, view)| self.resolve_one(attempt, payout, view, &receipts)).collect();
        let mut outcomes = futures::stream::iter(resolutions).buffer_unordered(RESOLVE_CONCURRENCY_MAX).collect::<Vec<_>>().await;
        outcomes.extend(self.resolve_standalone(&live).await.into_iter().map(|(attempt, outcome)| (attempt, outcome.map(Resolved::Done))));
        let mut checked = Vec::with_capacity(outcomes.len());
        let mut settlements = Vec::new();
        for (attempt, outcome) in outcomes {
            match outcome {
                Ok(Resolved::Done(r)) => {
                    report.add(r);
                    checked.push(attempt.id.clone());
                }
                Ok(Resolved::Settle(settlement, counted)) => {
                    settlements.push((*settlement, counted));
                    checked.push(attempt.id.clone());
                }
                Err(e) => {
                    count_error("resolve", &e);
                    tracing::warn!(attempt = %attempt.id, payout = %attempt.payout_id, error = %e, "resolving an attempt failed; it is looked at again next pass");
                }
            }
        }
        // The attempts settled by the sweep end here; the others move to the back of their line's ties.
        report.add(self.settle_many(settlements).await);
        if !checked.is_empty() {
            self.store.record_checked(&checked, self.clock.now_ms()).await?;
        }
        // Attempts the sweep decided nothing on (an unreadable chain, an error) are free for the next one.
        let undecided: Vec<AttemptId> = live.iter().map(|(a, _)| a.id.clone()).filter(|id| !checked.contains(id)).collect();
        if !undecided.is_empty() {
            self.store.release_leases(&undecided).await?;
        }
        Ok(report)
    }

    /// Scans that cannot reach an answer must not wait unseen: every attempt live past
    /// `attempt_unresolved_after_ms`, whatever its rail, opens one `attempt_unresolved` incident
    /// (the attempt keeps being resolved; the hold stays).
    async fn escalate_unresolved(&self, live: &[(Attempt, Payout)]) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let now = self.clock.now_ms();
        for (attempt, payout) in live.iter().filter(|(a, _)| now - a.created_at_ms >= self.config.attempt_unresolved_after_ms) {
            let detail = format!(
                "attempt {} of payout {} on rail {} is still unresolved {} s after it was made: its rail has not proven it landed or dead",
                attempt.attempt_no,
                payout.id,
                attempt.slot.rail(),
                (now - attempt.created_at_ms) / 1_000
            );
            let subject = IncidentSubject { merchant_id: Some(payout.merchant_id.clone()), payout_id: Some(payout.id.clone()), attempt_id: Some(attempt.id.clone()) };
            let incident = NewIncident::new(IncidentKind::AttemptUnresolved, subject, detail, now);
            if self.store.open_incident_once(&incident, attempt.id.as_str()).await? {
                tracing::error!(attempt = %attempt.id, payout = %payout.id, rail = attempt.slot.rail(), "attempt unresolved past its age limit: incident opened");
                report.unresolved_attempts += 1;
            }
        }
        Ok(report)
    }

    /// What the chain of a wallet says this pass, or `None` when any of it cannot be read.
    async fn wallet_view(&self, wallet_id: &str) -> Option<WalletView> {
        let (chain, wallet) = self.wallet_of(wallet_id)?;
        let (mined, fin, final_block) =
            tokio::join!(chain.rail.mined_nonce(&wallet.address), chain.rail.final_nonce(&wallet.address), chain.rail.final_block());
        match (mined, fin, final_block) {
            (Ok(mined_nonce), Ok(final_nonce), Ok(final_block)) => Some(WalletView { mined_nonce, final_nonce, final_block }),
            (mined, fin, final_block) => {
                let error = [mined.err(), fin.err(), final_block.err()].into_iter().flatten().next().map(|e| e.0).unwrap_or_default();
                tracing::warn!(wallet = %wallet_id, %error, "cannot read the chain of this wallet; its attempts wait for the next pass");
                metrics::counter!("payoutd_rail_read_errors_total", "chain" => chain.rail.chain_id().to_string()).increment(1);
                None
            }
        }
    }

    async fn resolve_one<'a>(
        &self,
        attempt: &'a Attempt,
        payout: &Payout,
        view: WalletView,
        receipts: &ReceiptBook,
    ) -> (&'a Attempt, Result<Resolved, PipelineError>) {
        (attempt, self.resolve_attempt(attempt, payout, view, receipts).await)
    }

    /// The receipts of every stored transaction of these attempts, one batch read per chain. A
    /// hash whose read failed is absent: its attempt decides nothing this pass.
    async fn prefetch_receipts(&self, attempts: &[(&Attempt, &Payout, WalletView)]) -> ReceiptBook {
        let mut by_chain: HashMap<u64, Vec<(TxRef, ExpectedTransfer)>> = HashMap::new();
        for (attempt, payout, _) in attempts {
            let Some(evm) = self.evm_attempt(attempt, payout) else { continue };
            let queries = by_chain.entry(evm.chain.rail.chain_id()).or_default();
            queries.extend(attempt.txs.iter().map(|tx| (tx.hash.clone(), evm.expected.clone())));
        }
        let mut book = ReceiptBook::default();
        for (chain_id, queries) in by_chain {
            let Some(chain) = self.chains.iter().find(|c| c.rail.chain_id() == chain_id) else { continue };
            let answers = chain.rail.receipts(&queries).await;
            assert_eq!(answers.len(), queries.len(), "the rail answers one receipt read per query");
            for ((hash, _), answer) in queries.into_iter().zip(answers) {
                if let Ok(receipt) = answer {
                    book.insert(hash, receipt);
                }
            }
        }
        book
    }
}
