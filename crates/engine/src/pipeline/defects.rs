//! Deliberately broken behaviours for the simulator's self-test, compiled only with the `defects` feature.

use payoutd_domain::{Attempt, AttemptStatus, AttemptTx, Destination, PayoutStatus, TxKind};

use super::settle::{AttemptEnd, PayoutEnd};
use super::{EvmChain, Pipeline, PipelineError};
use crate::rail::ExpectedTransfer;

impl Pipeline {
    pub(super) async fn defective_on_unknown(&self, chain: &EvmChain, attempt: &Attempt) -> Result<bool, PipelineError> {
        let defects = self.config.defects;
        if defects.resign_on_timeout {
            self.defective_fresh_nonce_send(chain, attempt, false).await?;
        }
        if defects.recredit_on_unknown {
            let Some(payout) = self.store.payout_by_id(&attempt.payout_id).await? else { return Ok(false) };
            if payout.status == PayoutStatus::Processing {
                let now = self.clock.now_ms();
                let current = self.store.attempts_of(&payout.id).await?.into_iter().find(|a| a.id == attempt.id);
                if let Some(current) = current.filter(|a| a.status.is_live()) {
                    let end = AttemptEnd {
                        attempt_to: AttemptStatus::Dead,
                        evidence: "defect: timeout taken as failure".into(),
                        mined: None,
                        fee: None,
                        payout: PayoutEnd::Failed,
                        incident: None,
                    };
                    self.settle(&current, &payout, end, now).await?;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The classic double-pay: a new transaction for the same payout at a nonce nobody else will use.
    pub(super) async fn defective_fresh_nonce_send(&self, chain: &EvmChain, attempt: &Attempt, store_it: bool) -> Result<(), PipelineError> {
        let Some(payout) = self.store.payout_by_id(&attempt.payout_id).await? else { return Ok(()) };
        let Some(wallet) = chain.wallets.iter().find(|w| w.id == super::evm::evm_slot(attempt).wallet_id) else { return Ok(()) };
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Ok(()) };
        let Destination::Evm(to) = payout.destination else { return Ok(()) };
        let Some(current) = self.store.hot_wallet(&wallet.id).await? else { return Ok(()) };
        let fresh = current.next_nonce;
        self.store.raise_nonce_floor(&wallet.id, fresh + 1).await?;
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        let Ok(bytes) = chain.rail.sign_transfer(wallet, &expected, fresh, attempt.latest_tx().fees.unwrap_or_default()) else { return Ok(()) };
        if store_it {
            let tx = AttemptTx { hash: bytes.hash.clone(), kind: TxKind::Replacement, raw: bytes.raw.clone(), fees: Some(bytes.fees), created_at_ms: self.clock.now_ms() };
            self.store.add_attempt_tx(&attempt.id, &tx).await?;
        }
        let _ = chain.rail.send(&bytes.raw).await;
        Ok(())
    }
}
