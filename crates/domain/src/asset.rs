//! Assets: a rail plus a token with its decimals, and the registry of those the deployment knows.

use std::collections::BTreeMap;
use std::fmt;

use crate::address::{Destination, DestinationKind, EvmAddress, SolanaAddress};
use crate::money::Amount;

/// The family of rail an asset moves on; decides how destinations are validated and how
/// an attempt proves death (nonce, blockhash expiry, provider key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RailFamily {
    Evm,
    Solana,
    /// A payment provider's API (`provider:<name>/<SYMBOL>`): the provider moves the money.
    Provider,
}

/// Upper bound on asset codes such as `evm:31337/USDC`.
pub const ASSET_CODE_MAX_LEN: usize = 64;
pub const ASSET_DECIMALS_MAX: u8 = 36;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssetError {
    #[error("unknown asset {0:?}")]
    Unknown(String),
    #[error(
        "asset code must look like `evm:<chain id>/<SYMBOL>`, `solana:<cluster>/<SYMBOL>` or `provider:<name>/<SYMBOL>`"
    )]
    Format,
    #[error("asset decimals must be at most {ASSET_DECIMALS_MAX}")]
    Decimals,
    #[error("asset {0} is configured twice")]
    Duplicate(String),
}

/// The text identity of an asset (`evm:31337/USDC`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssetCode(String);

impl AssetCode {
    pub fn parse(text: &str) -> Result<(AssetCode, RailFamily, String), AssetError> {
        if text.is_empty() || text.len() > ASSET_CODE_MAX_LEN {
            return Err(AssetError::Format);
        }
        let (rail_part, symbol) = text.split_once('/').ok_or(AssetError::Format)?;
        let (family, network) = rail_part.split_once(':').ok_or(AssetError::Format)?;
        let rail = match family {
            "evm" if !network.is_empty() && network.bytes().all(|b| b.is_ascii_digit()) => {
                RailFamily::Evm
            }
            "solana"
                if !network.is_empty()
                    && network.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
            {
                RailFamily::Solana
            }
            "provider"
                if !network.is_empty()
                    && network
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') =>
            {
                RailFamily::Provider
            }
            _ => return Err(AssetError::Format),
        };
        if symbol.is_empty()
            || !symbol.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            return Err(AssetError::Format);
        }
        Ok((AssetCode(text.to_owned()), rail, network.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AssetCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for AssetCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AssetCode({})", self.0)
    }
}

/// What a token is on its rail: the chain's native coin, a token contract or an SPL mint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenKind {
    Native,
    Erc20(EvmAddress),
    /// An SPL token on Solana: its mint account.
    Spl(SolanaAddress),
    /// Paid through a provider's API to destinations of this kind; the provider's own token id
    /// lives in the provider's configuration.
    Provider(DestinationKind),
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asset {
    pub code: AssetCode,
    pub rail: RailFamily,
    /// Chain id for EVM, cluster name for Solana.
    pub network: String,
    pub decimals: u8,
    pub token: TokenKind,
    /// The smallest payout accepted, in base units (zero: any positive amount). Every payout costs
    /// the platform a network fee, and on Solana often an account's rent, whatever its amount.
    pub min_amount: Amount,
    /// Charged to the merchant with every payout, in base units of the payout's asset (zero: none):
    /// how a platform passes on the gas and rent it pays. Refunded with the hold when the payout
    /// ends without paying.
    pub network_fee: Amount,
}

impl Asset {
    pub fn new(code: &str, decimals: u8, token: TokenKind) -> Result<Asset, AssetError> {
        let (code, rail, network) = AssetCode::parse(code)?;
        if decimals > ASSET_DECIMALS_MAX {
            return Err(AssetError::Decimals);
        }
        Ok(Asset {
            code,
            rail,
            network,
            decimals,
            token,
            min_amount: Amount::ZERO,
            network_fee: Amount::ZERO,
        })
    }

    /// This asset with payouts below `min_amount` (base units) refused.
    pub fn with_min_amount(mut self, min_amount: Amount) -> Asset {
        self.min_amount = min_amount;
        self
    }

    /// This asset with `network_fee` (base units) charged to the merchant for every payout.
    pub fn with_network_fee(mut self, network_fee: Amount) -> Asset {
        self.network_fee = network_fee;
        self
    }

    pub fn evm_chain_id(&self) -> Option<u64> {
        match self.rail {
            RailFamily::Evm => self.network.parse().ok(),
            RailFamily::Solana | RailFamily::Provider => None,
        }
    }

    /// What this asset's payouts are paid to: a provider asset says it, a chain asset's is its chain's.
    pub fn destination_kind(&self) -> DestinationKind {
        match (&self.token, self.rail) {
            (TokenKind::Provider(kind), _) => *kind,
            (_, RailFamily::Evm) => DestinationKind::Evm,
            (_, RailFamily::Solana) => DestinationKind::Solana,
            (_, RailFamily::Provider) => DestinationKind::Account,
        }
    }

