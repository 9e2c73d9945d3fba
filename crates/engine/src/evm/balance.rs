//! EVM balance check: each due hot wallet's balances and nonce read at one final block, compared with the ledger's books at that nonce.

use payoutd_domain::HotWallet;

use super::EvmFamily;
use crate::pipeline::{BalanceCheck, CheckOutcome, Core, PipelineError, Seen, TickReport};
use crate::pipeline_store::WalletBooks;

impl EvmFamily {
    /// Compares, for each hot wallet that is due, every configured asset's balance at the chain's
    /// final block with the ledger: what arrived (fundings) minus what left (payouts, fees).
    pub(super) async fn check_balances(
        &self,
        core: &Core,
        balance: &BalanceCheck,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let now = core.clock.now_ms();
        let due: Vec<&HotWallet> =
            self.chain.wallets.iter().filter(|w| balance.due(&w.id, now)).collect();
        if due.is_empty() {
            return Ok(report);
        }
        let block = match self.final_block().await {
            Ok(Some(block)) => block,
            Ok(None) => return Ok(report),
            Err(e) => {
                tracing::warn!(chain = self.chain.rail.chain_id(), error = %e, "no final block; balances not checked this pass");
                return Ok(report);
            }
        };
        for wallet in due {
            let outcome = self.check_wallet_balance(core, balance, wallet, block, now).await?;
            balance.record(core, &wallet.id, outcome, now, &mut report);
        }
        Ok(report)
    }

    async fn check_wallet_balance(
        &self,
        core: &Core,
        balance: &BalanceCheck,
        wallet: &HotWallet,
        block: u64,
        now: i64,
    ) -> Result<CheckOutcome, PipelineError> {
        let assets = &self.chain.assets;
        // Never below the blocks reconciliation has read for this wallet (in any process): a
        // balance from before them is older than the books it is compared with.
        let scanned = self.lines.reconcile_cursor(&wallet.id).await?.and_then(|c| c.checked_sub(1));
        let block = block.max(scanned.unwrap_or(0));
        let at = match self.chain.rail.wallet_at(&wallet.address, block, assets).await {
            Ok(at) => at,
            Err(e) => {
                tracing::warn!(wallet = %wallet.id, block, error = %e, "cannot read the wallet's balances; checked again later");
                return Ok(CheckOutcome::Unread);
            }
        };
        assert_eq!(at.balances.len(), assets.len(), "the rail answers one balance per asset asked");
        let (ledger, opened) = match self.lines.wallet_books(&wallet.id, at.nonce).await? {
            WalletBooks::NotComparable => return Ok(CheckOutcome::NotComparable),
            WalletBooks::Comparable { ledger, opened } => (ledger, opened),
        };
        let seen = Seen {
            wallet_id: &wallet.id,
            address: wallet.address.to_string(),
            at: format!("final block {block}"),
        };
        balance.compare_books(core, &seen, (assets, at.balances), (&ledger, &opened), now).await
    }
}
