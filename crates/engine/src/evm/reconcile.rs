//! EVM reconciliation (SPEC 4 step 6, 8.10): every final block read back, once for the hot wallets whose stored cursors it is behind; what it lists goes to the neutral detection rules.

use std::collections::HashSet;

use payoutd_domain::{Amount, Attempt, EvmAddress, HotWallet, Payout, TxRef};

use super::relink::Relink;
use super::{EvmFamily, OutgoingTx, RECONCILE_BLOCKS_PER_PASS_MAX};
use crate::pipeline::{Detection, Landing, PipelineError, TickReport};

impl EvmFamily {
    /// Every transaction a final block lists as sent from a hot wallet must be one whose bytes
    /// payoutd stored before sending (I4). Each wallet's scan goes on from a stored cursor,
    /// `RECONCILE_BLOCKS_PER_PASS_MAX` blocks per pass; it starts at the first block that was not
    /// final yet at the wallet's first pass. Only final blocks are read, so a reorg cannot slip a
    /// transaction in behind the cursor. Wallets whose cursors fall in one range share one read of
    /// its blocks: the node hands over every transaction of a block, whichever wallet asks.
    pub(super) async fn reconcile_wallets(
        &self,
        detection: &Detection<'_>,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let first_unfinal = match self.final_block().await {
            Ok(last_final) => last_final.map_or(0, |b| b + 1),
            Err(e) => {
                tracing::warn!(chain = self.chain.rail.chain_id(), error = %e, "no final block; not reconciling this pass");
                return Ok(report);
            }
        };
        let mut behind = Vec::with_capacity(self.chain.wallets.len());
        for wallet in &self.chain.wallets {
            let cursor = match self.lines.reconcile_cursor(&wallet.id).await? {
                Some(block) => block,
                None => self.lines.start_reconcile_cursor(&wallet.id, first_unfinal).await?,
            };
            if cursor < first_unfinal {
                behind.push(WalletCursor { wallet, cursor });
            }
        }
        // One scan per group of cursors within one range; every wallet moves on in each pass.
        while let Some(from) = behind.iter().map(|w| w.cursor).min() {
            let to = (first_unfinal - 1).min(from + RECONCILE_BLOCKS_PER_PASS_MAX - 1);
            let (group, rest) = behind.into_iter().partition(|w| w.cursor <= to);
            behind = rest;
            report.add(self.reconcile_range(detection, &group, from, to).await?);
        }
        Ok(report)
    }

    /// Reads blocks `from..=to` once for every wallet of `group` (each cursor in that range) and
    /// checks each wallet's share from its own cursor on.
    async fn reconcile_range(
        &self,
        detection: &Detection<'_>,
        group: &[WalletCursor<'_>],
        from: u64,
        to: u64,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let senders: Vec<EvmAddress> = group.iter().map(|w| w.wallet.address).collect();
        let scan = match self.chain.rail.outgoing(&senders, from, to).await {
            Ok(scan) => scan,
            Err(e) => {
                // Unread blocks are read on a later pass: the cursors stay.
                tracing::warn!(chain = self.chain.rail.chain_id(), from, to, error = %e, "cannot read outgoing transactions; not reconciling this pass");
                return Ok(report);
            }
        };
        assert!(
            scan.next_block >= from && scan.next_block <= to + 1,
            "the rail scanned outside {from}..={to}: next {}",
            scan.next_block
        );
        for tx in &scan.txs {
            assert!(
                (from..scan.next_block).contains(&tx.block) && senders.contains(&tx.from),
                "the rail listed {} (from {}, block {}) outside the scan of {from}..{}",
                tx.hash,
                tx.from,
                tx.block,
                scan.next_block
            );
        }
        for WalletCursor { wallet, cursor } in group {
            let txs: Vec<&OutgoingTx> = scan
                .txs
                .iter()
                .filter(|t| t.from == wallet.address && t.block >= *cursor)
                .collect();
            let (checked, moves) = self.check_outgoing(detection, wallet, &txs).await?;
            report.add(checked);
            if scan.next_block > *cursor && moves == Cursor::Advances {
                self.lines.advance_reconcile_cursor(&wallet.id, *cursor, scan.next_block).await?;
            }
        }
        Ok(report)
    }

    /// Hands the stored ones of `txs` (sent from `wallet`) to duplicate detection, relinks each
    /// that payoutd never stored but that carries a waiting payout's reference (its attempt's
    /// commit was lost), and opens an incident for each other; whether the wallet's cursor may
    /// move past them (not while a relink waits for a later pass).
    async fn check_outgoing(
        &self,
        detection: &Detection<'_>,
        wallet: &HotWallet,
        txs: &[&OutgoingTx],
    ) -> Result<(TickReport, Cursor), PipelineError> {
        let mut report = TickReport::default();
        let hashes: Vec<TxRef> = txs.iter().map(|t| t.hash.clone()).collect();
        report.add(detection.open_duplicates(&hashes, &wallet.address.to_string()).await?);
        let unknown: HashSet<TxRef> = detection.not_stored(&hashes).await?.into_iter().collect();
        for tx in txs.iter().filter(|t| unknown.contains(&t.hash)) {
            let named = match self.relink(detection.core, wallet, tx).await? {
                Relink::Relinked => {
                    report.relinked += 1;
                    continue;
                }
                Relink::Later => return Ok((report, Cursor::Stays)),
                Relink::Unnamed => String::new(),
                Relink::Named { payout, why } => format!(
                    "; it carries the reference of payout {payout}, which cannot take it as its attempt: {why}"
                ),
            };
            tracing::error!(wallet = %wallet.address, hash = %tx.hash, nonce = tx.nonce, block = tx.block, "transfer out of a hot wallet matches no stored transaction");
            let detail = format!(
                "hot wallet {} sent {} (nonce {}, block {}), which matches no transaction payoutd stored{named}",
                wallet.address, tx.hash, tx.nonce, tx.block
            );
            report.unmatched_transfers +=
                u32::from(detection.open_unmatched(&tx.hash, detail).await?);
        }
        Ok((report, Cursor::Advances))
    }

    /// A dead attempt's transaction listed by a final block: the listing itself proves it was
    /// mined; its receipt says whether the transfer moved and what it cost.
    pub(super) async fn mined_duplicate(
        &self,
        reference: &TxRef,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Landing {
        let Some(evm) = self.evm_attempt(attempt, payout) else {
            return Landing::presumed("mined in a final block", payout.amount);
        };
        match self.chain.rail.receipt(reference, &evm.expected).await {
            Ok(Some(receipt)) => Landing::final_(
                format!("mined in final block {}", receipt.block),
                if receipt.succeeded { receipt.moved } else { Amount::ZERO },
                receipt.fee_paid,
            ),
            Ok(None) => Landing::not_final("mined in a final block (no receipt yet)"),
            Err(e) => Landing::not_final(&format!(
                "mined in a final block (its receipt cannot be read: {e})"
            )),
        }
    }
}

/// What a wallet's reconciliation cursor does after its transactions were checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cursor {
    Advances,
    /// A relink is tried again on a later pass: the blocks are read again.
    Stays,
}

/// A hot wallet whose reconciliation cursor is behind the first block not yet final.
struct WalletCursor<'a> {
    wallet: &'a HotWallet,
    /// The first block not yet scanned for this wallet.
    cursor: u64,
}
