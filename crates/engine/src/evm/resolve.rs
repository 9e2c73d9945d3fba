//! The EVM family's own reasoning in the sweep: what receipts, the wallet's nonces and fee bids mean for one attempt, read once per wallet per pass.

use std::collections::HashMap;

use futures::StreamExt;

use payoutd_domain::{
    Attempt, AttemptStatus, AttemptTx, ChainReference, HotWallet, IncidentKind, Payout,
    PayoutStatus, TxKind, TxRef,
};

use super::{EvmAttempt, EvmFamily, ExpectedTransfer, Receipt, SignError, evm_slot};
use crate::pipeline::{
    AttemptEnd, Core, FeePaid, MinedTx, PaidFrom, PayoutEnd, PipelineError,
    RESOLVE_CONCURRENCY_MAX, Resolved, TickReport,
};

/// What a wallet's chain said at the start of a sweep, read before any receipt of the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WalletView {
    /// Nonces below it are used by some block (which a reorg may still take back).
    pub mined_nonce: u64,
    /// Nonces below it are used by final blocks: no reorg can take that back.
    pub final_nonce: u64,
    /// The newest final block (`None` while none is): a receipt at or below it is final.
    pub final_block: Option<u64>,
}

/// Receipts read for a sweep: a hash maps to its receipt or to `None` (no receipt); a hash whose
/// read failed is absent.
pub(super) type ReceiptBook = HashMap<TxRef, Option<Receipt>>;

/// Receipts of an attempt's transactions as read this pass.
enum Landing<'a> {
    /// One of them is mined (at most one can be: they share a nonce).
    Mined(&'a AttemptTx, Receipt),
    /// None of them has a receipt.
    Nothing,
    /// A read failed: unknown, never "absent"; nothing is decided on this pass.
    Unknown,
}

/// `landing` from receipts already read for the sweep.
fn landing_in<'t>(receipts: &ReceiptBook, txs: &'t [AttemptTx]) -> Landing<'t> {
    for tx in txs {
        match receipts.get(&tx.hash) {
            Some(Some(receipt)) => return Landing::Mined(tx, receipt.clone()),
            Some(None) => {}
            None => return Landing::Unknown,
        }
    }
    Landing::Nothing
}

/// What a final receipt means for the attempt: the only place that reads a receipt's flags.
fn end_of_final_receipt(
    tx: &AttemptTx,
    receipt: &Receipt,
    evidence: String,
    paid_from: PaidFrom,
) -> AttemptEnd {
    let mined = Some(MinedTx { block: receipt.block, hash: tx.hash.clone() });
    let fee = Some(FeePaid { reference: tx.hash.clone(), amount: receipt.fee_paid });
    match (tx.kind, receipt.succeeded, receipt.transfer_matches) {
        // Our cancel used the nonce: no payout transaction of this attempt can ever land.
        (TxKind::Cancel, true, _) => AttemptEnd {
            attempt_to: AttemptStatus::Dead,
            evidence,
            mined,
            fee,
            payout: PayoutEnd::Failed,
            incident: None,
            paid_from,
        },
        (TxKind::Original | TxKind::Replacement, true, true) => AttemptEnd {
            attempt_to: AttemptStatus::Confirmed,
            evidence,
            mined,
            fee,
            payout: PayoutEnd::Paid,
            incident: None,
            paid_from,
        },
        // Reverted, or mined without the transfer it should carry: the nonce is used, the money did
        // not move as intended. A person decides; the hold stays (I6).
        (_, succeeded, _) => {
            let kind =
                if succeeded { IncidentKind::TransferMismatch } else { IncidentKind::Reverted };
            AttemptEnd {
                attempt_to: AttemptStatus::Reverted,
                incident: Some((kind, evidence.clone())),
                evidence,
                mined,
                fee,
                payout: PayoutEnd::NeedsAttention,
                paid_from,
            }
        }
    }
}

