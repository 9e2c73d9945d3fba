//! Durable nonce mode: payouts signed against the hot wallet's nonce account, one attempt per nonce value (the store refuses a second), dead once a move of the nonce, seen twice a finalization apart, is still unexplained by any of their signatures.

use payoutd_domain::{AssetCode, Attempt, AttemptId, Payout, SolanaExpiry};
use payoutd_engine::standalone::{PrepareError, StandaloneStatus};
use payoutd_engine::rail::ReadError;
use solana_commitment_config::CommitmentConfig;
use solana_sdk::hash::Hash;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;

use super::{NONCE_MOVED_SEEN_MAX, SolanaRail, read_error};
use crate::tx::{DurableNonce, SignedTransfer, Transfer, decode, durable_transfer_instructions};

/// A nonce account seen at `finalized` holding another value than the attempt's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sighting {
    pub value: Hash,
    /// The block height (processed) when it was first seen.
    pub at_block_height: u64,
}

/// What one look at the finalized nonce value means, given the sighting remembered before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NonceLook {
    /// The account holds the attempt's value: the transaction can still land; any sighting
    /// (of a value that was behind) is forgotten.
    Live,
    /// Another value, not the one seen before (or none was): remember it and wait. A finalized
    /// value may be *behind* the signed one, so only a value seen again once finalization has
    /// passed its first sighting is a move.
    Sight,
    /// The value seen before, still there: a move once the finalized height passes the sighting.
    Seen(Sighting),
}

pub(super) fn look(signed: Hash, finalized_now: Hash, before: Option<Sighting>) -> NonceLook {
    match before {
        _ if finalized_now == signed => NonceLook::Live,
        Some(sighting) if sighting.value == finalized_now => NonceLook::Seen(sighting),
        _ => NonceLook::Sight,
    }
}

impl SolanaRail {
    pub(super) fn durable_account_for(&self, asset: &AssetCode) -> Option<Pubkey> {
        self.durable.as_ref().filter(|d| d.assets.contains(asset)).map(|d| d.account)
    }

    /// Signs against the nonce account's current value. The slot names the value: the store
    /// holds one attempt per value, so another worker's attempt (or this one's, still live) on it
    /// makes this one be discarded unsent rather than die beside it.
    pub(super) async fn sign_durable(&self, transfer: &Transfer, account: Pubkey) -> Result<(SignedTransfer, SolanaExpiry), PrepareError> {
        // Read before the value: nothing signed now can land below this height.
        let height = self.rpc.block_height(CommitmentConfig::processed()).await.map_err(|e| PrepareError::Unavailable(read_error(e)))?;
        let value = self.rpc.nonce_value(&account, CommitmentConfig::confirmed()).await.map_err(|e| PrepareError::Unavailable(read_error(e)))?;
        let nonce = DurableNonce { account, value };
        let instructions = durable_transfer_instructions(&self.signer.pubkey(), transfer, &nonce).map_err(|e| PrepareError::Refused(e.to_string()))?;
        let signed = self.sign(&instructions, nonce.value).await?;
        Ok((signed, SolanaExpiry::DurableNonce { account: account.to_string(), value: value.to_string(), signed_at_block_height: height }))
    }

    /// The nonce value the attempt's transactions were signed against: their blockhash (the
    /// bytes are the truth; the slot's copy, when stored, must agree).
    pub(super) fn durable_nonce_of(attempt: &Attempt, account: &str, stored_value: &str) -> Result<DurableNonce, ReadError> {
        let account = account.parse::<Pubkey>().map_err(|e| ReadError(format!("stored nonce account {account}: {e}")))?;
        let first = attempt.txs.first().ok_or_else(|| ReadError(format!("attempt {} has no transaction", attempt.id)))?;
        let value = decode(&first.raw).map_err(|e| ReadError(e.to_string()))?.message.recent_blockhash;
        assert!(stored_value.is_empty() || stored_value == value.to_string(), "attempt {}: its slot names nonce value {stored_value}, its bytes {value}", attempt.id);
        Ok(DurableNonce { account, value })
    }

