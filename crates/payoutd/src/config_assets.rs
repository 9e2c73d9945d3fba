//! The `[[assets]]` of the configuration file parsed into the asset registry, with each asset's smallest payout and network fee.

use anyhow::{Context, bail};
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, Asset, AssetRegistry, DestinationKind, EvmAddress, SolanaAddress};
use serde::Deserialize;

use crate::config::AssetsSource;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileAsset {
    code: String,
    decimals: u8,
    /// `native`, `erc20` (then `token_address`), `spl` (then `mint`) or `provider` (then `destination`).
    kind: String,
    token_address: Option<String>,
    /// An SPL token's mint account (base58).
    mint: Option<String>,
    /// A provider asset's destinations: `account` (a provider account such as `acct_...`), `evm` or `solana`.
    destination: Option<String>,
    /// The smallest payout accepted, decimal base units; absent: any positive amount.
    min_amount: Option<String>,
    /// Charged to the merchant with every payout, decimal base units of this asset; absent: none.
    network_fee: Option<String>,
}

/// The registry the file lists, or the built-in development assets when it lists none.
pub(crate) fn asset_registry(
    listed: Option<Vec<FileAsset>>,
) -> anyhow::Result<(AssetRegistry, AssetsSource)> {
    let Some(list) = listed else {
        return Ok((AssetRegistry::local_development(), AssetsSource::BuiltIn));
    };
    let assets = list.into_iter().map(asset).collect::<anyhow::Result<Vec<_>>>()?;
    Ok((AssetRegistry::new(assets)?, AssetsSource::File))
}

fn asset(a: FileAsset) -> anyhow::Result<Asset> {
    let token = match (a.kind.as_str(), a.token_address, a.mint, a.destination.as_deref()) {
        ("native", None, None, None) => TokenKind::Native,
        ("erc20", Some(addr), None, None) => TokenKind::Erc20(
            EvmAddress::parse(&addr)
                .with_context(|| format!("asset {}: bad token_address", a.code))?,
        ),
        ("spl", None, Some(mint), None) => TokenKind::Spl(
            SolanaAddress::parse(&mint).with_context(|| format!("asset {}: bad mint", a.code))?,
        ),
        ("provider", None, None, Some("account")) => TokenKind::Provider(DestinationKind::Account),
        ("provider", None, None, Some("evm")) => TokenKind::Provider(DestinationKind::Evm),
        ("provider", None, None, Some("solana")) => TokenKind::Provider(DestinationKind::Solana),
        (kind, _, _, _) => bail!(
            "asset {}: kind must be `native` (nothing else), `erc20` (with token_address), `spl` (with mint) or `provider` \
             (with destination = \"account\", \"evm\" or \"solana\"), got {kind:?}",
            a.code
        ),
    };
    let asset =
        Asset::new(&a.code, a.decimals, token).with_context(|| format!("asset {:?}", a.code))?;
    let min_amount = a
        .min_amount
        .as_deref()
        .map(Amount::parse)
        .transpose()
        .with_context(|| format!("asset {}: min_amount", a.code))?;
    let min_amount = min_amount.unwrap_or_else(|| default_min_amount(&asset));
    let network_fee = a
        .network_fee
        .as_deref()
        .map(Amount::parse)
        .transpose()
        .with_context(|| format!("asset {}: network_fee", a.code))?;
    Ok(asset.with_min_amount(min_amount).with_network_fee(network_fee.unwrap_or(Amount::ZERO)))
}

/// The smallest payout of an asset whose `min_amount` is not configured: native SOL, what opens a
/// new account (a smaller payout to an address that does not exist yet fails on chain, and then
/// waits for a person); any positive amount otherwise.
fn default_min_amount(asset: &Asset) -> Amount {
    match (asset.rail, &asset.token) {
        (payoutd_domain::RailFamily::Solana, TokenKind::Native) => {
            Amount::from_u128(u128::from(payoutd_rail_solana::RENT_EXEMPT_EMPTY_ACCOUNT_LAMPORTS))
        }
        _ => Amount::ZERO,
    }
}