impl EvmFamily {
    /// One live attempt against its chain: settle what is final, prove death where the chain
    /// allows it, otherwise re-send or replace what may still be pending.
    async fn resolve_attempt(
        &self,
        core: &Core,
        attempt: &Attempt,
        payout: &Payout,
        view: WalletView,
        receipts: &ReceiptBook,
    ) -> Result<Resolved, PipelineError> {
        let Some(evm) = self.evm_attempt(attempt, payout) else {
            return Ok(Resolved::Done(TickReport::default()));
        };
        match landing_in(receipts, &attempt.txs) {
            Landing::Unknown => Ok(Resolved::Done(TickReport::default())),
            Landing::Mined(tx, receipt) => {
                self.on_receipt(core, attempt, payout, tx, &receipt, view).await
            }
            Landing::Nothing => {
                if attempt.mined.is_some() {
                    // The receipt we saw is gone: a reorg. The attempt is plainly broadcast again.
                    tracing::warn!(attempt = %attempt.id, "receipt disappeared (reorg); back to waiting");
                    core.store.clear_mined(&attempt.id).await?;
                }
                if view.mined_nonce > evm_slot(attempt).nonce {
                    return self
                        .on_nonce_used(core, &evm, attempt, payout, view)
                        .await
                        .map(Resolved::Done);
                }
                self.recover(core, &evm, attempt, payout, view).await.map(Resolved::Done)
            }
        }
    }

    async fn on_receipt(
        &self,
        core: &Core,
        attempt: &Attempt,
        payout: &Payout,
        tx: &AttemptTx,
        receipt: &Receipt,
        view: WalletView,
    ) -> Result<Resolved, PipelineError> {
        if view.final_block.is_none_or(|last_final| receipt.block > last_final) {
            if attempt.mined.as_ref().map(|(b, h)| (*b, h)) != Some((receipt.block, &tx.hash)) {
                core.store.record_mined(&attempt.id, receipt.block, &tx.hash).await?;
            }
            return Ok(Resolved::Done(TickReport::default()));
        }
        let evidence = format!(
            "{} {} mined in block {}, final (final block {})",
            tx.kind.as_str(),
            tx.hash,
            receipt.block,
            view.final_block.unwrap_or_default()
        );
        let end = end_of_final_receipt(tx, receipt, evidence, self.paid_from_slot(attempt, payout));
        if end.payout == PayoutEnd::NeedsAttention && payout.status == PayoutStatus::NeedsAttention
        {
            // Already waiting for a person (e.g. after a reorg brought this receipt back): do not
            // try needs_attention -> needs_attention; leave the attempt for the person to see.
            tracing::warn!(attempt = %attempt.id, evidence = %end.evidence, "mined without the expected transfer; payout already needs attention");
            return Ok(Resolved::Done(TickReport::default()));
        }
        let (settlement, counted) = core.settlement_of(attempt, payout, end, core.clock.now_ms());
        Ok(Resolved::Settle(Box::new(settlement), counted))
    }

