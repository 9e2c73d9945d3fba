//! The idempotency key and our reference of an attempt: derived, never random, so a restart sends the same ones.

use payoutd_domain::{MerchantId, PayoutId, PayoutKey};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Separates this derivation from any other use of the same inputs.
const KEY_DOMAIN: &[u8] = b"payoutd provider idempotency key v1";
const ACTION_DOMAIN: &[u8] = b"payoutd provider action key v1";

/// The provider idempotency key of attempt `attempt_no` of the merchant's payout `payout_key`: a
/// UUID in version 4 form (what Circle and Coinbase require), from SHA-256 of the three, so the
/// same attempt always sends the same key and two attempts never share one.
pub fn idempotency_key(merchant: &MerchantId, payout_key: &PayoutKey, attempt_no: u32) -> Uuid {
    let mut hash = Sha256::new();
    for part in [
        KEY_DOMAIN,
        merchant.as_str().as_bytes(),
        payout_key.as_str().as_bytes(),
        &attempt_no.to_be_bytes(),
    ] {
        // Length-prefixed: ("ab", "c") and ("a", "bc") never meet.
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    let digest = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// The idempotency key of `action` (`accelerate`, `cancel`) on the transfer an attempt with
/// `attempt_key` made: a UUID in version 4 form derived from the two, so every worker and every
/// retry asks the provider the same, and stores nothing more.
pub fn action_key(attempt_key: &str, action: &str) -> Uuid {
    let mut hash = Sha256::new();
    for part in [ACTION_DOMAIN, attempt_key.as_bytes(), action.as_bytes()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    let digest = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// Our reference of an attempt, set on every request (`transfer_group`, `refId`,
/// `client_reference_id`, metadata) so the transfer can be found by it: `<payout id>-<attempt no>`.
pub fn our_reference(payout: &PayoutId, attempt_no: u32) -> String {
    format!("{payout}-{attempt_no}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_v4_uuids_distinct_per_attempt_and_payout() {
        let merchant = MerchantId::new();
        let key = PayoutKey::parse("order-0001").unwrap();
        let first = idempotency_key(&merchant, &key, 1);
        assert_eq!(first, idempotency_key(&merchant, &key, 1), "derived, not random");
        assert_eq!(first.get_version_num(), 4);
        assert_eq!(first.get_variant(), uuid::Variant::RFC4122);
        assert_ne!(first, idempotency_key(&merchant, &key, 2));
        assert_ne!(first, idempotency_key(&merchant, &PayoutKey::parse("order-0002").unwrap(), 1));
    }
}
