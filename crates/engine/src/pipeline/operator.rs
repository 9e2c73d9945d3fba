//! Operator actions: review decisions, cancels after signing and verdicts on payouts that need a person.

use payoutd_domain::{Attempt, AttemptStatus, AttemptTx, Destination, EventType, Journal, Payout, PayoutId, PayoutStatus, TxKind};

use super::settle::{AttemptEnd, PayoutEnd};
use super::{Pipeline, PipelineError, Verdict};
use crate::rail::ExpectedTransfer;

impl Pipeline {
    /// held_for_review -> approved; the signing caps no longer apply to this payout.
    pub async fn approve(&self, id: &PayoutId) -> Result<Payout, PipelineError> {
        let payout = self.operator_payout(id, PayoutStatus::HeldForReview).await?;
        self.applied(self.transition(&payout, PayoutStatus::Approved, EventType::PayoutReviewApproved, vec![], self.clock.now_ms()).await?)
    }

    /// held_for_review -> rejected, releasing the hold.
    pub async fn reject(&self, id: &PayoutId) -> Result<Payout, PipelineError> {
        let payout = self.operator_payout(id, PayoutStatus::HeldForReview).await?;
        let release = Journal::release(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount);
        self.applied(self.transition(&payout, PayoutStatus::Rejected, EventType::PayoutRejected, vec![release], self.clock.now_ms()).await?)
    }

