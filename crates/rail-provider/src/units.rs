//! Amounts as the providers write them: decimal strings in whole units ("12.34"), to and from our base units.

use payoutd_domain::{Amount, Asset};

/// `amount` base units of an asset with `decimals` as a provider's decimal string: "12.34", "5", "0.000001".
pub fn decimal_of(amount: Amount, decimals: u8) -> String {
    amount.in_units(decimals)
}

/// A provider's decimal string in base units; `None` if it is not a plain non-negative decimal or
/// has more fraction digits than the asset.
pub fn base_units_of(text: &str, decimals: u8) -> Option<Amount> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let decimals = usize::from(decimals);
    let fraction = fraction.trim_end_matches('0');
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > decimals
    {
        return None;
    }
    let digits = format!("{whole}{fraction:0<decimals$}");
    let canonical = digits.trim_start_matches('0');
    Amount::parse(if canonical.is_empty() { "0" } else { canonical }).ok()
}

/// The lower-case symbol of `asset` (`usdc` of `provider:circle/USDC`): how providers name currencies.
pub fn symbol_of(asset: &Asset) -> String {
    let code = asset.code.as_str();
    code.rsplit_once('/').map_or(code, |(_, symbol)| symbol).to_ascii_lowercase()
}

/// A provider's decimal balance of `asset` in base units; an unreadable one is a bad answer, never
/// zero (the balance check would report a shortfall that is not there).
pub fn balance_of(
    provider: &str,
    text: &str,
    asset: &Asset,
) -> Result<Amount, crate::api::CallError> {
    base_units_of(text, asset.decimals).ok_or_else(|| {
        crate::api::CallError::BadAnswer(format!(
            "{provider} balance {text:?} of {} is not a decimal in its units",
            asset.code.as_str()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_round_trip_and_refuse_what_is_not_a_plain_decimal() {
        for (units, decimals, text) in [
            (1234, 2, "12.34"),
            (500, 2, "5"),
            (1, 6, "0.000001"),
            (0, 6, "0"),
            (7, 0, "7"),
            (10_000_010, 6, "10.00001"),
        ] {
            assert_eq!(decimal_of(Amount::from_u128(units), decimals), text);
            assert_eq!(base_units_of(text, decimals), Some(Amount::from_u128(units)), "{text}");
        }
        assert_eq!(base_units_of("12.340", 2), Some(Amount::from_u128(1234)));
        for bad in ["", ".5", "-1", "1e3", "1.234", "1,5", " 1"] {
            assert_eq!(base_units_of(bad, 2), None, "{bad:?}");
        }
    }
}