    /// A destination this asset can be paid to: of the asset's kind, and not the token's own
    /// contract or mint (a payout there is lost: neither can spend what it receives).
    pub fn parse_destination(
        &self,
        text: &str,
    ) -> Result<Destination, crate::address::AddressError> {
        let destination = match self.token {
            TokenKind::Provider(kind) => kind.parse_destination(text)?,
            _ => Destination::parse(self.rail, text)?,
        };
        match (&self.token, &destination) {
            (TokenKind::Erc20(contract), Destination::Evm(to)) if to == contract => {
                Err(crate::address::AddressError::TokenItself)
            }
            (TokenKind::Spl(mint), Destination::Solana(to)) if to == mint => {
                Err(crate::address::AddressError::TokenItself)
            }
            _ => Ok(destination),
        }
    }
}

/// The assets this deployment pays in, fixed at start-up from configuration.
#[derive(Debug, Clone, Default)]
pub struct AssetRegistry {
    assets: BTreeMap<AssetCode, Asset>,
}

impl AssetRegistry {
    pub fn new(assets: Vec<Asset>) -> Result<AssetRegistry, AssetError> {
        let mut map = BTreeMap::new();
        for asset in assets {
            if map.contains_key(&asset.code) {
                return Err(AssetError::Duplicate(asset.code.0));
            }
            map.insert(asset.code.clone(), asset);
        }
        Ok(AssetRegistry { assets: map })
    }

    /// The default configuration: the local development chain (anvil, chain id 31337).
    pub fn local_development() -> AssetRegistry {
        AssetRegistry::new(vec![
            Asset::new("evm:31337/ETH", 18, TokenKind::Native).expect("valid built-in asset"),
            Asset::new("evm:31337/USDC", 6, TokenKind::Other).expect("valid built-in asset"),
        ])
        .expect("distinct built-in assets")
    }

    pub fn get(&self, code: &str) -> Result<&Asset, AssetError> {
        self.assets
            .iter()
            .find(|(k, _)| k.as_str() == code)
            .map(|(_, v)| v)
            .ok_or_else(|| AssetError::Unknown(code.chars().take(ASSET_CODE_MAX_LEN).collect()))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Asset> {
        self.assets.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asset_codes_parse_rail_and_network() {
        let a = Asset::new("evm:31337/USDC", 6, TokenKind::Other).unwrap();
        assert_eq!((a.rail, a.evm_chain_id()), (RailFamily::Evm, Some(31337)));
        let s = Asset::new("solana:devnet/USDC", 6, TokenKind::Other).unwrap();
        assert_eq!((s.rail, s.evm_chain_id()), (RailFamily::Solana, None));
        for bad in ["", "evm/ETH", "evm:abc/ETH", "evm:1/", "btc:1/BTC", "evm:1/E TH"] {
            assert_eq!(AssetCode::parse(bad).unwrap_err(), AssetError::Format, "{bad:?}");
        }
        assert_eq!(Asset::new("evm:1/X", 37, TokenKind::Native).unwrap_err(), AssetError::Decimals);
    }

    /// A payout to the token's own contract or mint is refused at intake: the units would be lost.
    /// (Before, only the EVM zero address was refused.)
    #[test]
    fn the_tokens_own_contract_or_mint_is_not_a_destination() {
        use crate::address::AddressError;
        let contract = EvmAddress::parse("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48").unwrap();
        let usdc = Asset::new("evm:1/USDC", 6, TokenKind::Erc20(contract)).unwrap();
        assert_eq!(usdc.parse_destination(&contract.to_string()), Err(AddressError::TokenItself));
        assert!(usdc.parse_destination("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed").is_ok());
        let mint = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
        let spl = Asset::new(
            "solana:devnet/USDC",
            6,
            TokenKind::Spl(SolanaAddress::parse(mint).unwrap()),
        )
        .unwrap();
        assert_eq!(spl.parse_destination(mint), Err(AddressError::TokenItself));
        assert!(spl.parse_destination("9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM").is_ok());
        for program in crate::address::SOLANA_PROGRAM_ADDRESSES {
            assert_eq!(
                spl.parse_destination(program),
                Err(AddressError::SolanaProgram),
                "{program}"
            );
        }
    }

    #[test]
    fn registry_finds_known_and_refuses_unknown_or_duplicate() {
        let r = AssetRegistry::local_development();
        assert_eq!(r.get("evm:31337/ETH").unwrap().decimals, 18);
        assert_eq!(r.get("evm:31337/USDC").unwrap().decimals, 6);
        assert!(matches!(r.get("evm:1/ETH"), Err(AssetError::Unknown(_))));
        let dup = vec![Asset::new("evm:1/ETH", 18, TokenKind::Native).unwrap(); 2];
        assert!(matches!(AssetRegistry::new(dup), Err(AssetError::Duplicate(_))));
    }
}
