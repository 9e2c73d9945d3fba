//! Payout destinations, validated per rail: EVM (20 bytes, EIP-55 when mixed case) and Solana (base58, 32 bytes).

use std::fmt;

use sha3::{Digest, Keccak256};

use crate::asset::RailFamily;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("EVM address must be 0x followed by 40 hex digits")]
    EvmFormat,
    #[error("EVM address has mixed case but its EIP-55 checksum is wrong")]
    EvmChecksum,
    #[error("EVM address must not be the zero address")]
    EvmZero,
    #[error("Solana address must be base58 of 32 bytes")]
    SolanaFormat,
    #[error(
        "Solana address is a program's (System, SPL Token, Token-2022 or Associated Token Account), which cannot spend what it receives: pay the recipient's wallet address"
    )]
    SolanaProgram,
    #[error(
        "the destination is the token's own contract or mint, which cannot spend what it receives: pay the recipient's wallet address"
    )]
    TokenItself,
    #[error("this rail takes no on-chain destination address")]
    Unsupported,
    #[error(
        "provider account must be 3 to {PROVIDER_ACCOUNT_MAX_LEN} letters, digits, '_' or '-', with at least one '_' or '-' (acct_1Nv0FGQ9RKHgCVdK)"
    )]
    AccountFormat,
}

/// Longest provider account id taken (Stripe's `acct_` ids are 21 characters).
pub const PROVIDER_ACCOUNT_MAX_LEN: usize = 64;

/// An account at a payment provider that a provider rail pays into instead of an address on a chain
/// (a Stripe connected account `acct_...`). It always holds a '_' or '-', which neither a base58 key
/// nor a 0x address can, so a stored destination reads back as the kind it was.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProviderAccount {
    bytes: [u8; PROVIDER_ACCOUNT_MAX_LEN],
    len: u8,
}

impl ProviderAccount {
    pub fn parse(text: &str) -> Result<ProviderAccount, AddressError> {
        let ok_chars = text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        let marked = text.bytes().any(|b| b == b'_' || b == b'-');
        if !(3..=PROVIDER_ACCOUNT_MAX_LEN).contains(&text.len()) || !ok_chars || !marked {
            return Err(AddressError::AccountFormat);
        }
        let mut bytes = [0u8; PROVIDER_ACCOUNT_MAX_LEN];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Ok(ProviderAccount {
            bytes,
            len: u8::try_from(text.len()).expect("checked against the maximum"),
        })
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect("parsed from ASCII")
    }
}

impl fmt::Display for ProviderAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ProviderAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProviderAccount({})", self.as_str())
    }
}

/// What a provider asset's payouts are sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DestinationKind {
    Evm,
    Solana,
    Account,
}

impl DestinationKind {
    /// A new payout's destination of this kind: a Solana program's address is refused.
    pub fn parse_destination(self, text: &str) -> Result<Destination, AddressError> {
        match self.parse_stored(text)? {
            Destination::Solana(address) if address.is_program() => {
                Err(AddressError::SolanaProgram)
            }
            destination => Ok(destination),
        }
    }

    /// A destination of this kind as it was accepted, whatever rules came later.
    fn parse_stored(self, text: &str) -> Result<Destination, AddressError> {
        match self {
            DestinationKind::Evm => EvmAddress::parse(text).map(Destination::Evm),
            DestinationKind::Solana => SolanaAddress::parse(text).map(Destination::Solana),
            DestinationKind::Account => ProviderAccount::parse(text).map(Destination::Account),
        }
    }
}

/// A 20-byte EVM account address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EvmAddress([u8; 20]);

