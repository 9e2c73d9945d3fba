//! The hot wallet's signing key: a secret whose Debug and Display print nothing.

use std::fmt;

use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Keypair;
use solana_sdk::signer::Signer;

/// A Solana keypair is 64 bytes: the 32-byte secret seed then the 32-byte public key.
pub const KEYPAIR_BYTES_LEN: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error(
        "a Solana key must be base58 of 64 bytes (secret then public key) or a JSON array of 64 numbers"
    )]
    Format,
    #[error("the key's public half does not match its secret half")]
    Mismatch,
}

/// The hot wallet's keypair. Never printed, never serialized.
pub struct SolanaKey(Keypair);

impl SolanaKey {
    /// Parses the two forms Solana tools write: base58 of the 64 bytes (wallets' export) or the
    /// JSON array of `solana-keygen` files.
    pub fn parse(text: &str) -> Result<SolanaKey, KeyError> {
        let text = text.trim();
        let bytes = if text.starts_with('[') {
            parse_json_bytes(text)?
        } else {
            bs58::decode(text).into_vec().map_err(|_| KeyError::Format)?
        };
        SolanaKey::from_bytes(&bytes)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<SolanaKey, KeyError> {
        if bytes.len() != KEYPAIR_BYTES_LEN {
            return Err(KeyError::Format);
        }
        let keypair = Keypair::try_from(bytes).map_err(|_| KeyError::Mismatch)?;
        Ok(SolanaKey(keypair))
    }

    /// A fresh random key (tests and the demo).
    pub fn generate() -> SolanaKey {
        SolanaKey(Keypair::new())
    }

    pub fn pubkey(&self) -> Pubkey {
        self.0.pubkey()
    }

    /// The 64 bytes in base58, the form `parse` reads; for the demo's generated keys.
    pub fn to_base58_secret(&self) -> String {
        self.0.to_base58_string()
    }

    /// The ed25519 signature of `message` (what a transaction's fee payer signs: its message).
    pub fn sign_message(&self, message: &[u8]) -> solana_sdk::signature::Signature {
        self.0.sign_message(message)
    }

    pub(crate) fn keypair(&self) -> &Keypair {
        &self.0
    }
}

fn parse_json_bytes(text: &str) -> Result<Vec<u8>, KeyError> {
    let inner = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).ok_or(KeyError::Format)?;
    inner.split(',').map(|n| n.trim().parse::<u8>().map_err(|_| KeyError::Format)).collect()
}

impl Clone for SolanaKey {
    fn clone(&self) -> SolanaKey {
        // One process holds copies of its own key (one per rail it builds), as with EVM keys.
        SolanaKey(self.0.insecure_clone())
    }
}

impl fmt::Debug for SolanaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SolanaKey(<secret>)")
    }
}

impl fmt::Display for SolanaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_parse_to_the_same_key_and_nothing_prints_the_secret() {
        let key = SolanaKey::generate();
        let b58 = key.to_base58_secret();
        let json = format!(
            "[{}]",
            bs58::decode(&b58)
                .into_vec()
                .unwrap()
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(SolanaKey::parse(&b58).unwrap().pubkey(), key.pubkey());
        assert_eq!(SolanaKey::parse(&json).unwrap().pubkey(), key.pubkey());
        assert!(!format!("{key:?}{key}").contains(&b58[..12]));
        assert_eq!(SolanaKey::parse("abc").unwrap_err(), KeyError::Format);
        assert_eq!(SolanaKey::parse("[1,2,300]").unwrap_err(), KeyError::Format);
    }
}
