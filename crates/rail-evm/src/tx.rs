//! Offline EIP-1559 signing of payouts, replacements and cancels, and decoding of stored raw bytes.

use std::fmt;
use std::str::FromStr;

use alloy::consensus::{SignableTransaction, Transaction, TxEip1559, TxEnvelope};
use alloy::eips::eip2718::{Decodable2718, Encodable2718};
use alloy::network::TxSignerSync;
use alloy::primitives::{Bytes, TxKind, U256};
use payoutd_domain::{Amount, CHAIN_REFERENCE_BYTES, ChainReference, EvmAddress};

use crate::erc20::{decode_transfer_calldata, from_alloy, to_alloy, transfer_calldata};
use crate::key::SigningKey;

/// Gas of a plain value transfer to an account without code; also what a cancel costs.
pub const NATIVE_TRANSFER_GAS_LIMIT: u64 = 21_000;
/// A generous ceiling for `transfer` on common stablecoins (USDC uses about 35k-60k);
/// prefer `EvmRpc::estimate_gas` plus headroom where the token is unknown.
pub const ERC20_TRANSFER_GAS_LIMIT_DEFAULT: u64 = 100_000;
/// Basis points in one whole: fee bumps are expressed in basis points (1 bp = 0.01 %).
pub const BPS_PER_WHOLE: u32 = 10_000;
/// Default replacement bump, 12.5 %: above Geth's 10 % minimum with margin for rounding
/// and for nodes that demand more (in basis points).
pub const FEE_BUMP_DEFAULT_BPS: u32 = 1_250;

/// The two EIP-1559 fee fields, in wei per gas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fees {
    pub max_fee_per_gas: u128,
    pub max_priority_fee_per_gas: u128,
}

impl Fees {
    /// Raises both fields by at least `bump_bps` basis points, rounding up and by at least
    /// 1 wei, because nodes compare each field separately and reject a replacement unless both
    /// grew by their threshold.
    pub fn bump(self, bump_bps: u32) -> Fees {
        Fees {
            max_fee_per_gas: bump_field(self.max_fee_per_gas, bump_bps),
            max_priority_fee_per_gas: bump_field(self.max_priority_fee_per_gas, bump_bps),
        }
    }
}

fn bump_field(value: u128, bump_bps: u32) -> u128 {
    let whole = u128::from(BPS_PER_WHOLE);
    let bps = u128::from(bump_bps);
    // Split so that value * bps cannot overflow: (q*W + r) * bps / W = q*bps + r*bps/W.
    let from_quotient = (value / whole).saturating_mul(bps);
    let from_remainder = ((value % whole) * bps).div_ceil(whole);
    let increase = from_quotient.saturating_add(from_remainder).max(1);
    value.saturating_add(increase)
}

/// The envelope fields every transaction from a hot wallet needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxParams {
    pub chain_id: u64,
    pub nonce: u64,
    pub fees: Fees,
    pub gas_limit: u64,
}

/// A transaction hash; `Display` and `FromStr` use `0x` + 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxHash([u8; 32]);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("transaction hash must be 0x followed by 64 hex digits")]
pub struct TxHashParseError;

impl TxHash {
    pub fn from_bytes(bytes: [u8; 32]) -> TxHash {
        TxHash(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn parse(text: &str) -> Result<TxHash, TxHashParseError> {
        text.parse()
    }
}

impl FromStr for TxHash {
    type Err = TxHashParseError;

    fn from_str(text: &str) -> Result<TxHash, TxHashParseError> {
        let digits = text.strip_prefix("0x").ok_or(TxHashParseError)?;
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(digits, &mut bytes).map_err(|_| TxHashParseError)?;
        Ok(TxHash(bytes))
    }
}

impl fmt::Display for TxHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{}", hex::encode(self.0))
    }
}

impl fmt::Debug for TxHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TxHash({self})")
    }
}

/// A signed transaction ready to store and broadcast; re-broadcasts send `raw` unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTx {
    /// EIP-2718 envelope (`0x02 || rlp(...)`), exactly what `eth_sendRawTransaction` takes.
    pub raw: Vec<u8>,
    /// keccak256(raw).
    pub hash: TxHash,
    pub nonce: u64,
    pub fees: Fees,
    pub gas_limit: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    // Nodes reject this shape outright; refusing here keeps it before the broadcast line.
    #[error("max_priority_fee_per_gas {priority} exceeds max_fee_per_gas {max}")]
    PriorityAboveMaxFee { priority: u128, max: u128 },
    #[error("signer failed: {0}")]
    Signer(#[from] alloy::signers::Error),
}

