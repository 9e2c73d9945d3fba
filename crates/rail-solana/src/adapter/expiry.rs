//! A blockhash attempt's proof of expiry, read whole from one endpoint: the finalized height past its last valid height, a history reaching its blockhash, and no signature found by a node at the finalized slot.

use super::*;

impl SolanaRail {
    /// Whether a blockhash attempt none of whose signatures is known has expired, all read from
    /// `rpc`: expiry is decided at `finalized` (no fork can hold a block at or below that height).
    pub(super) async fn expiry_proof(
        &self,
        rpc: &SolanaRpc,
        signatures: &[Signature],
        last_valid: u64,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let (slot, height) = rpc.finalized_slot_and_height().await.map_err(read_error)?;
        if height <= last_valid {
            return Ok(StandaloneStatus::Pending);
        }
        // The height has passed: one more status check, made after it by a node that has reached
        // its slot, decides, in a history that reaches back to the blockhash (nothing signed with
        // it can have landed below it).
        let blockhash_height = last_valid.saturating_sub(BLOCKHASH_LIFETIME_BLOCKS);
        self.history_reaches(rpc, blockhash_height, attempt).await?;
        if let Some(landed) = self.landed_as_of(rpc, signatures, slot, attempt, payout).await? {
            return Ok(landed);
        }
        Ok(StandaloneStatus::Dead {
            proof: format!(
                "finalized block height {height} passed last valid block height {last_valid}; a status check after it found none of [{}]",
                signatures.iter().map(Signature::to_string).collect::<Vec<_>>().join(", ")
            ),
            cancel_fee_paid: Amount::ZERO,
        })
    }
}
