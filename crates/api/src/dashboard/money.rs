//! Amounts as a person reads them on the dashboard: in the asset's units (0.001234 for 1234 base units of a 6-decimal USDC), the base units beside them for whoever checks against a chain.

use payoutd_domain::{Amount, AssetRegistry};

/// One amount as a page shows it.
pub struct Shown {
    /// In the asset's units; the base units when the asset is not configured.
    pub units: String,
    pub base_units: String,
}

/// `amount` of `asset` (its code) in the asset's units, when this deployment knows its decimals.
pub fn shown_amount(assets: &AssetRegistry, asset: &str, amount: Amount) -> Shown {
    let base_units = amount.to_string();
    let units = match assets.get(asset) {
        Ok(known) => amount.in_units(known.decimals),
        Err(_) => base_units.clone(),
    };
    Shown { units, base_units }
}
