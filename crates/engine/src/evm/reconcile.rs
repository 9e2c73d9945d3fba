//! EVM reconciliation (SPEC 4 step 6, 8.10): every final block read back per hot wallet from a stored block cursor; what it lists goes to the neutral detection rules.

use std::collections::HashSet;

use payoutd_domain::{Attempt, HotWallet, Payout, TxRef};

use super::{EvmFamily, RECONCILE_BLOCKS_PER_PASS_MAX};
use crate::pipeline::{Detection, Landing, PipelineError, TickReport};

impl EvmFamily {
    /// Every transaction a final block lists as sent from a hot wallet must be one whose bytes
    /// payoutd stored before sending (I4). Each wallet's scan goes on from a stored cursor,
    /// `RECONCILE_BLOCKS_PER_PASS_MAX` blocks per pass; it starts at the first block that was not
    /// final yet at the wallet's first pass. Only final blocks are read, so a reorg cannot slip a
    /// transaction in behind the cursor.
    pub(super) async fn reconcile_wallets(
        &self,
        detection: &Detection<'_>,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let first_unfinal = match self.chain.rail.final_block().await {
            Ok(last_final) => last_final.map_or(0, |b| b + 1),
            Err(e) => {
                tracing::warn!(chain = self.chain.rail.chain_id(), error = %e, "no final block; not reconciling this pass");
                return Ok(report);
            }
        };
        for wallet in &self.chain.wallets {
            report.add(self.reconcile_wallet(detection, wallet, first_unfinal).await?);
        }
        Ok(report)
    }

    async fn reconcile_wallet(
        &self,
        detection: &Detection<'_>,
        wallet: &HotWallet,
        first_unfinal: u64,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let from = match self.lines.reconcile_cursor(&wallet.id).await? {
            Some(block) => block,
            None => self.lines.start_reconcile_cursor(&wallet.id, first_unfinal).await?,
        };
        if from >= first_unfinal {
            return Ok(report);
        }
        let to = (first_unfinal - 1).min(from + RECONCILE_BLOCKS_PER_PASS_MAX - 1);
        let scan = match self.chain.rail.outgoing(&wallet.address, from, to).await {
            Ok(scan) => scan,
            Err(e) => {
                // Unread blocks are read on a later pass: the cursor stays.
                tracing::warn!(wallet = %wallet.id, from, to, error = %e, "cannot read outgoing transactions; not reconciling this pass");
                return Ok(report);
            }
        };
        assert!(
            scan.next_block >= from && scan.next_block <= to + 1,
            "the rail scanned outside {from}..={to}: next {}",
            scan.next_block
        );
        let hashes: Vec<TxRef> = scan.txs.iter().map(|t| t.hash.clone()).collect();
        report.add(detection.open_duplicates(&hashes, &wallet.address.to_string()).await?);
        let unknown: HashSet<TxRef> = detection.not_stored(&hashes).await?.into_iter().collect();
        for tx in scan.txs.iter().filter(|t| unknown.contains(&t.hash)) {
            tracing::error!(wallet = %wallet.address, hash = %tx.hash, nonce = tx.nonce, block = tx.block, "transfer out of a hot wallet matches no stored transaction");
            let detail = format!(
                "hot wallet {} sent {} (nonce {}, block {}), which matches no transaction payoutd stored",
                wallet.address, tx.hash, tx.nonce, tx.block
            );
            report.unmatched_transfers +=
                u32::from(detection.open_unmatched(&tx.hash, detail).await?);
        }
        self.lines.advance_reconcile_cursor(&wallet.id, from, scan.next_block).await?;
        Ok(report)
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
            return Landing::presumed("mined in a final block");
        };
        match self.chain.rail.receipt(reference, &evm.expected).await {
            Ok(Some(receipt)) => Landing::final_(
                format!("mined in final block {}", receipt.block),
                receipt.succeeded && receipt.transfer_matches,
                receipt.fee_paid,
            ),
            Ok(None) => Landing::not_final("mined in a final block (no receipt yet)"),
            Err(e) => Landing::not_final(&format!(
                "mined in a final block (its receipt cannot be read: {e})"
            )),
        }
    }
}