    /// The wallet's nonce is past this attempt's and none of its hashes had a receipt. Only a final
    /// block proves the attempt dead (a reorg can free a nonce used by a later block); until then
    /// nothing is re-sent at the used nonce, and the attempt stays live so that a late receipt of
    /// ours (after a reorg) still pays the payout.
    async fn on_nonce_used(
        &self,
        core: &Core,
        evm: &EvmAttempt<'_>,
        attempt: &Attempt,
        payout: &Payout,
        view: WalletView,
    ) -> Result<TickReport, PipelineError> {
        let nonce = evm_slot(attempt).nonce;
        if view.final_nonce <= nonce {
            tracing::debug!(attempt = %attempt.id, nonce, "nonce used by a block that is not final yet; waiting");
            return Ok(TickReport::default());
        }
        // The sweep works from a snapshot: another worker may have stored (and the chain mined) a
        // newer transaction of this attempt since, so look again at the attempt as stored now.
        let fresh = core
            .store
            .attempts_of(&attempt.payout_id)
            .await?
            .into_iter()
            .find(|a| a.id == attempt.id);
        let Some(fresh) = fresh.filter(|a| a.status.is_live()) else {
            return Ok(TickReport::default());
        };
        // The proof is read again as one node that has the final block answers it: the receipts
        // this pass read may come from a replica behind it, whose "none" proves nothing.
        let queries: Vec<(TxRef, ExpectedTransfer)> =
            fresh.txs.iter().map(|t| (t.hash.clone(), evm.expected.clone())).collect();
        let Ok(view) = self.chain.rail.final_view(&evm.wallet.address, &queries).await else {
            return Ok(TickReport::default()); // unknown, never absent
        };
        if view.nonce <= nonce || view.receipts.iter().any(Option::is_some) {
            // Not excluded by the final block after all, or one of ours landed: the next pass
            // settles it from its receipt.
            return Ok(TickReport::default());
        }
        if payout.status != PayoutStatus::Processing {
            // A person already looks at this payout; the chain's proof now lets them fail it.
            return Ok(TickReport::default());
        }
        let detail = format!(
            "wallet {} nonce {} was used by final block {} (final nonce {}) and none of {} stored hashes has a receipt there",
            evm.wallet.address,
            nonce,
            view.block,
            view.nonce,
            fresh.txs.len()
        );
        tracing::error!(attempt = %attempt.id, payout = %payout.id, %detail, "attempt proven dead: its nonce was consumed by a transaction payoutd did not send");
        let end = AttemptEnd {
            attempt_to: AttemptStatus::Dead,
            evidence: detail.clone(),
            mined: None,
            fee: None,
            payout: PayoutEnd::NextAttempt { attempts_max: self.chain.rail.attempts_max() },
            incident: Some((IncidentKind::NonceConsumedByUnknownTx, detail)),
            paid_from: self.paid_from_slot(&fresh, payout),
        };
        // Someone else used nonces of this wallet. The counter is not raised here: nonces past it
        // may hold transactions reconciliation has not read back yet (a lost attempt of ours among
        // them), and the signing pass waits for them before it moves the counter (`behind.rs`).
        Ok(core.settle(&fresh, payout, end, core.clock.now_ms()).await?.unwrap_or_default())
    }

    /// Nothing of the attempt is mined and its nonce is free (again): re-send the stored bytes on a
    /// timer, or replace them with higher fees when the attempt is the wallet's next executable one.
    async fn recover(
        &self,
        core: &Core,
        evm: &EvmAttempt<'_>,
        attempt: &Attempt,
        payout: &Payout,
        view: WalletView,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let now = core.clock.now_ms();
        // A payout waiting for a person with a live attempt may have been put there when its nonce
        // looked used; a reorg can take that use back (only final blocks are proof). Its stored bytes
        // are then the only thing that can fill the gap for the wallet's line, and sending them again
        // can never pay twice: so re-send them as for any processing payout.
        if !matches!(payout.status, PayoutStatus::Processing | PayoutStatus::NeedsAttention)
            || now - attempt.last_sent_at_ms < core.config.rebroadcast_after_ms
        {
            return Ok(report);
        }
        let latest = attempt.latest_tx();
        // Only the wallet's next executable nonce can be stuck on fees; a later one waits behind a gap,
        // and outbidding it would spend fees for nothing.
        let next_executable = view.mined_nonce == evm_slot(attempt).nonce;
        if next_executable
            && now - latest.created_at_ms >= core.config.replace_after_ms
            && !attempt.has_cancel()
            && let Some(replacement) = self
                .sign_bumped(
                    core,
                    evm.wallet,
                    attempt,
                    &evm.expected,
                    // The same business event's reference as every transaction of the attempt.
                    Bumped::Replacement(&self.reference_of(payout).await?),
                    now,
                )
                .await?
        {
            // Stored first, sent second: a replacement the database does not know can never exist.
            core.store_attempt_tx(attempt, &replacement).await?;
            self.send_tx(core, payout, attempt, &replacement).await?;
            report.replacements += 1;
            return Ok(report);
        }
        #[cfg(feature = "defects")]
        if core.config.defects.resign_on_retry {
            self.defective_fresh_nonce_send(core, attempt, true).await?;
            report.rebroadcasts += 1;
            return Ok(report);
        }
        // Mempools lose transactions: re-send the stored bytes (never new ones) on a timer.
        self.send_tx(core, payout, attempt, latest).await?;
        report.rebroadcasts += 1;
        Ok(report)
    }

