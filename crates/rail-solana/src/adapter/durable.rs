//! Durable nonce mode: payouts signed against the hot wallet's nonce account, one live transaction per nonce value, dead once the nonce moved and a later look still finds none of their signatures.

use payoutd_domain::{AssetCode, Attempt, Payout, SolanaExpiry};
use payoutd_engine::rail::{PrepareError, ReadError, StandaloneStatus};
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;

use super::{NONCE_MOVED_SEEN_MAX, SolanaRail, read_error};
use crate::tx::{DurableNonce, SignedTransfer, Transfer, decode, sign_transfer_durable};

impl SolanaRail {
    pub(super) fn durable_account_for(&self, asset: &AssetCode) -> Option<Pubkey> {
        self.durable.as_ref().filter(|d| d.assets.contains(asset)).map(|d| d.account)
    }

    /// Signs against the nonce account's current value, unless this process's last transaction
    /// against that same value may still land (then it waits: the two could not both land, and
    /// the later would only die).
    pub(super) async fn sign_durable(&self, transfer: &Transfer, account: Pubkey) -> Result<(SignedTransfer, SolanaExpiry), PrepareError> {
        let value = self.rpc.nonce_value(&account, CommitmentConfig::confirmed()).await.map_err(|e| PrepareError::Unavailable(read_error(e)))?;
        let mut signed_at = self.durable_signed_at.lock().expect("durable nonce lock");
        if *signed_at == Some(value) {
            return Err(PrepareError::Unavailable(ReadError(format!("nonce account {account} still holds the value of a live transaction"))));
        }
        let nonce = DurableNonce { account, value };
        let signed = sign_transfer_durable(&self.key, transfer, &nonce).map_err(|e| PrepareError::Refused(e.to_string()))?;
        *signed_at = Some(value);
        Ok((signed, SolanaExpiry::DurableNonce { account: account.to_string() }))
    }

    /// The nonce value the attempt's transactions were signed against: their blockhash.
    pub(super) fn durable_nonce_of(attempt: &Attempt, account: &str) -> Result<DurableNonce, ReadError> {
        let account = account.parse::<Pubkey>().map_err(|e| ReadError(format!("stored nonce account {account}: {e}")))?;
        let first = attempt.txs.first().ok_or_else(|| ReadError(format!("attempt {} has no transaction", attempt.id)))?;
        let value = decode(&first.raw).map_err(|e| ReadError(e.to_string()))?.message.recent_blockhash;
        Ok(DurableNonce { account, value })
    }

    /// Dead only once the nonce, read at `finalized`, holds another value and a status check after
    /// that finds none of the attempt's signatures: no fork can then bring them back.
    pub(super) async fn durable_status(&self, signatures: &[Signature], account: &str, attempt: &Attempt, payout: &Payout) -> Result<StandaloneStatus, ReadError> {
        if let Some(landed) = self.landed(signatures, attempt, payout).await? {
            return Ok(landed);
        }
        let nonce = Self::durable_nonce_of(attempt, account)?;
        let now = self.rpc.nonce_value(&nonce.account, CommitmentConfig::finalized()).await.map_err(read_error)?;
        if now == nonce.value {
            return Ok(StandaloneStatus::Pending);
        }
        let first_seen = self.nonce_moved_seen.lock().expect("nonce lock").get(&attempt.id).copied();
        let Some(seen_at) = first_seen else {
            let height = self.rpc.block_height(CommitmentConfig::processed()).await.map_err(read_error)?;
            let mut seen = self.nonce_moved_seen.lock().expect("nonce lock");
            if seen.len() >= NONCE_MOVED_SEEN_MAX {
                seen.clear();
            }
            seen.insert(attempt.id.clone(), height);
            return Ok(StandaloneStatus::Pending);
        };
        let finalized = self.rpc.block_height(CommitmentConfig::finalized()).await.map_err(read_error)?;
        if finalized <= seen_at {
            return Ok(StandaloneStatus::Pending);
        }
        if let Some(landed) = self.landed(signatures, attempt, payout).await? {
            self.nonce_moved_seen.lock().expect("nonce lock").remove(&attempt.id);
            return Ok(landed);
        }
        self.nonce_moved_seen.lock().expect("nonce lock").remove(&attempt.id);
        Ok(StandaloneStatus::Dead {
            proof: format!(
                "nonce account {} moved from {} to {} at finalized (first seen at block height {seen_at}, finalized height now {finalized}); \
                 a status check after it found none of [{}]",
                nonce.account,
                nonce.value,
                now,
                signatures.iter().map(Signature::to_string).collect::<Vec<_>>().join(", ")
            ),
            cancel_fee_paid: self.cancel_fee_paid(attempt).await?,
        })
    }
}
