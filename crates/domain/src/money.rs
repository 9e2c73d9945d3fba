//! Amounts in base units: unsigned integers up to 2^256-1, parsed strictly from decimal strings.

use std::fmt;

use ruint::aliases::U256;

/// Digits in 2^256-1; also the width of the zero-padded form stored in SQLite.
pub const AMOUNT_MAX_DIGITS: usize = 78;

/// A non-negative amount of an asset in its base units (wei, micro-USDC, lamports).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Amount(U256);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("amount is empty")]
    Empty,
    #[error(
        "amount must be a string of decimal digits in base units (no sign, decimal point, exponent or spaces)"
    )]
    NotDigits,
    #[error("amount must not have leading zeros")]
    LeadingZero,
    #[error("amount exceeds 2^256-1")]
    Overflow,
    #[error("amount must be greater than zero")]
    Zero,
}

impl Amount {
    pub const ZERO: Amount = Amount(U256::ZERO);
    /// 2^256 - 1, the largest amount any asset can carry.
    pub const MAX: Amount = Amount(U256::MAX);

    /// Parses the canonical decimal form: digits only, no leading zeros, at most 2^256-1.
    pub fn parse(text: &str) -> Result<Amount, AmountError> {
        if text.is_empty() {
            return Err(AmountError::Empty);
        }
        if !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AmountError::NotDigits);
        }
        if text.len() > 1 && text.starts_with('0') {
            return Err(AmountError::LeadingZero);
        }
        if text.len() > AMOUNT_MAX_DIGITS {
            return Err(AmountError::Overflow);
        }
        U256::from_str_radix(text, 10).map(Amount).map_err(|_| AmountError::Overflow)
    }

    /// Parses an amount that must be strictly positive (payouts, deposits, transfers).
    pub fn parse_positive(text: &str) -> Result<Amount, AmountError> {
        let amount = Amount::parse(text)?;
        if amount.is_zero() {
            return Err(AmountError::Zero);
        }
        Ok(amount)
    }

    /// Reads the zero-padded storage form (also accepts unpadded digits).
    pub fn from_padded(text: &str) -> Result<Amount, AmountError> {
        let trimmed = text.trim_start_matches('0');
        if trimmed.is_empty() && !text.is_empty() {
            return Ok(Amount::ZERO);
        }
        Amount::parse(trimmed)
    }

    pub fn from_u128(value: u128) -> Amount {
        Amount(U256::from(value))
    }

    pub fn from_u256(value: U256) -> Amount {
        Amount(value)
    }

    pub fn as_u256(&self) -> U256 {
        self.0
    }

    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    pub fn checked_add(self, other: Amount) -> Option<Amount> {
        self.0.checked_add(other.0).map(Amount)
    }

    pub fn checked_sub(self, other: Amount) -> Option<Amount> {
        self.0.checked_sub(other.0).map(Amount)
    }

    /// The amount in whole units of an asset with `decimals` (1234 with 6 is `0.001234`), exact:
    /// every digit kept, trailing zeros of the fraction dropped. For people; the API speaks
    /// base units.
    pub fn in_units(&self, decimals: u8) -> String {
        let digits = self.0.to_string();
        let decimals = usize::from(decimals);
        if decimals == 0 {
            return digits;
        }
        let padded = format!("{digits:0>width$}", width = decimals + 1);
        let (whole, fraction) = padded.split_at(padded.len() - decimals);
        match fraction.trim_end_matches('0') {
            "" => whole.to_owned(),
            fraction => format!("{whole}.{fraction}"),
        }
    }

    /// Fixed-width form whose string order equals numeric order (the SQLite money encoding).
    pub fn to_padded(&self) -> String {
        format!("{:0>width$}", self.0.to_string(), width = AMOUNT_MAX_DIGITS)
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Amount({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: &str =
        "115792089237316195423570985008687907853269984665640564039457584007913129639935";

    #[test]
    fn parses_canonical_decimals_up_to_2_pow_256_minus_1() {
        assert_eq!(Amount::parse("0").unwrap(), Amount::ZERO);
        assert_eq!(Amount::parse("1").unwrap(), Amount::from_u128(1));
        assert_eq!(Amount::parse(MAX).unwrap().to_string(), MAX);
    }

    #[test]
    fn shown_in_units_every_digit_kept_and_no_trailing_zeros() {
        for (base_units, decimals, units) in [
            (1_234u128, 6, "0.001234"),
            (5_000_000, 6, "5"),
            (5_100_000, 6, "5.1"),
            (1, 18, "0.000000000000000001"),
            (1_000_000_000_000_000_000, 18, "1"),
            (0, 6, "0"),
            (42, 0, "42"),
        ] {
            assert_eq!(Amount::from_u128(base_units).in_units(decimals), units);
        }
        let max = Amount::parse(MAX).unwrap().in_units(18);
        assert_eq!(max.replace('.', ""), MAX, "exact at the largest amount");
    }

    #[test]
    fn refuses_everything_else() {
        let overflow =
            "115792089237316195423570985008687907853269984665640564039457584007913129639936";
        for (text, want) in [
            ("", AmountError::Empty),
            ("-1", AmountError::NotDigits),
            ("+1", AmountError::NotDigits),
            ("1.5", AmountError::NotDigits),
            ("1e18", AmountError::NotDigits),
            (" 1", AmountError::NotDigits),
            ("1_000", AmountError::NotDigits),
            ("0x10", AmountError::NotDigits),
            ("١", AmountError::NotDigits),
            ("01", AmountError::LeadingZero),
            (overflow, AmountError::Overflow),
            (
                "1000000000000000000000000000000000000000000000000000000000000000000000000000000",
                AmountError::Overflow,
            ),
        ] {
            assert_eq!(Amount::parse(text), Err(want), "{text:?}");
        }
        assert_eq!(Amount::parse_positive("0"), Err(AmountError::Zero));
    }

    #[test]
    fn padded_form_orders_like_numbers_and_round_trips() {
        let values = ["0", "9", "10", "999", "1000", MAX];
        let padded: Vec<String> =
            values.iter().map(|v| Amount::parse(v).unwrap().to_padded()).collect();
        let mut sorted = padded.clone();
        sorted.sort();
        assert_eq!(padded, sorted);
        for (v, p) in values.iter().zip(&padded) {
            assert_eq!(p.len(), AMOUNT_MAX_DIGITS);
            assert_eq!(Amount::from_padded(p).unwrap().to_string(), *v);
        }
    }

    #[test]
    fn arithmetic_is_checked() {
        let max = Amount::parse(MAX).unwrap();
        assert_eq!(max.checked_add(Amount::from_u128(1)), None);
        assert_eq!(Amount::ZERO.checked_sub(Amount::from_u128(1)), None);
        assert_eq!(
            Amount::from_u128(5).checked_sub(Amount::from_u128(3)),
            Some(Amount::from_u128(2))
        );
    }
}