    /// A transaction at the attempt's nonce that outbids everything sent at it so far, within the cap.
    pub(super) async fn sign_bumped(
        &self,
        core: &Core,
        wallet: &HotWallet,
        attempt: &Attempt,
        expected: &ExpectedTransfer,
        bumped: Bumped<'_>,
        now: i64,
    ) -> Result<Option<AttemptTx>, PipelineError> {
        let chain = &self.chain;
        let highest = attempt.highest_fees();
        let quote =
            chain.rail.fee_quote().await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
        let cap = chain.rail.max_fee_per_gas_cap();
        let bid = highest.bumped(core.config.fee_bump_bps).max(quote).capped(cap);
        let floor = highest.bumped(core.config.fee_bump_bps);
        if bid.max_fee_per_gas < floor.max_fee_per_gas
            || bid.max_priority_fee_per_gas < floor.max_priority_fee_per_gas
        {
            tracing::warn!(attempt = %attempt.id, cap, "fee cap reached: cannot outbid, re-sending instead");
            return Ok(None);
        }
        let nonce = evm_slot(attempt).nonce;
        let (signed, kind) = match bumped {
            Bumped::Cancel => (chain.rail.sign_cancel(wallet, nonce, bid).await, TxKind::Cancel),
            Bumped::Replacement(reference) => (
                chain.rail.sign_transfer(wallet, expected, reference, nonce, bid).await,
                TxKind::Replacement,
            ),
        };
        let signed = signed.map_err(|e| match e {
            SignError::Refused(why) => PipelineError::Refused(why),
            SignError::Unavailable(why) => PipelineError::RailUnavailable(why),
        })?;
        Ok(Some(AttemptTx {
            hash: signed.hash,
            kind,
            raw: signed.raw,
            fees: Some(signed.fees),
            created_at_ms: now,
        }))
    }
}

/// What `sign_bumped` signs at the attempt's nonce: the payout's transfer again, with its
/// reference, or the cancel (a self-send, which names nothing).
pub(super) enum Bumped<'r> {
    Replacement(&'r ChainReference),
    Cancel,
}

impl EvmFamily {
    /// The family's part of the sweep. Per wallet, the nonces and the final block are read once
    /// per pass, before any receipt of the pass: if a nonce is past an attempt's and no receipt of
    /// it exists afterwards, none of its transactions was mined (no race with a late receipt). A
    /// final block read early only makes fewer receipts final, which errs on the safe side. Up to
    /// `RESOLVE_CONCURRENCY_MAX` attempts are resolved at once.
    pub(super) async fn resolve_live<'a>(
        &self,
        core: &Core,
        live: &[&'a (Attempt, Payout)],
    ) -> Vec<(&'a Attempt, Result<Resolved, PipelineError>)> {
        let mut views: HashMap<&str, Option<WalletView>> = HashMap::new();
        for (attempt, _) in live {
            let slot = evm_slot(attempt);
            if !views.contains_key(slot.wallet_id.as_str()) {
                views.insert(slot.wallet_id.as_str(), self.wallet_view(&slot.wallet_id).await);
            }
        }
        // An unreadable chain decides nothing this pass, and the attempt keeps its place at the
        // front of the sweep (marking it checked would starve a stuck nonce behind the others).
        let readable: Vec<(&'a Attempt, &'a Payout, WalletView)> = live
            .iter()
            .filter_map(|(attempt, payout)| {
                let view = views.get(evm_slot(attempt).wallet_id.as_str()).copied().flatten()?;
                Some((attempt, payout, view))
            })
            .collect();
        // Every receipt of the pass, read after the views, in batch requests.
        let receipts = self.prefetch_receipts(&readable).await;
        let resolutions: Vec<_> = readable
            .into_iter()
            .map(|(attempt, payout, view)| {
                let receipts = &receipts;
                async move {
                    (attempt, self.resolve_attempt(core, attempt, payout, view, receipts).await)
                }
            })
            .collect();
        futures::stream::iter(resolutions).buffer_unordered(RESOLVE_CONCURRENCY_MAX).collect().await
    }

