//! What every transaction payoutd signs says it pays: a keyed hash of the business event (the merchant and its idempotency key), so a transaction found on chain links back to its payout, a payout re-created after its creation was lost included, and nothing about the merchant is readable there.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroize;

use crate::ids::MerchantId;
use crate::keys::PayoutKey;

/// A reference's length on chain: 128 bits, enough that two business events never share one, and
/// 16 bytes of calldata (256 gas at most) on EVM.
pub const CHAIN_REFERENCE_BYTES: usize = 16;
/// The deployment's reference key: 256 bits, made once per database and kept in it.
pub const REFERENCE_KEY_BYTES: usize = 32;
/// Separates this use of the key from any later one.
const DOMAIN: &[u8] = b"payoutd chain reference v1";

/// The key references are made with; its Debug prints nothing, and it is wiped when dropped.
#[derive(Clone)]
pub struct ReferenceKey([u8; REFERENCE_KEY_BYTES]);

impl ReferenceKey {
    pub fn from_bytes(bytes: [u8; REFERENCE_KEY_BYTES]) -> ReferenceKey {
        ReferenceKey(bytes)
    }

    /// The key as stored (hex), or `None` when it is not 32 bytes of hex.
    pub fn parse_hex(text: &str) -> Option<ReferenceKey> {
        let bytes = hex::decode(text.trim()).ok()?;
        Some(ReferenceKey(bytes.try_into().ok()?))
    }
}

impl Drop for ReferenceKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for ReferenceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReferenceKey(..)")
    }
}

/// A business event's reference as transactions carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChainReference([u8; CHAIN_REFERENCE_BYTES]);

impl ChainReference {
    /// The reference of `merchant`'s business event `key`: HMAC-SHA256 under the deployment's key,
    /// truncated. The same event gets the same reference in any payout made for it.
    pub fn of(
        reference_key: &ReferenceKey,
        merchant: &MerchantId,
        key: &PayoutKey,
    ) -> ChainReference {
        let mut mac = Hmac::<Sha256>::new_from_slice(&reference_key.0)
            .expect("HMAC takes a key of any length");
        for part in [DOMAIN, merchant.as_str().as_bytes(), key.as_str().as_bytes()] {
            // Each part's length first, so no two events' parts run together into one input.
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        let digest = mac.finalize().into_bytes();
        let mut reference = [0u8; CHAIN_REFERENCE_BYTES];
        reference.copy_from_slice(&digest[..CHAIN_REFERENCE_BYTES]);
        ChainReference(reference)
    }

    /// The reference at the end of `bytes` (a transaction's data), if they are long enough.
    pub fn at_end_of(bytes: &[u8]) -> Option<ChainReference> {
        let start = bytes.len().checked_sub(CHAIN_REFERENCE_BYTES)?;
        Some(ChainReference(bytes[start..].try_into().ok()?))
    }

    /// The reference as `Display` writes it (32 lowercase hex digits), as a memo carries it.
    pub fn parse_hex(text: &str) -> Option<ChainReference> {
        if text.len() != 2 * CHAIN_REFERENCE_BYTES || text.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        Some(ChainReference(hex::decode(text).ok()?.try_into().ok()?))
    }

    pub fn as_bytes(&self) -> &[u8; CHAIN_REFERENCE_BYTES] {
        &self.0
    }
}

impl fmt::Display for ChainReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> ReferenceKey {
        ReferenceKey::from_bytes([byte; REFERENCE_KEY_BYTES])
    }

    #[test]
    fn one_event_one_reference_and_nothing_readable() {
        let merchant = MerchantId::parse("mer_0192f00000000000000000000000000a").unwrap();
        let other = MerchantId::parse("mer_0192f00000000000000000000000000b").unwrap();
        let event = PayoutKey::parse("withdrawal-8812").unwrap();
        let reference = ChainReference::of(&key(1), &merchant, &event);
        assert_eq!(reference, ChainReference::of(&key(1), &merchant, &event), "stable");
        assert_ne!(reference, ChainReference::of(&key(2), &merchant, &event), "keyed");
        assert_ne!(reference, ChainReference::of(&key(1), &other, &event), "per merchant");
        let next = PayoutKey::parse("withdrawal-8813").unwrap();
        assert_ne!(reference, ChainReference::of(&key(1), &merchant, &next), "per event");
        let shown = reference.to_string();
        assert_eq!(shown.len(), 2 * CHAIN_REFERENCE_BYTES);
        assert_eq!(ChainReference::parse_hex(&shown), Some(reference), "read back from a memo");
        assert_eq!(ChainReference::parse_hex(&shown.to_uppercase()), None);
        assert_eq!(ChainReference::parse_hex(&shown[1..]), None);
        assert!(!shown.contains("8812") && format!("{:?}", key(1)) == "ReferenceKey(..)");
        let calldata = [&[0xa9u8, 0x05, 0x9c, 0xbb][..], reference.as_bytes()].concat();
        assert_eq!(ChainReference::at_end_of(&calldata), Some(reference));
        assert_eq!(ChainReference::at_end_of(&[1, 2, 3]), None);
    }
}