    /// Dead only once the nonce, read at `finalized`, holds another value, the same value was
    /// seen before the finalized height passed that first sighting, and a status check after it
    /// finds none of the attempt's signatures in a history that reaches back to the signing.
    pub(super) async fn durable_status(&self, signatures: &[Signature], attempt: &Attempt, payout: &Payout) -> Result<StandaloneStatus, ReadError> {
        let Some(SolanaExpiry::DurableNonce { account, value, signed_at_block_height }) = attempt.slot.solana_expiry() else {
            return Err(ReadError(format!("attempt {} is not a durable nonce attempt", attempt.id)));
        };
        if let Some(landed) = self.landed(signatures, attempt, payout).await? {
            self.forget_sighting(&attempt.id);
            return Ok(landed);
        }
        let nonce = Self::durable_nonce_of(attempt, account, value)?;
        let now = self.rpc.nonce_value(&nonce.account, CommitmentConfig::finalized()).await.map_err(read_error)?;
        let seen = match look(nonce.value, now, self.sighting_of(&attempt.id)) {
            NonceLook::Live => {
                self.forget_sighting(&attempt.id);
                return Ok(StandaloneStatus::Pending);
            }
            NonceLook::Sight => {
                let at_block_height = self.rpc.block_height(CommitmentConfig::processed()).await.map_err(read_error)?;
                self.remember_sighting(&attempt.id, Sighting { value: now, at_block_height });
                return Ok(StandaloneStatus::Pending);
            }
            NonceLook::Seen(seen) => seen,
        };
        let finalized = self.rpc.block_height(CommitmentConfig::finalized()).await.map_err(read_error)?;
        if finalized <= seen.at_block_height {
            return Ok(StandaloneStatus::Pending);
        }
        self.history_reaches(*signed_at_block_height, attempt).await?;
        if let Some(landed) = self.landed(signatures, attempt, payout).await? {
            self.forget_sighting(&attempt.id);
            return Ok(landed);
        }
        self.forget_sighting(&attempt.id);
        Ok(StandaloneStatus::Dead {
            proof: format!(
                "nonce account {} moved from {} to {} at finalized (first seen at block height {}, finalized height now {finalized}); \
                 a status check after it found none of [{}]",
                nonce.account,
                nonce.value,
                now,
                seen.at_block_height,
                signatures.iter().map(Signature::to_string).collect::<Vec<_>>().join(", ")
            ),
            cancel_fee_paid: self.cancel_fee_paid(attempt).await?,
        })
    }

    fn sighting_of(&self, attempt: &AttemptId) -> Option<Sighting> {
        self.nonce_moved_seen.lock().expect("nonce lock").get(attempt).copied()
    }

    fn remember_sighting(&self, attempt: &AttemptId, sighting: Sighting) {
        let mut seen = self.nonce_moved_seen.lock().expect("nonce lock");
        if seen.len() >= NONCE_MOVED_SEEN_MAX {
            seen.clear(); // only delays deaths
        }
        seen.insert(attempt.clone(), sighting);
    }

    fn forget_sighting(&self, attempt: &AttemptId) {
        self.nonce_moved_seen.lock().expect("nonce lock").remove(attempt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(byte: u8) -> Hash {
        Hash::new_from_array([byte; 32])
    }

    #[test]
    fn a_value_behind_the_signed_one_is_only_a_sighting_and_is_forgotten_once_caught_up() {
        let (behind, signed, moved) = (hash(1), hash(2), hash(3));
        assert_eq!(look(signed, behind, None), NonceLook::Sight);
        let sighting = Sighting { value: behind, at_block_height: 10 };
        assert_eq!(look(signed, signed, Some(sighting)), NonceLook::Live, "caught up: the sighting goes");
        // A later real move is a new sighting, not a move seen before.
        assert_eq!(look(signed, moved, Some(sighting)), NonceLook::Sight);
        let sighting = Sighting { value: moved, at_block_height: 20 };
        assert_eq!(look(signed, moved, Some(sighting)), NonceLook::Seen(sighting));
    }
}