/// A native-coin transfer of `amount` wei to `to`, not yet signed.
pub fn native_transfer(
    params: &TxParams,
    to: EvmAddress,
    amount: Amount,
    data: Vec<u8>,
) -> Result<TxEip1559, SignError> {
    unsigned(params, TxKind::Call(to_alloy(to)), amount.as_u256(), data)
}

/// `token.transfer(to, amount)` with `reference` after the call's arguments, not yet signed: zero
/// value, the amount lives in the calldata. A token's `transfer` reads its two arguments and never
/// looks past them (Solidity's ABI decoder ignores trailing calldata).
pub fn erc20_transfer(
    params: &TxParams,
    token: EvmAddress,
    to: EvmAddress,
    amount: Amount,
    reference: &[u8],
) -> Result<TxEip1559, SignError> {
    let mut calldata = transfer_calldata(to, amount);
    calldata.extend_from_slice(reference);
    unsigned(params, TxKind::Call(to_alloy(token)), U256::ZERO, calldata)
}

/// `transfer(to, amount)`: the selector and two 32-byte arguments.
const TRANSFER_CALL_BYTES: usize = 4 + 32 + 32;

/// The reference a transaction's data carries where payoutd's transfers put one (`erc20_transfer`,
/// a native transfer's data): 16 bytes after a token `transfer` call's arguments, or the whole data
/// of 16 bytes; `None` for any other shape.
pub fn carried_reference(data: &[u8]) -> Option<ChainReference> {
    let call_then_reference = data.len() == TRANSFER_CALL_BYTES + CHAIN_REFERENCE_BYTES
        && decode_transfer_calldata(&data[..TRANSFER_CALL_BYTES]).is_some();
    if data.len() == CHAIN_REFERENCE_BYTES || call_then_reference {
        return ChainReference::at_end_of(data);
    }
    None
}

/// The gas a transaction that executes nothing (a native transfer) needs for its data on top of
/// its 21,000: EIP-7623's floor of 10 gas a token (a zero byte is one token, any other byte four),
/// the most any chain charges (before Prague, EIP-2028's 4 a token: the rest is limit, not spent).
pub fn calldata_gas(data: &[u8]) -> u64 {
    10 * calldata_tokens(data)
}

/// EIP-7623's tokens of `data`: one a zero byte, four any other.
pub fn calldata_tokens(data: &[u8]) -> u64 {
    data.iter().map(|b| if *b == 0 { 1 } else { 4 }).sum()
}

/// A zero-value send from `from` to itself at `nonce`, not yet signed: mined instead of the
/// payout it replaces, it consumes the nonce and moves nothing.
pub fn cancel(
    from: EvmAddress,
    chain_id: u64,
    nonce: u64,
    fees: Fees,
) -> Result<TxEip1559, SignError> {
    let params = TxParams { chain_id, nonce, fees, gas_limit: NATIVE_TRANSFER_GAS_LIMIT };
    unsigned(&params, TxKind::Call(to_alloy(from)), U256::ZERO, Vec::new())
}

/// Signs a native-coin transfer of `amount` wei to `to`, with no data (a transfer made outside
/// payoutd's pipeline: tests, funding).
pub fn sign_native_transfer(
    key: &SigningKey,
    params: &TxParams,
    to: EvmAddress,
    amount: Amount,
) -> Result<SignedTx, SignError> {
    sign_local(key, native_transfer(params, to, amount, Vec::new())?)
}

/// Signs `token.transfer(to, amount)` with nothing after its arguments (a transfer made outside
/// payoutd's pipeline: tests, funding).
pub fn sign_erc20_transfer(
    key: &SigningKey,
    params: &TxParams,
    token: EvmAddress,
    to: EvmAddress,
    amount: Amount,
) -> Result<SignedTx, SignError> {
    sign_local(key, erc20_transfer(params, token, to, amount, &[])?)
}

/// Signs the cancel at `nonce` (see `cancel`).
pub fn sign_cancel(
    key: &SigningKey,
    chain_id: u64,
    nonce: u64,
    fees: Fees,
) -> Result<SignedTx, SignError> {
    sign_local(key, cancel(key.address(), chain_id, nonce, fees)?)
}

/// Signs a contract creation (the test kit deploys its ERC-20 with it).
pub fn sign_create(
    key: &SigningKey,
    params: &TxParams,
    init_code: Vec<u8>,
) -> Result<SignedTx, SignError> {
    sign_local(key, unsigned(params, TxKind::Create, U256::ZERO, init_code)?)
}

