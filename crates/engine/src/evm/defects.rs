//! Deliberately broken EVM behaviours for the simulator's self-test, compiled only with the `defects` feature.

use payoutd_domain::{Attempt, AttemptStatus, AttemptTx, PayoutStatus, TxKind};

use super::{EvmFamily, evm_slot};
use crate::pipeline::{AttemptEnd, Core, PayoutEnd, PipelineError};

impl EvmFamily {
    pub(super) async fn defective_on_unknown(
        &self,
        core: &Core,
        attempt: &Attempt,
    ) -> Result<bool, PipelineError> {
        let defects = core.config.defects;
        if defects.resign_on_timeout {
            self.defective_fresh_nonce_send(core, attempt, false).await?;
        }
        if defects.recredit_on_unknown {
            let Some(payout) = core.store.payout_by_id(&attempt.payout_id).await? else {
                return Ok(false);
            };
            if payout.status == PayoutStatus::Processing {
                let now = core.clock.now_ms();
                let current = core
                    .store
                    .attempts_of(&payout.id)
                    .await?
                    .into_iter()
                    .find(|a| a.id == attempt.id);
                if let Some(current) = current.filter(|a| a.status.is_live()) {
                    let end = AttemptEnd {
                        attempt_to: AttemptStatus::Dead,
                        evidence: "defect: timeout taken as failure".into(),
                        mined: None,
                        fee: None,
                        payout: PayoutEnd::Failed,
                        incident: None,
                        paid_from: self.paid_from_slot(&current, &payout),
                    };
                    core.settle(&current, &payout, end, now).await?;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The classic double-pay: a new transaction for the same payout at a nonce nobody else will use.
    pub(super) async fn defective_fresh_nonce_send(
        &self,
        core: &Core,
        attempt: &Attempt,
        store_it: bool,
    ) -> Result<(), PipelineError> {
        let Some(payout) = core.store.payout_by_id(&attempt.payout_id).await? else {
            return Ok(());
        };
        let Some(wallet) = self.wallet(&evm_slot(attempt).wallet_id) else { return Ok(()) };
        let Some(expected) = self.expected(wallet, &payout) else { return Ok(()) };
        let Some(current) = self.lines.hot_wallet(&wallet.id).await? else { return Ok(()) };
        let fresh = current.next_nonce;
        self.lines.raise_nonce_floor(&wallet.id, fresh + 1).await?;
        let Some(reference) = self.loaded_reference_of(&payout) else { return Ok(()) };
        let fees = attempt.latest_tx().fees.unwrap_or_default();
        let Ok(bytes) =
            self.chain.rail.sign_transfer(wallet, &expected, &reference, fresh, fees).await
        else {
            return Ok(());
        };
        if store_it {
            let tx = AttemptTx {
                hash: bytes.hash.clone(),
                kind: TxKind::Replacement,
                raw: bytes.raw.clone(),
                fees: Some(bytes.fees),
                created_at_ms: core.clock.now_ms(),
            };
            core.store.add_attempt_tx(&attempt.id, &tx).await?;
        }
        let _ = self.chain.rail.send(&bytes.raw).await;
        Ok(())
    }
}
