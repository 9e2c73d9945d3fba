//! What a landed Solana transaction did, read back at the payout commitment: whether it moved exactly the payout's amount, what it cost the hot wallet, and whether the node's history is long enough for a signature's absence to prove anything.

use super::*;
use payoutd_engine::standalone::landed::LandedEffect;
use solana_transaction_status_client_types::TransactionStatus;

impl SolanaRail {
    /// What the landed transaction did: whether it moved exactly the payout's amount to its
    /// destination, and what it cost the hot wallet beyond that (fee, rent of a created account).
    pub(super) async fn landed_effect(
        &self,
        signature: &Signature,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<LandedEffect, ReadError> {
        let commitment = self.paid_at.commitment();
        let landed = self
            .endpoints
            .read("transaction", |rpc| rpc.transaction(signature, commitment))
            .await
            .map_err(read_error)?;
        let Some(meta) = landed.transaction.meta else {
            return Err(ReadError(format!("transaction {signature} has no status meta")));
        };
        let stored = attempt
            .txs
            .iter()
            .find(|tx| tx.hash.as_str() == signature.to_string())
            .ok_or_else(|| ReadError(format!("{signature} is not this attempt's")))?;
        let keys = decode(&stored.raw).map_err(|e| ReadError(e.to_string()))?.message.account_keys;
        let spent = lamports_spent(&meta, &keys, &self.signer.pubkey()).ok_or_else(|| {
            ReadError(format!("transaction {signature}: no balances for the hot wallet"))
        })?;
        let (Some(token), Destination::Solana(destination), None) =
            (self.token_of(&payout.asset), &payout.destination, &meta.err)
        else {
            // A failed transaction moved nothing (atomic); an asset the rail does not know is
            // presumed to have moved the payout's amount.
            let moved = if meta.err.is_some() { Amount::ZERO } else { payout.amount };
            return Ok(LandedEffect::unproven(spent, moved));
        };
        let destination = Pubkey::new_from_array(*destination.as_bytes());
        let expected = base_units(payout.amount).map(i128::from);
        Ok(match token {
            SolanaToken::Sol => {
                let received = sol_received(&meta, &keys, &destination).unwrap_or(0);
                LandedEffect::of_native(spent, received, expected).ok_or_else(|| {
                    ReadError(format!(
                        "transaction {signature}: the recipient got more than the hot wallet spent"
                    ))
                })?
            }
            SolanaToken::Spl { mint, .. } => {
                LandedEffect::of_token(spent, spl_received(&meta, &destination, &mint), expected)
            }
        })
    }

    /// What the attempt's cancel cost the hot wallet, when it landed at the payout commitment.
    pub(super) async fn cancel_fee_paid(&self, attempt: &Attempt) -> Result<Amount, ReadError> {
        let Some(cancel) = attempt.txs.iter().find(|tx| tx.kind == TxKind::Cancel) else {
            return Ok(Amount::ZERO);
        };
        let signature = cancel
            .hash
            .as_str()
            .parse::<Signature>()
            .map_err(|e| ReadError(format!("stored signature {}: {e}", cancel.hash)))?;
        let status = self
            .endpoints
            .read("statuses", |rpc| rpc.statuses(std::slice::from_ref(&signature)))
            .await
            .map_err(read_error)?
            .into_iter()
            .next()
            .flatten();
        if !status.is_some_and(|s| self.paid_at.reached(s.confirmation_status.as_ref())) {
            return Ok(Amount::ZERO); // something else moved the nonce
        }
        let commitment = self.paid_at.commitment();
        let landed = self
            .endpoints
            .read("transaction", |rpc| rpc.transaction(&signature, commitment))
            .await
            .map_err(read_error)?;
        let Some(meta) = landed.transaction.meta else {
            return Err(ReadError(format!("transaction {signature} has no status meta")));
        };
        let keys = decode(&cancel.raw).map_err(|e| ReadError(e.to_string()))?.message.account_keys;
        let spent = lamports_spent(&meta, &keys, &self.signer.pubkey()).ok_or_else(|| {
            ReadError(format!("transaction {signature}: no balances for the hot wallet"))
        })?;
        Ok(Amount::from_u128(spent.try_into().map_err(|_| {
            ReadError(format!("transaction {signature}: the hot wallet gained lamports"))
        })?))
    }

    /// Fails unless the node still holds blocks down to `signed_at_block_height`: a status search
    /// finds nothing older than the node's first block, so there "not found" proves nothing (a
    /// node restored from a snapshot, or one that prunes, after long downtime).
    pub(super) async fn history_reaches(
        &self,
        rpc: &SolanaRpc,
        signed_at_block_height: u64,
        attempt: &Attempt,
    ) -> Result<(), ReadError> {
        let first = rpc.first_available_block_height().await.map_err(read_error)?;
        if !absence_is_proof(first, signed_at_block_height) {
            return Err(ReadError(format!(
                "attempt {} was signed at block height {signed_at_block_height} but the node's history starts at {first}: \
                 its signatures' absence there proves nothing",
                attempt.id
            )));
        }
        Ok(())
    }

    /// The status of the attempt's signatures, when any of them is known to the node.
    pub(super) async fn landed(
        &self,
        signatures: &[Signature],
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<Option<StandaloneStatus>, ReadError> {
        let statuses = self
            .endpoints
            .read("statuses", |rpc| rpc.statuses(signatures))
            .await
            .map_err(read_error)?;
        self.landed_among(signatures, statuses, attempt, payout).await
    }

    /// `landed`, as a node that has reached `slot` (the one a proof is judged at) answers it: a
    /// node behind it is unknown, never "not found".
    pub(super) async fn landed_as_of(
        &self,
        rpc: &SolanaRpc,
        signatures: &[Signature],
        slot: u64,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<Option<StandaloneStatus>, ReadError> {
        let statuses = rpc.statuses_as_of(signatures, slot).await.map_err(read_error)?;
        self.landed_among(signatures, statuses, attempt, payout).await
    }

    /// What the first of `signatures` with a status in `statuses` says.
    async fn landed_among(
        &self,
        signatures: &[Signature],
        statuses: Vec<Option<TransactionStatus>>,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<Option<StandaloneStatus>, ReadError> {
        let Some((signature, status)) =
            signatures.iter().zip(statuses).find_map(|(sig, s)| s.map(|s| (sig, s)))
        else {
            return Ok(None);
        };
        let reference = TxRef::parse(&signature.to_string())
            .map_err(|_| ReadError("a signature that is not a reference".into()))?;
        if !self.paid_at.reached(status.confirmation_status.as_ref()) {
            return Ok(Some(StandaloneStatus::Landed {
                reference,
                final_: false,
                transfer_matches: status.err.is_none(),
                moved: payout.amount,
                fee_paid: Amount::ZERO,
            }));
        }
        // A failure proves nothing moved only where no fork can take it back (a cluster paid at
        // `confirmed` still waits for `finalized` before a person may release the hold on it).
        let failed_final = status.err.is_some()
            && status.confirmation_status == Some(TransactionConfirmationStatus::Finalized);
        if status.err.is_some() && !failed_final {
            return Ok(Some(StandaloneStatus::Landed {
                reference,
                final_: false,
                transfer_matches: false,
                moved: payout.amount,
                fee_paid: Amount::ZERO,
            }));
        }
        let effect = self.landed_effect(signature, attempt, payout).await?;
        let fee_paid = u128::try_from(effect.fee_paid).map_err(|_| {
            ReadError(format!("transaction {signature}: the hot wallet gained lamports"))
        })?;
        let fee_paid = Amount::from_u128(fee_paid);
        if let (true, Some(err)) = (failed_final, &status.err) {
            // A Solana transaction is atomic: one that failed changed nothing but its fee payer's balance.
            return Ok(Some(StandaloneStatus::Reverted {
                reference,
                detail: format!("{err:?}"),
                fee_paid,
            }));
        }
        Ok(Some(StandaloneStatus::Landed {
            reference,
            final_: true,
            transfer_matches: effect.transfer_matches,
            moved: effect.moved,
            fee_paid,
        }))
    }
}

/// The lamports `payer` lost in the transaction (negative if it gained).
pub(super) fn lamports_spent(
    meta: &UiTransactionStatusMeta,
    keys: &[Pubkey],
    payer: &Pubkey,
) -> Option<i128> {
    let index = keys.iter().position(|k| k == payer)?;
    Some(i128::from(*meta.pre_balances.get(index)?) - i128::from(*meta.post_balances.get(index)?))
}

fn sol_received(
    meta: &UiTransactionStatusMeta,
    keys: &[Pubkey],
    destination: &Pubkey,
) -> Option<i128> {
    let index = keys.iter().position(|k| k == destination)?;
    Some(i128::from(*meta.post_balances.get(index)?) - i128::from(*meta.pre_balances.get(index)?))
}

fn spl_received(meta: &UiTransactionStatusMeta, owner: &Pubkey, mint: &Pubkey) -> Option<i128> {
    let (owner, mint) = (owner.to_string(), mint.to_string());
    let amount_of = |balances: &OptionSerializer<
        Vec<solana_transaction_status_client_types::UiTransactionTokenBalance>,
    >|
     -> Option<i128> {
        let OptionSerializer::Some(list) = balances else { return Some(0) };
        let entry = list.iter().find(|b| {
            b.mint == mint && matches!(&b.owner, OptionSerializer::Some(o) if *o == owner)
        });
        match entry {
            Some(b) => b.ui_token_amount.amount.parse().ok(),
            None => Some(0), // the account did not exist before (created by this transaction)
        }
    };
    Some(amount_of(&meta.post_token_balances)? - amount_of(&meta.pre_token_balances)?)
}
