//! Internal transfers: one merchant's available balance to another's, keyed like payouts so a retry moves nothing twice.

use sha2::{Digest, Sha256};

use crate::asset::AssetCode;
use crate::ids::{MerchantId, TransferId};
use crate::keys::TransferKey;
use crate::money::Amount;
use crate::payout::Fingerprint;

/// A transfer request that passed every check at the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferRequest {
    pub key: TransferKey,
    pub destination: MerchantId,
    pub asset: AssetCode,
    pub amount: Amount,
}

impl TransferRequest {
    pub fn new(
        key: TransferKey,
        destination: MerchantId,
        asset: AssetCode,
        amount: Amount,
    ) -> TransferRequest {
        assert!(!amount.is_zero(), "transfer amounts are positive by construction");
        TransferRequest { key, destination, asset, amount }
    }

    /// What a replay must repeat exactly for the key to mean the same transfer.
    pub fn fingerprint(&self) -> Fingerprint {
        let mut h = Sha256::new();
        for part in [
            "transfer.v1",
            self.destination.as_str(),
            self.asset.as_str(),
            &self.amount.to_string(),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        Fingerprint::from_stored(hex::encode(h.finalize()))
    }
}

/// A completed transfer: the debit and the credit committed together with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub id: TransferId,
    pub merchant_id: MerchantId,
    pub key: TransferKey,
    pub fingerprint: Fingerprint,
    pub destination: MerchantId,
    pub asset: AssetCode,
    pub amount: Amount,
    pub created_at_ms: i64,
}

impl Transfer {
    /// The idempotency key as `viewer` may see it: the sender's own, so the sender alone (the
    /// recipient learns nothing of how the sender names its business events).
    pub fn key_seen_by(&self, viewer: &MerchantId) -> Option<&str> {
        (viewer == &self.merchant_id).then(|| self.key.as_str())
    }

    /// The entity the destination's `transfer.completed` is about: one event type per entity id
    /// (SPEC 6), and the source and the destination each get their own.
    pub fn credit_entity_id(&self) -> String {
        format!("{}/credit", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_covers_every_parameter() {
        let to = MerchantId::new();
        let usdc = AssetCode::parse("evm:1/USDC").unwrap().0;
        let base = TransferRequest::new(
            TransferKey::parse("k").unwrap(),
            to.clone(),
            usdc.clone(),
            Amount::from_u128(5),
        );
        let again = TransferRequest::new(
            TransferKey::parse("other").unwrap(),
            to.clone(),
            usdc.clone(),
            Amount::from_u128(5),
        );
        assert_eq!(base.fingerprint(), again.fingerprint(), "the key is not a parameter");
        let more = TransferRequest { amount: Amount::from_u128(6), ..base.clone() };
        let elsewhere = TransferRequest { destination: MerchantId::new(), ..base.clone() };
        assert_ne!(base.fingerprint(), more.fingerprint());
        assert_ne!(base.fingerprint(), elsewhere.fingerprint());
    }
}
