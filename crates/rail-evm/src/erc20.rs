//! The slice of the ERC-20 ABI that payouts need: transfer calldata, balanceOf, and the Transfer event.

use alloy::primitives::{Address, B256, U256};
use alloy::sol_types::{SolCall, SolEvent};
use payoutd_domain::{Amount, EvmAddress};

alloy::sol! {
    interface IERC20 {
        event Transfer(address indexed from, address indexed to, uint256 value);
        function transfer(address to, uint256 amount) external returns (bool);
        function balanceOf(address owner) external view returns (uint256);
    }
}

pub(crate) fn to_alloy(address: EvmAddress) -> Address {
    Address::from(*address.as_bytes())
}

pub(crate) fn from_alloy(address: Address) -> EvmAddress {
    EvmAddress::from_bytes(address.into_array())
}

/// Calldata of `transfer(to, amount)`.
pub fn transfer_calldata(to: EvmAddress, amount: Amount) -> Vec<u8> {
    IERC20::transferCall { to: to_alloy(to), amount: amount.as_u256() }.abi_encode()
}

/// Reads `transfer(to, amount)` calldata back; `None` for any other input.
pub fn decode_transfer_calldata(input: &[u8]) -> Option<(EvmAddress, Amount)> {
    let call = IERC20::transferCall::abi_decode(input).ok()?;
    Some((from_alloy(call.to), Amount::from_u256(call.amount)))
}

pub(crate) fn balance_of_calldata(owner: EvmAddress) -> Vec<u8> {
    IERC20::balanceOfCall { owner: to_alloy(owner) }.abi_encode()
}

pub(crate) fn decode_balance_of(output: &[u8]) -> Option<U256> {
    IERC20::balanceOfCall::abi_decode_returns(output).ok()
}

/// Topic 0 of `Transfer(address,address,uint256)`.
pub(crate) fn transfer_topic() -> B256 {
    IERC20::Transfer::SIGNATURE_HASH
}

/// An indexed address topic back to its address; `None` unless its first 12 bytes are zero (the
/// left padding an address topic carries).
pub(crate) fn topic_address(topic: &[u8; 32]) -> Option<EvmAddress> {
    let (padding, address) = topic.split_at(12);
    if padding.iter().any(|b| *b != 0) {
        return None;
    }
    Some(EvmAddress::from_bytes(address.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_calldata_has_the_standard_selector_and_round_trips() {
        let to = EvmAddress::parse("0x70997970c51812dc3a010c7d01b50e0d17dc79c8").unwrap();
        let data = transfer_calldata(to, Amount::from_u128(1_500_000));
        assert_eq!(&data[..4], &[0xa9, 0x05, 0x9c, 0xbb]);
        assert_eq!(data.len(), 4 + 32 + 32);
        assert_eq!(decode_transfer_calldata(&data), Some((to, Amount::from_u128(1_500_000))));
        assert_eq!(decode_transfer_calldata(&data[..40]), None);
    }

    #[test]
    fn transfer_topic_is_the_keccak_of_the_signature() {
        assert_eq!(
            hex::encode(transfer_topic()),
            "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
        );
    }
}
