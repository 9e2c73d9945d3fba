//! Operator actions: review decisions, cancels after signing and verdicts on payouts that need a person.

use payoutd_domain::{Attempt, AttemptStatus, AttemptTx, Destination, EvmSlot, EventType, Journal, Payout, PayoutId, PayoutStatus, TxKind, TxRef};

use super::send::GuardRecord;
use super::settle::{AttemptEnd, PayoutEnd};
use super::{Pipeline, PipelineError, Verdict, payout_transition};
use crate::rail::ExpectedTransfer;
use crate::store::NewEvent;

/// What the chain proved about a payout's last attempt.
struct NothingMoved {
    attempt_no: u32,
    /// For an attempt the database lost: its wallet and that wallet's final nonce.
    nonce_used: Option<(String, u64)>,
}

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
        if attempt.slot.as_evm().is_none() {
            return self.cancel_standalone(&payout, &attempt).await;
        }
        let (chain, wallet) = self.wallet_of(&operable_evm_slot(&attempt)?.wallet_id).ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
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
    /// proof too. With a live attempt, paid or failed needs it unable to land (its nonce used by a
    /// final block, none of its hashes mined). Without one, failed and retry need the last attempt
    /// proven to have moved nothing: its transaction reverted in a final block, or, for an attempt the
    /// send guard remembers and the database lost, its nonce used by a final block without it (a
    /// transaction that succeeded may have moved money, I6). Retry starts the next attempt under the
    /// same hold, within the chain's limit of attempts.
    pub async fn resolve_needs_attention(&self, id: &PayoutId, verdict: Verdict, evidence: &str) -> Result<Payout, PipelineError> {
        let payout = self.operator_payout(id, PayoutStatus::NeedsAttention).await?;
        if evidence.trim().is_empty() {
            return Err(PipelineError::Refused("evidence is required".into()));
        }
        let attempts = self.store.attempts_of(&payout.id).await?;
        if let Some(live) = attempts.iter().find(|a| a.status.is_live()) {
            return self.resolve_with_live_attempt(&payout, live, verdict, evidence).await;
        }
        let now = self.clock.now_ms();
        tracing::info!(payout = %payout.id, ?verdict, %evidence, "operator verdict");
        let release = || Journal::release(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount);
        match verdict {
            Verdict::Paid => {
                let journals = self.paid_journals(&payout, &attempts).await?;
                self.applied(self.transition(&payout, PayoutStatus::Paid, EventType::PayoutPaid, journals, now).await?)
            }
            Verdict::Failed => {
                self.prove_nothing_moved(&payout, &attempts).await?;
                self.applied(self.transition(&payout, PayoutStatus::Failed, EventType::PayoutFailed, vec![release()], now).await?)
            }
            Verdict::Retry => {
                let proven = self.prove_nothing_moved(&payout, &attempts).await?;
                let next = proven.attempt_no + 1;
                let attempts_max = match (self.chain_of(&payout.asset), self.standalone_of(&payout.asset)) {
                    (Some((chain, _)), _) => chain.rail.attempts_max(),
                    (None, Some(line)) => line.rail.attempts_max(),
                    (None, None) => 0,
                };
                if next > attempts_max {
                    return Err(PipelineError::Refused(format!("the rail allows {attempts_max} attempts per payout; resolve it as failed")));
                }
                let mut after = payout.clone();
                after.status = PayoutStatus::Processing;
                after.version += 1;
                after.updated_at_ms = now;
                let mut retry = payout_transition(&payout, PayoutStatus::Processing, EventType::PayoutProcessing, vec![], now);
                retry.event = NewEvent::for_payout_attempt(EventType::PayoutProcessing, &after, next, now);
                if let Some((wallet_id, final_nonce)) = &proven.nonce_used {
                    // The database lost the counter's advance too: the next attempt must not sign at a used nonce.
                    self.store.raise_nonce_floor(wallet_id, *final_nonce).await?;
                }
                self.applied(self.store.retry_payout(&retry, next).await?)
            }
        }
    }

    /// Either verdict ends the live attempt: its bytes must provably be unable to land, or the payout
    /// could be paid again (paid) or re-credited while the money leaves (failed).
    async fn resolve_with_live_attempt(&self, payout: &Payout, attempt: &Attempt, verdict: Verdict, evidence: &str) -> Result<Payout, PipelineError> {
        let payout_end = match verdict {
            Verdict::Paid => PayoutEnd::Paid,
            Verdict::Failed => PayoutEnd::Failed,
            Verdict::Retry => return Err(PipelineError::Refused("the payout has a live attempt; cancel it first".into())),
        };
        self.prove_cannot_land(attempt, payout).await?;
        let proof = format!("operator resolved the payout as {verdict:?}: {evidence}");
        let end = AttemptEnd { attempt_to: AttemptStatus::Dead, evidence: proof, mined: None, fee: None, payout: payout_end, incident: None };
        if self.settle(attempt, payout, end, self.clock.now_ms()).await?.is_none() {
            return Err(PipelineError::Refused("the payout changed concurrently; look again".into()));
        }
        self.store.payout_by_id(&payout.id).await?.ok_or(PipelineError::NotFound)
    }

    /// What a paid verdict without a live attempt books. The money left the wallet it was paid
    /// from, and the ledger books it there (or the balance check would find the wallet short by
    /// the payout forever): for an attempt the database lost, the wallet the send guard remembers,
    /// with its transaction's fee when the chain shows it succeeded; else the last stored
    /// attempt's wallet (its fee was booked when it ended). A provider's account is not in the
    /// ledger: the payout settles to the world.
    async fn paid_journals(&self, payout: &Payout, attempts: &[Attempt]) -> Result<Vec<Journal>, PipelineError> {
        let settle_from = |wallet: &str| Journal::settle_from_wallet(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount, wallet);
        let last_no = attempts.last().map_or(0, |a| a.attempt_no);
        if let Some(record) = self.remembered(payout, last_no + 1).await?.as_deref().and_then(GuardRecord::parse)
            && let Some((chain, wallet)) = self.wallet_of(&record.wallet_id)
            && let (Some((_, asset)), Destination::Evm(to), Ok(hash)) = (self.chain_of(&payout.asset), payout.destination, TxRef::parse(&record.hash))
        {
            let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
            let receipt = chain.rail.receipt(&hash, &expected).await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
            if let Some(receipt) = receipt.filter(|r| r.succeeded) {
                let mut journals = vec![settle_from(&wallet.id)];
                if !receipt.fee_paid.is_zero() {
                    journals.push(Journal::fee(&wallet.id, &chain.native_asset().code, hash.as_str(), receipt.fee_paid));
                }
                return Ok(journals);
            }
        }
        Ok(vec![match attempts.last().and_then(|a| a.slot.paying_wallet()) {
            Some(wallet) => settle_from(wallet),
            None => Journal::settle(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount),
        }])
    }

    /// The chain's proof that the payout's last attempt moved nothing.
    async fn prove_nothing_moved(&self, payout: &Payout, attempts: &[Attempt]) -> Result<NothingMoved, PipelineError> {
        if let Some(last) = attempts.last().filter(|a| a.slot.as_evm().is_none()) {
            self.prove_dead_by_rail(last, payout).await?;
            return Ok(NothingMoved { attempt_no: last.attempt_no, nonce_used: None });
        }
        let last_no = attempts.last().map_or(0, |a| a.attempt_no);
        if let Some(record) = self.remembered(payout, last_no + 1).await? {
            let nonce_used = self.prove_lost_attempt_cannot_land(payout, &record).await?;
            return Ok(NothingMoved { attempt_no: last_no + 1, nonce_used: Some(nonce_used) });
        }
        let last = attempts.last().ok_or_else(|| PipelineError::Refused("the payout has no attempt to judge".into()))?;
        self.prove_reverted(last, payout).await?;
        Ok(NothingMoved { attempt_no: last.attempt_no, nonce_used: None })
    }

    /// An attempt only the send guard remembers: its nonce used by a final block, and its hash either
    /// never mined or reverted. Returns its wallet and the wallet's final nonce.
    async fn prove_lost_attempt_cannot_land(&self, payout: &Payout, text: &str) -> Result<(String, u64), PipelineError> {
        let record = GuardRecord::parse(text)
            .ok_or_else(|| PipelineError::Refused(format!("the send guard's record {text:?} names no wallet and nonce: the chain cannot be asked")))?;
        let (chain, wallet) = self.wallet_of(&record.wallet_id).ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Err(PipelineError::Refused("unknown asset".into())) };
        let Destination::Evm(to) = payout.destination else { return Err(PipelineError::Refused("not an EVM payout".into())) };
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        // The nonce first, the receipt after: if a final block used the nonce and our hash has no
        // receipt afterwards, the final use was not ours.
        let final_nonce = chain.rail.final_nonce(&wallet.address).await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
        let hash = TxRef::parse(&record.hash).map_err(|_| PipelineError::Refused(format!("the send guard's hash {:?} is malformed", record.hash)))?;
        let receipt = chain.rail.receipt(&hash, &expected).await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
        if receipt.is_some_and(|r| r.succeeded) {
            return Err(PipelineError::Refused(format!("the remembered transaction {} succeeded on chain: money may have moved", record.hash)));
        }
        if final_nonce <= record.nonce {
            return Err(PipelineError::Refused(format!(
                "the remembered transaction {} (nonce {}) is not excluded by a final block yet (final nonce {final_nonce}): it may still land",
                record.hash, record.nonce
            )));
        }
        Ok((record.wallet_id, final_nonce))
    }

    /// The chain's proof that `attempt` moved nothing: one of its transactions has a receipt that
    /// reverted, in a final block. A transaction that succeeded without the expected transfer (a
    /// mismatch) is not proof: it may have moved money some other way.
    async fn prove_reverted(&self, attempt: &Attempt, payout: &Payout) -> Result<(), PipelineError> {
        if attempt.status != AttemptStatus::Reverted {
            return Err(PipelineError::Refused(format!("the last attempt is {}; only a reverted one proves nothing moved", attempt.status)));
        }
        let (chain, wallet) = self.wallet_of(&operable_evm_slot(attempt)?.wallet_id).ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Err(PipelineError::Refused("unknown asset".into())) };
        let Destination::Evm(to) = payout.destination else { return Err(PipelineError::Refused("not an EVM payout".into())) };
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        let last_final = chain.rail.final_block().await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
        for tx in &attempt.txs {
            let Some(receipt) = chain.rail.receipt(&tx.hash, &expected).await.map_err(|e| PipelineError::RailUnavailable(e.0))? else { continue };
            let final_block = last_final.is_some_and(|f| receipt.block <= f);
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

    /// On a rail without nonces the rail's own proof of death decides (an expired blockhash or a
    /// moved durable nonce with no signature known; the provider's terminal failed state for our
    /// reference): the same proof the resolver needs before a next attempt.
    async fn prove_dead_by_rail(&self, attempt: &Attempt, payout: &Payout) -> Result<String, PipelineError> {
        let line = self.standalone_of(&payout.asset).ok_or_else(|| PipelineError::Refused(format!("no rail for {} in this process", payout.asset)))?;
        match line.rail.status(attempt, payout).await.map_err(|e| PipelineError::RailUnavailable(e.0))? {
            crate::rail::StandaloneStatus::Dead { proof, .. } => Ok(proof),
            crate::rail::StandaloneStatus::Reverted { reference, detail, .. } => Ok(format!("{reference} failed at finality ({detail}): nothing but its fee moved")),
            other => Err(PipelineError::Refused(format!(
                "{} reports attempt {} as {other:?}: only its proof that the attempt moved nothing allows this verdict",
                line.rail.name(),
                attempt.attempt_no
            ))),
        }
    }

    async fn prove_cannot_land(&self, attempt: &Attempt, payout: &Payout) -> Result<(), PipelineError> {
        if attempt.slot.as_evm().is_none() {
            return self.prove_dead_by_rail(attempt, payout).await.map(|_| ());
        }
        let (chain, wallet) = self.wallet_of(&operable_evm_slot(attempt)?.wallet_id).ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Err(PipelineError::Refused("unknown asset".into())) };
        let Destination::Evm(to) = payout.destination else { return Err(PipelineError::Refused("not an EVM payout".into())) };
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        // Only a final block proves the nonce used: a use seen in a block a reorg can drop could be
        // taken back, and then these bytes could still land after the hold was released (I6).
        let final_nonce = chain.rail.final_nonce(&wallet.address).await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
        let nonce = operable_evm_slot(attempt)?.nonce;
        if final_nonce <= nonce {
            return Err(PipelineError::Refused(format!(
                "attempt nonce {} is not used by a final block yet (final nonce {final_nonce}): its bytes may still land; \
                 cancel it first, or wait for finality",
                nonce
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

/// The EVM slot of an attempt an operator acts on. The actions here (a cancel at the same nonce, a
/// proof from receipts and the final nonce) are EVM reasoning; on another rail they are refused,
/// never guessed: that rail's own proofs (an expired blockhash, a provider's lookup) settle it.
fn operable_evm_slot(attempt: &Attempt) -> Result<&EvmSlot, PipelineError> {
    attempt.slot.as_evm().ok_or_else(|| {
        PipelineError::Refused(format!(
            "attempt {} is on rail {}: this operator action works on EVM attempts only; the rail's own resolution (expiry, lookup) decides it",
            attempt.id,
            attempt.slot.rail()
        ))
    })
}
