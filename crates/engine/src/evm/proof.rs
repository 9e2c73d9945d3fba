//! What the EVM chain proves for a person's actions: a cancel at the same nonce, and the proofs that an attempt cannot land or moved nothing (a final nonce past it, a final revert).

use payoutd_domain::ledger::WalletSend;
use payoutd_domain::{Attempt, AttemptStatus, AttemptTx, EvmSlot, Journal, Payout, TxKind, TxRef};

use super::guard_record::GuardRecord;
use super::{EvmFamily, ExpectedTransfer};
use crate::pipeline::{Core, LastAttempt, NothingMoved, PipelineError};

impl EvmFamily {
    /// Cancel after signing: a zero-value self-send at the attempt's nonce, stored, then sent.
    /// Asked again, it sends the cancel already stored instead of signing a new, costlier one.
    pub(super) async fn cancel_at_same_nonce(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<AttemptTx, PipelineError> {
        let (wallet, expected) = self.operable(attempt, payout)?;
        if let Some(existing) = attempt.txs.iter().rev().find(|t| t.kind == TxKind::Cancel) {
            self.send_tx(core, payout, attempt, existing).await?;
            return Ok(existing.clone());
        }
        let now = core.clock.now_ms();
        let cancel = self
            .sign_bumped(core, wallet, attempt, &expected, super::resolve::Bumped::Cancel, now)
            .await?
            .ok_or_else(|| {
                PipelineError::Refused(
                    "the fee cap does not allow outbidding the pending transaction".into(),
                )
            })?;
        core.store_attempt_tx(attempt, &cancel).await?;
        self.send_tx(core, payout, attempt, &cancel).await?;
        Ok(cancel)
    }

    /// A live attempt cannot land once a final block used its nonce and none of its hashes has a
    /// receipt. Only a final block proves the nonce used: a use seen in a block a reorg can drop
    /// could be taken back, and then these bytes could still land after the hold was released (I6).
    pub(super) async fn prove_nonce_used_without_it(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<(), PipelineError> {
        let (wallet, expected) = self.operable(attempt, payout)?;
        let queries: Vec<(TxRef, ExpectedTransfer)> =
            attempt.txs.iter().map(|tx| (tx.hash.clone(), expected.clone())).collect();
        // One node that has the final block answers the nonce and every receipt.
        let view =
            self.chain.rail.final_view(&wallet.address, &queries).await.map_err(unavailable)?;
        let nonce = operable_evm_slot(attempt)?.nonce;
        let final_nonce = view.nonce;
        if final_nonce <= nonce {
            return Err(PipelineError::Refused(format!(
                "attempt nonce {nonce} is not used by a final block yet (final nonce {final_nonce}): its bytes may still land; \
                 cancel it first, or wait for finality"
            )));
        }
        if let Some((tx, _)) = attempt.txs.iter().zip(&view.receipts).find(|(_, r)| r.is_some()) {
            return Err(PipelineError::Refused(format!(
                "{} {} has a receipt: look at it before failing the payout",
                tx.kind.as_str(),
                tx.hash
            )));
        }
        Ok(())
    }

    /// The chain's proof that the payout's last attempt moved nothing: for an attempt only the send
    /// guard remembers, its nonce used by a final block without it (the wallet's counter, which
    /// lost its advance too, is moved past it by the signing pass once reconciliation has read
    /// those nonces back); else the last stored attempt reverted in a final block.
    pub(super) async fn prove_last_moved_nothing(
        &self,
        core: &Core,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<NothingMoved, PipelineError> {
        match core.last_attempt(payout, attempts).await? {
            LastAttempt::Lost { attempt_no, record } => {
                let lost = self.prove_lost_attempt_cannot_land(payout, &record).await?;
                Ok(NothingMoved { attempt_no, journals: lost.fee.into_iter().collect() })
            }
            LastAttempt::Stored(last) => {
                self.prove_reverted(last, payout).await?;
                Ok(NothingMoved { attempt_no: last.attempt_no, journals: Vec::new() })
            }
            LastAttempt::NoneMade => Err(LastAttempt::no_attempt_to_judge()),
        }
    }

    /// What a paid verdict without a live attempt books. The money left the wallet it was paid
    /// from, and the ledger books it there (or the balance check would find the wallet short by
    /// the payout forever): for an attempt the database lost, the wallet the send guard remembers,
    /// with its transaction's fee when the chain shows it succeeded; else the last stored
    /// attempt's wallet (its fee was booked when it ended).
    pub(super) async fn journals_of_paid_verdict(
        &self,
        core: &Core,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<Vec<Journal>, PipelineError> {
        // An EVM chain makes no routed attempt: its attempts send the payout's own asset.
        let settle_from = |wallet: &str| {
            Journal::settle_from_wallet(
                &payout.merchant_id,
                &payout.asset,
                payout.id.as_str(),
                payout.amount,
                &WalletSend { wallet_id: wallet.to_owned(), sent_as: payout.asset.clone() },
            )
        };
        if let LastAttempt::Lost { record, .. } = core.last_attempt(payout, attempts).await?
            && let Some(record) = GuardRecord::parse(&record)
            && let Some(wallet) = self.wallet(&record.wallet_id)
            && let (Some(expected), Ok(hash)) =
                (self.expected(wallet, payout), TxRef::parse(&record.hash))
        {
            let receipt = self.chain.rail.receipt(&hash, &expected).await.map_err(unavailable)?;
            if let Some(receipt) = receipt.filter(|r| r.succeeded) {
                let mut journals = settle_from(&wallet.id);
                if !receipt.fee_paid.is_zero() {
                    journals.push(Journal::fee(
                        &wallet.id,
                        &self.chain.native_asset().code,
                        hash.as_str(),
                        receipt.fee_paid,
                    ));
                }
                return Ok(journals);
            }
        }
        Ok(match attempts.last().and_then(|a| a.slot.paying_wallet()) {
            Some(wallet) => settle_from(wallet),
            None => vec![Journal::settle(
                &payout.merchant_id,
                &payout.asset,
                payout.id.as_str(),
                payout.amount,
            )],
        })
    }

    /// An attempt only the send guard remembers: its nonce used by a final block, and its hash either
    /// never mined or reverted (then its fee, which no settlement booked, is the verdict's to book).
    async fn prove_lost_attempt_cannot_land(
        &self,
        payout: &Payout,
        text: &str,
    ) -> Result<LostAttempt, PipelineError> {
        let record = GuardRecord::parse(text)
            .ok_or_else(|| PipelineError::Refused(format!("the send guard's record {text:?} names no wallet and nonce: the chain cannot be asked")))?;
        let wallet = self
            .wallet(&record.wallet_id)
            .ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        let expected = self
            .expected(wallet, payout)
            .ok_or_else(|| PipelineError::Refused("not a payout of this chain".into()))?;
        // The nonce first, the receipt after: if a final block used the nonce and our hash has no
        // receipt afterwards, the final use was not ours.
        let hash = TxRef::parse(&record.hash).map_err(|_| {
            PipelineError::Refused(format!("the send guard's hash {:?} is malformed", record.hash))
        })?;
        // One node that has the final block answers both: a replica behind it knows no receipt.
        let view = self
            .chain
            .rail
            .final_view(&wallet.address, &[(hash.clone(), expected)])
            .await
            .map_err(unavailable)?;
        let final_nonce = view.nonce;
        let receipt = view.receipts.into_iter().next().flatten();
        if receipt.as_ref().is_some_and(|r| r.succeeded) {
            return Err(PipelineError::Refused(format!(
                "the remembered transaction {} succeeded on chain: money may have moved",
                record.hash
            )));
        }
        if final_nonce <= record.nonce {
            return Err(PipelineError::Refused(format!(
                "the remembered transaction {} (nonce {}) is not excluded by a final block yet (final nonce {final_nonce}): it may still land",
                record.hash, record.nonce
            )));
        }
        let fee = receipt.filter(|r| !r.fee_paid.is_zero()).map(|r| {
            Journal::fee(
                &record.wallet_id,
                &self.chain.native_asset().code,
                hash.as_str(),
                r.fee_paid,
            )
        });
        Ok(LostAttempt { fee })
    }

    /// The chain's proof that `attempt` moved nothing: one of its transactions has a receipt that
    /// reverted, in a final block. A transaction that succeeded without the expected transfer (a
    /// mismatch) is not proof: it may have moved money some other way.
    async fn prove_reverted(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<(), PipelineError> {
        if attempt.status != AttemptStatus::Reverted {
            return Err(PipelineError::Refused(format!(
                "the last attempt is {}; only a reverted one proves nothing moved",
                attempt.status
            )));
        }
        let (_, expected) = self.operable(attempt, payout)?;
        let rail = &self.chain.rail;
        let last_final = self.final_block().await.map_err(unavailable)?;
        for tx in &attempt.txs {
            let Some(receipt) = rail.receipt(&tx.hash, &expected).await.map_err(unavailable)?
            else {
                continue;
            };
            let final_block = last_final.is_some_and(|f| receipt.block <= f);
            if receipt.succeeded {
                return Err(PipelineError::Refused(format!(
                    "{} {} succeeded on chain: money may have moved; it cannot be failed",
                    tx.kind.as_str(),
                    tx.hash
                )));
            }
            if !final_block {
                return Err(PipelineError::Refused(format!(
                    "{} {} reverted in a block that is not final yet; wait for finality",
                    tx.kind.as_str(),
                    tx.hash
                )));
            }
            return Ok(());
        }
        Err(PipelineError::Refused(
            "no transaction of the last attempt has a receipt now; the chain proves nothing yet"
                .into(),
        ))
    }

    /// The wallet and expected transfer of an attempt a person acts on.
    fn operable(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<(&payoutd_domain::HotWallet, ExpectedTransfer), PipelineError> {
        let wallet = self
            .wallet(&operable_evm_slot(attempt)?.wallet_id)
            .ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        let expected = self
            .expected(wallet, payout)
            .ok_or_else(|| PipelineError::Refused("not a payout of this chain".into()))?;
        Ok((wallet, expected))
    }
}

/// What the chain proved about an attempt only the send guard remembers.
struct LostAttempt {
    /// The `fee` journal of its reverted transaction; none when it was never mined.
    fee: Option<Journal>,
}

fn unavailable(e: crate::rail::ReadError) -> PipelineError {
    PipelineError::RailUnavailable(e.0)
}

/// The EVM slot of an attempt an operator acts on: an attempt of another rail here (its asset
/// moved between rails in the configuration) is refused, never guessed.
fn operable_evm_slot(attempt: &Attempt) -> Result<&EvmSlot, PipelineError> {
    attempt.slot.as_evm().ok_or_else(|| {
        PipelineError::Refused(format!(
            "attempt {} is on rail {}, not on this chain: its own rail's proof decides it",
            attempt.id,
            attempt.slot.rail()
        ))
    })
}
