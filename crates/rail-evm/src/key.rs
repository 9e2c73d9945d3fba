//! The hot wallet's signing key: a secp256k1 private key whose Debug shows only its address.

use std::fmt;

use alloy::signers::local::PrivateKeySigner;
use payoutd_domain::EvmAddress;

/// Hex digits in a secp256k1 private key (32 bytes).
pub const PRIVATE_KEY_HEX_LEN: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    // Neither message echoes the input: the input is the secret.
    #[error("signing key must be 64 hex digits, optionally prefixed with 0x")]
    Format,
    #[error("signing key is not a valid secp256k1 private key (zero or not below the curve order)")]
    OutOfRange,
}

/// A private key that signs EVM transactions offline.
///
/// Neither `Debug` nor any error built from it prints the key; there is no `Display`.
/// The underlying k256 key zeroizes its memory when dropped.
#[derive(Clone)]
pub struct SigningKey {
    signer: PrivateKeySigner,
}

impl SigningKey {
    /// Parses `0x` + 64 hex digits (the prefix is optional).
    pub fn from_hex(text: &str) -> Result<SigningKey, KeyError> {
        let digits = text.strip_prefix("0x").unwrap_or(text);
        if digits.len() != PRIVATE_KEY_HEX_LEN || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(KeyError::Format);
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(digits, &mut bytes).map_err(|_| KeyError::Format)?;
        let parsed = PrivateKeySigner::from_slice(&bytes).map_err(|_| KeyError::OutOfRange);
        // The stack copy would otherwise outlive the call; the signer keeps its own zeroizing copy.
        bytes.fill(0);
        Ok(SigningKey { signer: parsed? })
    }

    pub fn address(&self) -> EvmAddress {
        EvmAddress::from_bytes(self.signer.address().into_array())
    }

    pub(crate) fn signer(&self) -> &PrivateKeySigner {
        &self.signer
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.address().to_checksum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

    #[test]
    fn derives_the_well_known_anvil_address() {
        let key = SigningKey::from_hex(KEY).unwrap();
        assert_eq!(key.address().to_checksum(), "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
        let without_prefix = SigningKey::from_hex(&KEY[2..]).unwrap();
        assert_eq!(without_prefix.address(), key.address());
    }

    #[test]
    fn debug_shows_the_address_and_never_the_key() {
        let key = SigningKey::from_hex(KEY).unwrap();
        let debug = format!("{key:?}");
        assert_eq!(debug, "SigningKey(0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266)");
        assert!(!debug.to_lowercase().contains(&KEY[2..10]));
    }

    #[test]
    fn rejects_malformed_and_out_of_range_keys() {
        assert_eq!(SigningKey::from_hex("0x1234").unwrap_err(), KeyError::Format);
        assert_eq!(
            SigningKey::from_hex(&format!("0x{}", "zz".repeat(32))).unwrap_err(),
            KeyError::Format
        );
        assert_eq!(
            SigningKey::from_hex(&format!("0x{}", "00".repeat(32))).unwrap_err(),
            KeyError::OutOfRange
        );
        assert_eq!(
            SigningKey::from_hex(&format!("0x{}", "ff".repeat(32))).unwrap_err(),
            KeyError::OutOfRange
        );
        let err = SigningKey::from_hex(&KEY[..60]).unwrap_err();
        assert!(!format!("{err} {err:?}").contains(&KEY[2..10]));
    }
}