fn unsigned(
    params: &TxParams,
    to: TxKind,
    value: U256,
    input: Vec<u8>,
) -> Result<TxEip1559, SignError> {
    let fees = params.fees;
    if fees.max_priority_fee_per_gas > fees.max_fee_per_gas {
        return Err(SignError::PriorityAboveMaxFee {
            priority: fees.max_priority_fee_per_gas,
            max: fees.max_fee_per_gas,
        });
    }
    Ok(TxEip1559 {
        chain_id: params.chain_id,
        nonce: params.nonce,
        gas_limit: params.gas_limit,
        max_fee_per_gas: fees.max_fee_per_gas,
        max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
        to,
        value,
        access_list: Default::default(),
        input: Bytes::from(input),
    })
}

/// Signs `tx` with a key held in this process.
pub fn sign_local(key: &SigningKey, mut tx: TxEip1559) -> Result<SignedTx, SignError> {
    let signature = key.signer().sign_transaction_sync(&mut tx)?;
    Ok(signed_tx(TxEnvelope::Eip1559(tx.into_signed(signature))))
}

/// The bytes to store and broadcast for a signed EIP-1559 envelope.
pub(crate) fn signed_tx(envelope: TxEnvelope) -> SignedTx {
    let tx = envelope.as_eip1559().expect("this rail signs EIP-1559 only").tx();
    SignedTx {
        fees: Fees {
            max_fee_per_gas: tx.max_fee_per_gas,
            max_priority_fee_per_gas: tx.max_priority_fee_per_gas,
        },
        nonce: tx.nonce,
        gas_limit: tx.gas_limit,
        hash: TxHash(envelope.tx_hash().0),
        raw: envelope.encoded_2718(),
    }
}

/// What stored raw bytes say, with the signer recovered from the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedTx {
    pub hash: TxHash,
    pub signer: EvmAddress,
    pub chain_id: u64,
    pub nonce: u64,
    /// `None` for a contract creation.
    pub to: Option<EvmAddress>,
    pub value: Amount,
    pub input: Vec<u8>,
    pub fees: Fees,
    pub gas_limit: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeTxError {
    #[error("raw bytes are not a valid EIP-2718 transaction: {0}")]
    Malformed(String),
    #[error("transaction is not EIP-1559 (type 2); this rail only signs type 2")]
    NotEip1559,
    #[error("signature does not recover to a signer")]
    BadSignature,
}