    /// Cancel after signing: a zero-value self-send at the attempt's nonce, stored, then sent. The
    /// payout fails only when the resolver sees the cancel final; if the payout lands first, it is paid.
    /// Asked again, it answers with the cancel already stored (sending its bytes again) instead of
    /// signing a new, costlier one each time.
    pub async fn cancel_signed(&self, id: &PayoutId) -> Result<AttemptTx, PipelineError> {
        let payout = self.operator_payout(id, PayoutStatus::Processing).await?;
        let attempt = self.live_attempt(&payout).await?;
        let (chain, wallet) = self.wallet_of(&attempt.hot_wallet_id).ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        if let Some(existing) = attempt.txs.iter().rev().find(|t| t.kind == TxKind::Cancel) {
            self.send_tx(chain, &attempt, existing).await?;
            return Ok(existing.clone());
        }
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Err(PipelineError::Refused("unknown asset".into())) };
        let Destination::Evm(to) = payout.destination else { return Err(PipelineError::Refused("not an EVM payout".into())) };
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        let now = self.clock.now_ms();
        let cancel = self
            .sign_bumped(chain, wallet, &attempt, &expected, TxKind::Cancel, now)
            .await?
            .ok_or_else(|| PipelineError::Refused("the fee cap does not allow outbidding the pending transaction".into()))?;
        self.store_attempt_tx(&attempt, &cancel).await?;
        self.send_tx(chain, &attempt, &cancel).await?;
        Ok(cancel)
    }

    /// A person settles a payout in needs_attention, with evidence. Every verdict rests on the chain's
    /// proof too: with a live attempt, either verdict needs it unable to land (its nonce used by a final
    /// block, none of its hashes mined); without one, "failed" needs the last attempt's transaction
    /// reverted in a final block (a transaction that succeeded may have moved money, I6).
    pub async fn resolve_needs_attention(&self, id: &PayoutId, verdict: Verdict, evidence: &str) -> Result<Payout, PipelineError> {
        let payout = self.operator_payout(id, PayoutStatus::NeedsAttention).await?;
        if evidence.trim().is_empty() {
            return Err(PipelineError::Refused("evidence is required".into()));
        }
        let now = self.clock.now_ms();
        let (to, event_type, journal, payout_end) = match verdict {
            Verdict::Paid => (PayoutStatus::Paid, EventType::PayoutPaid, Journal::settle(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount), PayoutEnd::Paid),
            Verdict::Failed => {
                (PayoutStatus::Failed, EventType::PayoutFailed, Journal::release(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount), PayoutEnd::Failed)
            }
        };
        let attempts = self.store.attempts_of(&payout.id).await?;
        let Some(attempt) = attempts.iter().find(|a| a.status.is_live()) else {
            if verdict == Verdict::Failed {
                let last = attempts.last().ok_or_else(|| PipelineError::Refused("the payout has no attempt to judge".into()))?;
                self.prove_reverted(last, &payout).await?;
            }
            return self.applied(self.transition(&payout, to, event_type, vec![journal], now).await?);
        };
        // Either verdict ends the attempt: its bytes must provably be unable to land, or the payout
        // could be paid again (Paid) or re-credited while the money leaves (Failed).
        self.prove_cannot_land(attempt, &payout).await?;
        let proof = format!("operator resolved the payout as {}: {evidence}", to.as_str());
        let end = AttemptEnd { attempt_to: AttemptStatus::Dead, evidence: proof, mined: None, payout: payout_end, incident: None };
        if self.settle(attempt, &payout, end, now).await?.is_none() {
            return Err(PipelineError::Refused("the payout changed concurrently; look again".into()));
        }
        self.store.payout_by_id(id).await?.ok_or(PipelineError::NotFound)
    }

    /// The chain's proof that `attempt` moved nothing: one of its transactions has a receipt that
    /// reverted, in a final block. A transaction that succeeded without the expected transfer (a
    /// mismatch) is not proof: it may have moved money some other way.
    async fn prove_reverted(&self, attempt: &Attempt, payout: &Payout) -> Result<(), PipelineError> {
        if attempt.status != AttemptStatus::Reverted {
            return Err(PipelineError::Refused(format!("the last attempt is {}; only a reverted one proves nothing moved", attempt.status)));
        }
        let (chain, wallet) = self.wallet_of(&attempt.hot_wallet_id).ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Err(PipelineError::Refused("unknown asset".into())) };
        let Destination::Evm(to) = payout.destination else { return Err(PipelineError::Refused("not an EVM payout".into())) };
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        let head = chain.rail.head_block().await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
        for tx in &attempt.txs {
            let Some(receipt) = chain.rail.receipt(&tx.hash, &expected).await.map_err(|e| PipelineError::RailUnavailable(e.0))? else { continue };
            let final_block = head.saturating_sub(receipt.block) + 1 >= chain.rail.finality_confirmations();
            if receipt.succeeded {
                return Err(PipelineError::Refused(format!(
                    "{} {} succeeded on chain: money may have moved; it cannot be failed",
                    tx.kind.as_str(),
                    tx.hash
                )));
            }
            if !final_block {
                return Err(PipelineError::Refused(format!("{} {} reverted in a block that is not final yet; wait for finality", tx.kind.as_str(), tx.hash)));
            }
            return Ok(());
        }
        Err(PipelineError::Refused("no transaction of the last attempt has a receipt now; the chain proves nothing yet".into()))
    }

    async fn prove_cannot_land(&self, attempt: &Attempt, payout: &Payout) -> Result<(), PipelineError> {
        let (chain, wallet) = self.wallet_of(&attempt.hot_wallet_id).ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Err(PipelineError::Refused("unknown asset".into())) };
        let Destination::Evm(to) = payout.destination else { return Err(PipelineError::Refused("not an EVM payout".into())) };
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        // Only a final block proves the nonce used: a use seen in a block a reorg can drop could be
        // taken back, and then these bytes could still land after the hold was released (I6).
        let final_nonce = chain.rail.final_nonce(&wallet.address).await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
        if final_nonce <= attempt.nonce {
            return Err(PipelineError::Refused(format!(
                "attempt nonce {} is not used by a final block yet (final nonce {final_nonce}): its bytes may still land; \
                 cancel it first, or wait for finality",
                attempt.nonce
            )));
        }
        for tx in &attempt.txs {
            if chain.rail.receipt(&tx.hash, &expected).await.map_err(|e| PipelineError::RailUnavailable(e.0))?.is_some() {
                return Err(PipelineError::Refused(format!("{} {} has a receipt: look at it before failing the payout", tx.kind.as_str(), tx.hash)));
            }
        }
        Ok(())
    }
}
