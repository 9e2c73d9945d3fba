//! Who signs for a hot wallet: its key in this process, or a signer service that holds the key and answers `eth_signTransaction` (Clef, Web3Signer and the KMS, Vault and HSM key stores behind them), whose answer is checked field by field before it is kept.

use alloy::consensus::{TxEip1559, TxEnvelope};
use alloy::eips::eip2718::Decodable2718;
use alloy::primitives::TxKind;
use payoutd_domain::EvmAddress;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::erc20::from_alloy;
use crate::key::SigningKey;
use crate::rpc::{EvmRpc, RpcError};
use crate::tx::{self, decode_raw, SignedTx};

/// What went wrong asking a signer.
#[derive(Debug, thiserror::Error)]
pub enum WalletSignError {
    /// The transaction itself cannot be signed (malformed fees): no signer will ever take it.
    #[error(transparent)]
    Malformed(#[from] tx::SignError),
    /// The signer could not be reached, timed out, or answered with an error: ask again later.
    #[error("signer service: {0}")]
    Unreachable(RpcError),
    /// The signer answered with something other than what was asked: another transaction, another
    /// signer, or bytes that do not decode. Never kept, never sent.
    #[error("signer service answered with a transaction other than the one asked: {0}")]
    Mismatch(String),
}

/// The signer of one hot wallet.
pub enum WalletSigner {
    /// The key, in this process.
    Local(SigningKey),
    /// A signer service that holds the key.
    Remote(RemoteSigner),
}

impl WalletSigner {
    pub fn address(&self) -> EvmAddress {
        match self {
            WalletSigner::Local(key) => key.address(),
            WalletSigner::Remote(remote) => remote.address,
        }
    }

    pub async fn sign(&self, tx: TxEip1559) -> Result<SignedTx, WalletSignError> {
        match self {
            WalletSigner::Local(key) => Ok(tx::sign_local(key, tx)?),
            WalletSigner::Remote(remote) => remote.sign(tx).await,
        }
    }
}

impl std::fmt::Debug for WalletSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalletSigner::Local(key) => write!(f, "Local({})", key.address()),
            WalletSigner::Remote(remote) => write!(f, "Remote({})", remote.address),
        }
    }
}

/// A signer service reached over JSON-RPC (its URL is kept like a node's: never printed).
#[derive(Debug)]
pub struct RemoteSigner {
    rpc: EvmRpc,
    address: EvmAddress,
}

/// `eth_signTransaction` answers: Clef's object carries the raw bytes beside the decoded
/// transaction; Web3Signer and the nodes that sign answer the raw bytes alone.
#[derive(Deserialize)]
#[serde(untagged)]
enum SignAnswer {
    Raw(String),
    WithTx { raw: String },
}

impl RemoteSigner {
    /// The service at `rpc` that signs for `address`.
    pub fn new(rpc: EvmRpc, address: EvmAddress) -> RemoteSigner {
        RemoteSigner { rpc, address }
    }

    async fn sign(&self, tx: TxEip1559) -> Result<SignedTx, WalletSignError> {
        let answer: SignAnswer = self.rpc.call("eth_signTransaction", json!([self.request(&tx)])).await.map_err(WalletSignError::Unreachable)?;
        let raw_hex = match answer {
            SignAnswer::Raw(raw) | SignAnswer::WithTx { raw } => raw,
        };
        let digits = raw_hex.strip_prefix("0x").unwrap_or(&raw_hex);
        let raw = hex::decode(digits).map_err(|e| WalletSignError::Mismatch(format!("raw bytes are not hex: {e}")))?;
        self.checked(&tx, &raw)
    }

    /// What the service is asked to sign, in the transaction-request form geth, Clef and
    /// Web3Signer share (quantities as hex, the calldata as `data`).
    fn request(&self, tx: &TxEip1559) -> Value {
        let to = match tx.to {
            TxKind::Call(to) => Value::String(from_alloy(to).to_string()),
            TxKind::Create => Value::Null,
        };
        json!({
            "type": "0x2",
            "from": self.address.to_string(),
            "to": to,
            "chainId": format!("{:#x}", tx.chain_id),
            "nonce": format!("{:#x}", tx.nonce),
            "gas": format!("{:#x}", tx.gas_limit),
            "maxFeePerGas": format!("{:#x}", tx.max_fee_per_gas),
            "maxPriorityFeePerGas": format!("{:#x}", tx.max_priority_fee_per_gas),
            "value": format!("{:#x}", tx.value),
            "data": format!("0x{}", hex::encode(&tx.input)),
            "accessList": [],
        })
    }

    /// The answer is kept only when it is exactly the transaction asked for, signed by this
    /// wallet: a signer that changed a field (or signs with another key) could pay someone else
    /// or take a nonce the line does not know about.
    fn checked(&self, asked: &TxEip1559, raw: &[u8]) -> Result<SignedTx, WalletSignError> {
        let decoded = decode_raw(raw).map_err(|e| WalletSignError::Mismatch(e.to_string()))?;
        if decoded.signer != self.address {
            return Err(WalletSignError::Mismatch(format!("signed by {}, not {}", decoded.signer, self.address)));
        }
        let envelope = TxEnvelope::decode_2718(&mut &raw[..]).map_err(|e| WalletSignError::Mismatch(e.to_string()))?;
        let signed = envelope.as_eip1559().ok_or_else(|| WalletSignError::Mismatch("not EIP-1559".into()))?;
        if signed.tx() != asked {
            return Err(WalletSignError::Mismatch(format!("fields differ (nonce {} asked {})", signed.tx().nonce, asked.nonce)));
        }
        Ok(tx::signed_tx(envelope))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::{Fees, TxParams};

    const KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
    const OTHER_KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

    fn remote(address: EvmAddress) -> RemoteSigner {
        RemoteSigner::new(EvmRpc::new("http://127.0.0.1:9").unwrap(), address)
    }

    fn transfer(nonce: u64) -> TxEip1559 {
        let params = TxParams { chain_id: 31_337, nonce, fees: Fees { max_fee_per_gas: 2_000, max_priority_fee_per_gas: 100 }, gas_limit: 21_000 };
        tx::native_transfer(&params, EvmAddress::parse("0x70997970C51812dc3A010C7d01b50e0d17dc79C8").unwrap(), payoutd_domain::Amount::from_u128(5)).unwrap()
    }

    #[test]
    fn the_answer_asked_for_is_kept_and_any_other_is_refused() {
        let key = SigningKey::from_hex(KEY).unwrap();
        let signer = remote(key.address());
        let good = tx::sign_local(&key, transfer(7)).unwrap();
        assert_eq!(signer.checked(&transfer(7), &good.raw).unwrap(), good);
        let other_nonce = tx::sign_local(&key, transfer(8)).unwrap();
        assert!(matches!(signer.checked(&transfer(7), &other_nonce.raw), Err(WalletSignError::Mismatch(_))));
        let other_key = tx::sign_local(&SigningKey::from_hex(OTHER_KEY).unwrap(), transfer(7)).unwrap();
        assert!(matches!(signer.checked(&transfer(7), &other_key.raw), Err(WalletSignError::Mismatch(_))));
        assert!(matches!(signer.checked(&transfer(7), b"\x02junk"), Err(WalletSignError::Mismatch(_))));
    }
}