impl EvmAddress {
    /// Parses `0x` + 40 hex digits. All-lower or all-upper case is accepted as is;
    /// mixed case must carry a correct EIP-55 checksum (a typo check the sender asked for).
    pub fn parse(text: &str) -> Result<EvmAddress, AddressError> {
        let hex_part = text.strip_prefix("0x").ok_or(AddressError::EvmFormat)?;
        if hex_part.len() != 40 || !hex_part.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(AddressError::EvmFormat);
        }
        let mut bytes = [0u8; 20];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| AddressError::EvmFormat)?;
        let address = EvmAddress(bytes);
        let has_lower = hex_part.bytes().any(|b| b.is_ascii_lowercase());
        let has_upper = hex_part.bytes().any(|b| b.is_ascii_uppercase());
        if has_lower && has_upper && address.to_checksum()[2..] != *hex_part {
            return Err(AddressError::EvmChecksum);
        }
        if bytes == [0u8; 20] {
            return Err(AddressError::EvmZero);
        }
        Ok(address)
    }

    pub fn from_bytes(bytes: [u8; 20]) -> EvmAddress {
        EvmAddress(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// The EIP-55 mixed-case form.
    pub fn to_checksum(&self) -> String {
        let lower = hex::encode(self.0);
        let hash = Keccak256::digest(lower.as_bytes());
        let mut out = String::with_capacity(42);
        out.push_str("0x");
        for (i, c) in lower.chars().enumerate() {
            let nibble = (hash[i / 2] >> (if i % 2 == 0 { 4 } else { 0 })) & 0x0f;
            if c.is_ascii_alphabetic() && nibble >= 8 {
                out.push(c.to_ascii_uppercase());
            } else {
                out.push(c);
            }
        }
        out
    }
}

impl fmt::Display for EvmAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_checksum())
    }
}

impl fmt::Debug for EvmAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EvmAddress({})", self.to_checksum())
    }
}

/// A 32-byte Solana public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SolanaAddress([u8; 32]);

/// Programs every Solana payout touches or could be mistaken for, which no one can sign for: the
/// System program (the all-zero key), SPL Token, Token-2022 and the Associated Token Account program.
pub const SOLANA_PROGRAM_ADDRESSES: [&str; 4] = [
    "11111111111111111111111111111111",
    "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",
    "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb",
    "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL",
];

impl SolanaAddress {
    pub fn parse(text: &str) -> Result<SolanaAddress, AddressError> {
        if text.len() < 32 || text.len() > 44 {
            return Err(AddressError::SolanaFormat);
        }
        let decoded = bs58::decode(text).into_vec().map_err(|_| AddressError::SolanaFormat)?;
        let bytes: [u8; 32] = decoded.try_into().map_err(|_| AddressError::SolanaFormat)?;
        Ok(SolanaAddress(bytes))
    }

    /// One of `SOLANA_PROGRAM_ADDRESSES`.
    pub fn is_program(&self) -> bool {
        SOLANA_PROGRAM_ADDRESSES.contains(&self.to_string().as_str())
    }

    pub fn from_bytes(bytes: [u8; 32]) -> SolanaAddress {
        SolanaAddress(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for SolanaAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&bs58::encode(self.0).into_string())
    }
}

impl fmt::Debug for SolanaAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SolanaAddress({self})")
    }
}

/// Where a payout goes, already validated for the rail of its asset.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Destination {
    Evm(EvmAddress),
    Solana(SolanaAddress),
    /// An account at the provider of a provider rail.
    Account(ProviderAccount),
}

impl Destination {
    /// A destination on a chain's own rail. Provider assets parse theirs by their
    /// [`DestinationKind`] (`Asset::parse_destination`).
    pub fn parse(rail: RailFamily, text: &str) -> Result<Destination, AddressError> {
        match rail {
            RailFamily::Evm => DestinationKind::Evm.parse_destination(text),
            RailFamily::Solana => DestinationKind::Solana.parse_destination(text),
            RailFamily::Provider => Err(AddressError::Unsupported),
        }
    }