    /// What the chain of a wallet says this pass, or `None` when any of it cannot be read.
    async fn wallet_view(&self, wallet_id: &str) -> Option<WalletView> {
        let rail = &self.chain.rail;
        let wallet = self.wallet(wallet_id)?;
        let (mined, fin, final_block) = tokio::join!(
            rail.mined_nonce(&wallet.address),
            rail.final_nonce(&wallet.address),
            self.final_block()
        );
        match (mined, fin, final_block) {
            (Ok(mined_nonce), Ok(final_nonce), Ok(final_block)) => {
                Some(WalletView { mined_nonce, final_nonce, final_block })
            }
            (mined, fin, final_block) => {
                let error = [mined.err(), fin.err(), final_block.err()]
                    .into_iter()
                    .flatten()
                    .next()
                    .map(|e| e.0)
                    .unwrap_or_default();
                tracing::warn!(wallet = %wallet_id, %error, "cannot read the chain of this wallet; its attempts wait for the next pass");
                metrics::counter!("payoutd_rail_read_errors_total", "chain" => rail.chain_id().to_string()).increment(1);
                None
            }
        }
    }

    /// The receipts of every stored transaction of these attempts, in one batch read. A hash whose
    /// read failed is absent: its attempt decides nothing this pass.
    async fn prefetch_receipts(&self, attempts: &[(&Attempt, &Payout, WalletView)]) -> ReceiptBook {
        let mut queries: Vec<(TxRef, ExpectedTransfer)> = Vec::new();
        for (attempt, payout, _) in attempts {
            let Some(evm) = self.evm_attempt(attempt, payout) else { continue };
            queries.extend(attempt.txs.iter().map(|tx| (tx.hash.clone(), evm.expected.clone())));
        }
        let mut book = ReceiptBook::default();
        if queries.is_empty() {
            return book;
        }
        let answers = self.chain.rail.receipts(&queries).await;
        assert_eq!(answers.len(), queries.len(), "the rail answers one receipt read per query");
        for ((hash, _), answer) in queries.into_iter().zip(answers) {
            if let Ok(receipt) = answer {
                book.insert(hash, receipt);
            }
        }
        book
    }

    /// The ledger account an attempt of this chain pays from: its wallet's, fees in the native asset.
    /// An EVM chain makes no routed attempt: what its attempts send is the payout's own asset.
    pub(super) fn paid_from_slot(&self, attempt: &Attempt, payout: &Payout) -> PaidFrom {
        assert!(
            self.chain.assets.iter().any(|a| a.code == payout.asset),
            "attempt {} on chain {} for payout {} in {}, which the chain does not pay",
            attempt.id,
            self.chain.rail.chain_id(),
            payout.id,
            payout.asset
        );
        PaidFrom::HotWallet {
            wallet_id: evm_slot(attempt).wallet_id.clone(),
            native: self.chain.native_asset().code.clone(),
            sent_as: payout.asset.clone(),
        }
    }
}
