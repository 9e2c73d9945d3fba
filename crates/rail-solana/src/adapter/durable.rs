//! Durable nonce mode: payouts signed against the hot wallet's nonce account, one attempt per nonce value (the store refuses a second), dead once a move of the nonce, seen twice a finalization apart, is still unexplained by any of their signatures.

use payoutd_domain::{AssetCode, Attempt, Payout, SolanaExpiry};
use payoutd_engine::rail::ReadError;
use payoutd_engine::standalone::{PrepareError, StandaloneStatus};
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;

use payoutd_engine::standalone::finality::{FinalizedLook, Sighting, look};

use super::{SolanaRail, read_error};
use crate::tx::{DurableNonce, SignedTransfer, Transfer, decode, durable_transfer_instructions};

impl SolanaRail {
    pub(super) fn durable_account_for(&self, asset: &AssetCode) -> Option<Pubkey> {
        self.durable.as_ref().filter(|d| d.assets.contains(asset)).map(|d| d.account)
    }

    /// Signs against the nonce account's current value. The slot names the value: the store
    /// holds one attempt per value, so another worker's attempt (or this one's, still live) on it
    /// makes this one be discarded unsent rather than die beside it.
    pub(super) async fn sign_durable(
        &self,
        transfer: &Transfer,
        account: Pubkey,
    ) -> Result<(SignedTransfer, SolanaExpiry), PrepareError> {
        // Read before the value: nothing signed now can land below this height.
        let height = self
            .endpoints
            .read("block_height", |rpc| rpc.block_height(CommitmentConfig::processed()))
            .await
            .map_err(|e| PrepareError::Unavailable(read_error(e)))?;
        let value = self
            .endpoints
            .read("nonce_value", |rpc| rpc.nonce_value(&account, CommitmentConfig::confirmed()))
            .await
            .map_err(|e| PrepareError::Unavailable(read_error(e)))?;
        let nonce = DurableNonce { account, value };
        let instructions = durable_transfer_instructions(&self.signer.pubkey(), transfer, &nonce)
            .map_err(|e| PrepareError::Refused(e.to_string()))?;
        let signed = self.sign(&instructions, nonce.value).await?;
        Ok((
            signed,
            SolanaExpiry::DurableNonce {
                account: account.to_string(),
                value: value.to_string(),
                signed_at_block_height: height,
            },
        ))
    }

    /// The nonce value the attempt's transactions were signed against: their blockhash (the
    /// bytes are the truth; the slot's copy, when stored, must agree).
    pub(super) fn durable_nonce_of(
        attempt: &Attempt,
        account: &str,
        stored_value: &str,
    ) -> Result<DurableNonce, ReadError> {
        let account = account
            .parse::<Pubkey>()
            .map_err(|e| ReadError(format!("stored nonce account {account}: {e}")))?;
        let first = attempt
            .txs
            .first()
            .ok_or_else(|| ReadError(format!("attempt {} has no transaction", attempt.id)))?;
        let value =
            decode(&first.raw).map_err(|e| ReadError(e.to_string()))?.message.recent_blockhash;
        assert!(
            stored_value.is_empty() || stored_value == value.to_string(),
            "attempt {}: its slot names nonce value {stored_value}, its bytes {value}",
            attempt.id
        );
        Ok(DurableNonce { account, value })
    }

    /// Dead only once the nonce, read at `finalized`, holds another value, the same value was
    /// seen before the finalized height passed that first sighting, and a status check after it
    /// finds none of the attempt's signatures in a history that reaches back to the signing.
    pub(super) async fn durable_status(
        &self,
        signatures: &[Signature],
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let Some(SolanaExpiry::DurableNonce { account, value, signed_at_block_height }) =
            attempt.slot.solana_expiry()
        else {
            return Err(ReadError(format!(
                "attempt {} is not a durable nonce attempt",
                attempt.id
            )));
        };
        if let Some(landed) = self.landed(signatures, attempt, payout).await? {
            self.nonce_moved_seen.forget(&attempt.id);
            return Ok(landed);
        }
        let nonce = Self::durable_nonce_of(attempt, account, value)?;
        let signed_at = *signed_at_block_height;
        // The proof from one endpoint, whole: another is asked only when this one cannot give it.
        self.endpoints
            .read("durable_proof", |rpc| {
                self.durable_proof(rpc, signatures, &nonce, signed_at, attempt, payout)
            })
            .await
    }

    /// `durable_status` once none of the signatures is known, every read from `rpc` but the
    /// sighting's height (the highest any endpoint reports: a later proof waits longer, never less).
    async fn durable_proof(
        &self,
        rpc: &crate::rpc::SolanaRpc,
        signatures: &[Signature],
        nonce: &DurableNonce,
        signed_at_block_height: u64,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let now = rpc
            .nonce_value(&nonce.account, CommitmentConfig::finalized())
            .await
            .map_err(read_error)?;
        let seen = match look(nonce.value, now, self.nonce_moved_seen.of(&attempt.id)) {
            FinalizedLook::Live => {
                self.nonce_moved_seen.forget(&attempt.id);
                return Ok(StandaloneStatus::Pending);
            }
            FinalizedLook::Sight => {
                let at_height = self.highest_processed_height().await?;
                self.nonce_moved_seen.remember(&attempt.id, Sighting { value: now, at_height });
                return Ok(StandaloneStatus::Pending);
            }
            FinalizedLook::Seen(seen) => seen,
        };
        let (slot, finalized) = rpc.finalized_slot_and_height().await.map_err(read_error)?;
        if finalized <= seen.at_height {
            return Ok(StandaloneStatus::Pending);
        }
        self.history_reaches(rpc, signed_at_block_height, attempt).await?;
        // Read by a node that has reached the finalized slot: a node behind it is unknown.
        if let Some(landed) = self.landed_as_of(rpc, signatures, slot, attempt, payout).await? {
            self.nonce_moved_seen.forget(&attempt.id);
            return Ok(landed);
        }
        self.nonce_moved_seen.forget(&attempt.id);
        Ok(StandaloneStatus::Dead {
            proof: format!(
                "nonce account {} moved from {} to {} at finalized (first seen at block height {}, finalized height now {finalized}); \
                 a status check after it found none of [{}]",
                nonce.account,
                nonce.value,
                now,
                seen.at_height,
                signatures.iter().map(Signature::to_string).collect::<Vec<_>>().join(", ")
            ),
            cancel_fee_paid: self.cancel_fee_paid(attempt).await?,
        })
    }
}

impl SolanaRail {
    /// The highest block height (processed) any endpoint reports, each one's lag to the metrics.
    async fn highest_processed_height(&self) -> Result<u64, ReadError> {
        let heights =
            self.endpoints.every(|rpc| rpc.block_height(CommitmentConfig::processed())).await;
        self.endpoints.highest_head("block_height", heights).map_err(read_error)
    }
}