    /// Reads a destination written by [`Destination::to_string`] (stored rows). On a provider rail
    /// the three kinds cannot be confused: an account holds '_' or '-', an EVM address starts `0x`.
    pub fn parse_stored(rail: RailFamily, text: &str) -> Result<Destination, AddressError> {
        match rail {
            RailFamily::Provider if text.starts_with("0x") => {
                DestinationKind::Evm.parse_stored(text)
            }
            RailFamily::Provider if text.contains(['_', '-']) => {
                DestinationKind::Account.parse_stored(text)
            }
            RailFamily::Provider | RailFamily::Solana => DestinationKind::Solana.parse_stored(text),
            RailFamily::Evm => DestinationKind::Evm.parse_stored(text),
        }
    }
}

impl Destination {
    /// The address text of an on-chain destination (checksummed EVM, base58 Solana); `None` for
    /// an account at a provider, which no chain transfer can reach.
    pub fn chain_address(&self) -> Option<String> {
        match self {
            Destination::Evm(a) => Some(a.to_string()),
            Destination::Solana(a) => Some(a.to_string()),
            Destination::Account(_) => None,
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Evm(a) => fmt::Display::fmt(a, f),
            Destination::Solana(a) => fmt::Display::fmt(a, f),
            Destination::Account(a) => fmt::Display::fmt(a, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Test vectors from EIP-55 itself.
    const EIP55: [&str; 4] = [
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
        "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
        "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
    ];

    #[test]
    fn eip55_vectors_round_trip() {
        for text in EIP55 {
            let a = EvmAddress::parse(text).unwrap();
            assert_eq!(a.to_checksum(), text);
            assert_eq!(EvmAddress::parse(&text.to_lowercase()).unwrap(), a);
            assert_eq!(EvmAddress::parse(&format!("0x{}", text[2..].to_uppercase())).unwrap(), a);
        }
    }

    #[test]
    fn provider_accounts_parse_and_read_back_as_accounts() {
        let account = ProviderAccount::parse("acct_1Nv0FGQ9RKHgCVdK").unwrap();
        assert_eq!(account.as_str(), "acct_1Nv0FGQ9RKHgCVdK");
        let stored = Destination::Account(account).to_string();
        assert_eq!(
            Destination::parse_stored(RailFamily::Provider, &stored).unwrap(),
            Destination::Account(account)
        );
        let sol = "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T";
        assert!(matches!(
            Destination::parse_stored(RailFamily::Provider, sol),
            Ok(Destination::Solana(_))
        ));
        for bad in ["", "ab", "acct", "acct 1", "acct_<script>", &"a_".repeat(40)] {
            assert_eq!(ProviderAccount::parse(bad), Err(AddressError::AccountFormat), "{bad:?}");
        }
        assert_eq!(
            Destination::parse(RailFamily::Provider, "acct_1"),
            Err(AddressError::Unsupported)
        );
    }

    #[test]
    fn wrong_checksum_and_bad_formats_are_refused() {
        let flipped = "0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
        assert_eq!(EvmAddress::parse(flipped), Err(AddressError::EvmChecksum));
        for bad in [
            "",
            "0x",
            "5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAe",
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAedd",
            "0xgaAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            " 0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed",
        ] {
            assert_eq!(EvmAddress::parse(bad), Err(AddressError::EvmFormat), "{bad:?}");
        }
        assert_eq!(
            EvmAddress::parse("0x0000000000000000000000000000000000000000"),
            Err(AddressError::EvmZero)
        );
    }

    #[test]
    fn solana_addresses_are_32_byte_base58() {
        let system = "11111111111111111111111111111111";
        assert_eq!(SolanaAddress::parse(system).unwrap().as_bytes(), &[0u8; 32]);
        let usdc_mint = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
        assert_eq!(SolanaAddress::parse(usdc_mint).unwrap().to_string(), usdc_mint);
        for bad in [
            "",
            "0OIl1111111111111111111111111111",
            "1111",
            "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1vv",
        ] {
            assert_eq!(SolanaAddress::parse(bad), Err(AddressError::SolanaFormat), "{bad:?}");
        }
    }
}
