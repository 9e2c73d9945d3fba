//! Idempotency keys: the identity of a business event, scoped per merchant, with per-surface length rules.

use std::fmt;

pub const PAYOUT_KEY_MIN_LEN: usize = 8;
pub const PAYOUT_KEY_MAX_LEN: usize = 128;
pub const TRANSFER_KEY_MIN_LEN: usize = 1;
pub const TRANSFER_KEY_MAX_LEN: usize = 64;
pub const DEPOSIT_KEY_MIN_LEN: usize = 1;
pub const DEPOSIT_KEY_MAX_LEN: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("idempotency key must be {min}-{max} characters long")]
    Length { min: usize, max: usize },
    #[error("idempotency key must be printable ASCII (0x21-0x7e)")]
    Charset,
}

fn check(text: &str, min: usize, max: usize) -> Result<(), KeyError> {
    // Charset first: a multi-byte character must not be reported as a length problem.
    if !text.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(KeyError::Charset);
    }
    if text.len() < min || text.len() > max {
        return Err(KeyError::Length { min, max });
    }
    Ok(())
}

macro_rules! key_type {
    ($(#[$doc:meta])* $name:ident, $min:expr, $max:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub fn parse(text: &str) -> Result<$name, KeyError> {
                check(text, $min, $max)?;
                Ok($name(text.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:?})"), self.0)
            }
        }
    };
}

key_type!(
    /// A payout's (and a batch line's `external_id`) key: 8-128 printable ASCII.
    PayoutKey, PAYOUT_KEY_MIN_LEN, PAYOUT_KEY_MAX_LEN
);
key_type!(
    /// An internal transfer's key: 1-64 printable ASCII.
    TransferKey, TRANSFER_KEY_MIN_LEN, TRANSFER_KEY_MAX_LEN
);
key_type!(
    /// An operator deposit's key: 1-128 printable ASCII.
    DepositKey, DEPOSIT_KEY_MIN_LEN, DEPOSIT_KEY_MAX_LEN
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payout_keys_are_8_to_128_printable_ascii() {
        assert!(PayoutKey::parse("withdrawal:8f2c").is_ok());
        assert!(PayoutKey::parse(&"k".repeat(8)).is_ok());
        assert!(PayoutKey::parse(&"k".repeat(128)).is_ok());
        assert_eq!(PayoutKey::parse("1234567"), Err(KeyError::Length { min: 8, max: 128 }));
        assert_eq!(PayoutKey::parse(&"k".repeat(129)), Err(KeyError::Length { min: 8, max: 128 }));
        for bad in ["with space1", "tab\tkey12", "ключключключ", "nul\0nul\0nul", "émoji😀key"]
        {
            assert_eq!(PayoutKey::parse(bad), Err(KeyError::Charset), "{bad:?}");
        }
    }

    #[test]
    fn transfer_keys_are_1_to_64() {
        assert!(TransferKey::parse("a").is_ok());
        assert!(TransferKey::parse(&"a".repeat(64)).is_ok());
        assert!(TransferKey::parse("").is_err());
        assert!(TransferKey::parse(&"a".repeat(65)).is_err());
    }
}