/// Decodes raw bytes this crate signed (EIP-1559 only) and recovers the signer.
pub fn decode_raw(raw: &[u8]) -> Result<DecodedTx, DecodeTxError> {
    let mut buf = raw;
    let envelope =
        TxEnvelope::decode_2718(&mut buf).map_err(|e| DecodeTxError::Malformed(e.to_string()))?;
    if !buf.is_empty() {
        return Err(DecodeTxError::Malformed(format!("{} trailing bytes", buf.len())));
    }
    let TxEnvelope::Eip1559(signed) = &envelope else {
        return Err(DecodeTxError::NotEip1559);
    };
    let tx = signed.tx();
    // Recovered from the signing hash, so a tampered field yields a different (wrong) signer.
    let signer = signed
        .signature()
        .recover_address_from_prehash(&tx.signature_hash())
        .map_err(|_| DecodeTxError::BadSignature)?;
    Ok(DecodedTx {
        hash: TxHash(envelope.tx_hash().0),
        signer: from_alloy(signer),
        chain_id: tx.chain_id,
        nonce: tx.nonce,
        to: tx.to().map(from_alloy),
        value: Amount::from_u256(tx.value),
        input: tx.input.to_vec(),
        fees: Fees {
            max_fee_per_gas: tx.max_fee_per_gas,
            max_priority_fee_per_gas: tx.max_priority_fee_per_gas,
        },
        gas_limit: tx.gas_limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

    #[test]
    fn a_reference_is_read_back_only_from_the_shapes_payoutd_writes() {
        let reference = [7u8; CHAIN_REFERENCE_BYTES];
        let to = EvmAddress::parse("0x70997970c51812dc3a010c7d01b50e0d17dc79c8").unwrap();
        let mut token_call = transfer_calldata(to, Amount::from_u128(5));
        assert_eq!(carried_reference(&token_call), None, "a plain token call carries none");
        token_call.extend_from_slice(&reference);
        assert_eq!(carried_reference(&token_call).map(|r| *r.as_bytes()), Some(reference));
        assert_eq!(carried_reference(&reference).map(|r| *r.as_bytes()), Some(reference));
        assert_eq!(carried_reference(&[]), None, "a native transfer to a contract carries none");
        let mut other_call = token_call.clone();
        other_call[0] ^= 0xff;
        assert_eq!(carried_reference(&other_call), None, "another function's call is not ours");
        assert_eq!(carried_reference(&token_call[1..]), None);
    }

    fn fees(max: u128, priority: u128) -> Fees {
        Fees { max_fee_per_gas: max, max_priority_fee_per_gas: priority }
    }

    #[test]
    fn bump_raises_both_fields_by_at_least_the_rate_rounding_up() {
        assert_eq!(fees(1_000, 100).bump(FEE_BUMP_DEFAULT_BPS), fees(1_125, 113));
        // 12.5 % of 1 is 0.125: rounds up to 1 wei.
        assert_eq!(fees(1, 1).bump(FEE_BUMP_DEFAULT_BPS), fees(2, 2));
        // Zero priority still moves, or a node would see an identical field.
        assert_eq!(fees(0, 0).bump(FEE_BUMP_DEFAULT_BPS), fees(1, 1));
        assert_eq!(
            fees(u128::MAX, u128::MAX).bump(FEE_BUMP_DEFAULT_BPS),
            fees(u128::MAX, u128::MAX)
        );
    }

    #[test]
    fn bump_always_meets_geths_ten_percent_rule() {
        for value in [1u128, 7, 9, 10, 11, 99, 1_000_000_007, 30_000_000_000, u128::MAX / 3] {
            let bumped = bump_field(value, 1_000);
            // Geth: new >= old * (100 + 10) / 100, computed in integers without rounding down the bar.
            assert!(
                value > u128::MAX / 11 || bumped * 10 >= value * 11,
                "value {value} bumped to {bumped}"
            );
            assert!(bumped > value);
        }
    }

    #[test]
    fn signing_is_deterministic_and_decodes_back() {
        let key = SigningKey::from_hex(KEY).unwrap();
        let to = EvmAddress::parse("0x70997970c51812dc3a010c7d01b50e0d17dc79c8").unwrap();
        let params = TxParams {
            chain_id: 31337,
            nonce: 7,
            fees: fees(2_000_000_000, 1_000_000_000),
            gas_limit: 21_000,
        };
        let a = sign_native_transfer(&key, &params, to, Amount::from_u128(12345)).unwrap();
        let b = sign_native_transfer(&key, &params, to, Amount::from_u128(12345)).unwrap();
        // RFC 6979 nonces: a re-sign gives the same bytes, but the engine must still never rely on it.
        assert_eq!(a.raw, b.raw);
        assert_eq!(a.raw[0], 0x02);
        let decoded = decode_raw(&a.raw).unwrap();
        assert_eq!(decoded.hash, a.hash);
        assert_eq!(decoded.signer, key.address());
        assert_eq!((decoded.chain_id, decoded.nonce), (31337, 7));
        assert_eq!(decoded.to, Some(to));
        assert_eq!(decoded.value, Amount::from_u128(12345));
        assert_eq!(decoded.fees, params.fees);
    }

    #[test]
    fn cancel_is_a_zero_value_self_send_at_the_given_nonce() {
        let key = SigningKey::from_hex(KEY).unwrap();
        let cancel = sign_cancel(&key, 31337, 3, fees(50, 5)).unwrap();
        let decoded = decode_raw(&cancel.raw).unwrap();
        assert_eq!(decoded.to, Some(key.address()));
        assert_eq!(decoded.value, Amount::ZERO);
        assert!(decoded.input.is_empty());
        assert_eq!((decoded.nonce, decoded.gas_limit), (3, NATIVE_TRANSFER_GAS_LIMIT));
    }

    #[test]
    fn refuses_priority_fee_above_max_fee() {
        let key = SigningKey::from_hex(KEY).unwrap();
        let err = sign_cancel(&key, 31337, 0, fees(5, 6)).unwrap_err();
        assert!(matches!(err, SignError::PriorityAboveMaxFee { priority: 6, max: 5 }));
    }

    #[test]
    fn decode_rejects_garbage_and_trailing_bytes() {
        assert!(matches!(decode_raw(&[0x02, 0x01]), Err(DecodeTxError::Malformed(_))));
        let key = SigningKey::from_hex(KEY).unwrap();
        let mut raw = sign_cancel(&key, 1, 0, fees(2, 1)).unwrap().raw;
        raw.push(0);
        assert!(matches!(decode_raw(&raw), Err(DecodeTxError::Malformed(_))));
    }

    #[test]
    fn tx_hash_text_round_trips() {
        let text = "0x00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff";
        let hash: TxHash = text.parse().unwrap();
        assert_eq!(hash.to_string(), text);
        assert_eq!(TxHash::parse(&text[2..]), Err(TxHashParseError));
        assert_eq!(TxHash::parse(&text[..60]), Err(TxHashParseError));
    }
}
