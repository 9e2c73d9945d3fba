//! Who signs for a hot wallet: its key in this process, an AWS KMS key, or a signer service that holds the key and answers `eth_signTransaction` (Clef, Web3Signer and the key stores behind them); whatever comes back is checked (the transaction asked, signed by the wallet) before it is kept.

use alloy::consensus::{TxEip1559, TxEnvelope};
use alloy::eips::eip2718::Decodable2718;
use alloy::primitives::TxKind;
use alloy_signer_aws::AwsSigner;
use payoutd_domain::EvmAddress;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::erc20::from_alloy;
use crate::key::SigningKey;
// The SDK's top-level message alone is "service error": its causes say why.
use crate::rpc::{EvmRpc, error_chain};
use crate::tx::{self, SignedTx, decode_raw};

/// What went wrong asking a signer.
#[derive(Debug, thiserror::Error)]
pub enum WalletSignError {
    /// The transaction itself cannot be signed (malformed fees): no signer will ever take it.
    #[error(transparent)]
    Malformed(#[from] tx::SignError),
    /// The signer could not be reached, timed out, or answered with an error: ask again later.
    #[error("signer: {0}")]
    Unreachable(String),
    /// The signer answered with something that is not the wallet's: another signer, or bytes that do
    /// not decode. Never kept, never sent, and nothing of the wallet's exists that could land.
    #[error("signer service answered with a transaction other than the one asked: {0}")]
    Mismatch(String),
    /// The signer answered with a transaction signed by the wallet but not the one asked (another
    /// nonce, amount, recipient or fee). Never kept or sent by payoutd, but those bytes exist and
    /// could land if anyone sends them: nothing may be released on them.
    #[error("signer service signed another transaction for the wallet than the one asked: {0}")]
    Altered(String),
}

/// The signer of one hot wallet.
pub enum WalletSigner {
    /// The key, in this process.
    Local(SigningKey),
    /// A signer service that holds the key.
    Remote(RemoteSigner),
    /// An AWS KMS key.
    Kms(KmsSigner),
}

impl WalletSigner {
    pub fn address(&self) -> EvmAddress {
        match self {
            WalletSigner::Local(key) => key.address(),
            WalletSigner::Remote(remote) => remote.address,
            WalletSigner::Kms(kms) => kms.address,
        }
    }

    pub async fn sign(&self, tx: TxEip1559) -> Result<SignedTx, WalletSignError> {
        match self {
            WalletSigner::Local(key) => Ok(tx::sign_local(key, tx)?),
            WalletSigner::Remote(remote) => remote.sign(tx).await,
            // Boxed: the SDK's futures nest too deep to lay out inline in every caller.
            WalletSigner::Kms(kms) => Box::pin(kms.sign(tx)).await,
        }
    }
}

impl std::fmt::Debug for WalletSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalletSigner::Local(key) => write!(f, "Local({})", key.address()),
            WalletSigner::Remote(remote) => write!(f, "Remote({})", remote.address),
            WalletSigner::Kms(kms) => write!(f, "Kms({})", kms.address),
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
        let answer: SignAnswer = self
            .rpc
            .call("eth_signTransaction", json!([self.request(&tx)]))
            .await
            .map_err(|e| WalletSignError::Unreachable(e.to_string()))?;
        let raw_hex = match answer {
            SignAnswer::Raw(raw) | SignAnswer::WithTx { raw } => raw,
        };
        let digits = raw_hex.strip_prefix("0x").unwrap_or(&raw_hex);
        let raw = hex::decode(digits)
            .map_err(|e| WalletSignError::Mismatch(format!("raw bytes are not hex: {e}")))?;
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
        checked(self.address, asked, raw)
    }
}

/// `raw` is kept only when it is exactly `asked`, signed by `address`.
fn checked(
    address: EvmAddress,
    asked: &TxEip1559,
    raw: &[u8],
) -> Result<SignedTx, WalletSignError> {
    let decoded = decode_raw(raw).map_err(|e| WalletSignError::Mismatch(e.to_string()))?;
    if decoded.signer != address {
        return Err(WalletSignError::Mismatch(format!(
            "signed by {}, not {address}",
            decoded.signer
        )));
    }
    let envelope = TxEnvelope::decode_2718(&mut &raw[..])
        .map_err(|e| WalletSignError::Mismatch(e.to_string()))?;
    let signed =
        envelope.as_eip1559().ok_or_else(|| WalletSignError::Mismatch("not EIP-1559".into()))?;
    if signed.tx() != asked {
        return Err(WalletSignError::Altered(format!(
            "fields differ (nonce {} asked {})",
            signed.tx().nonce,
            asked.nonce
        )));
    }
    Ok(tx::signed_tx(envelope))
}

/// A hot wallet whose key is an AWS KMS key (key spec `ECC_SECG_P256K1`, usage `SIGN_VERIFY`):
/// KMS signs each transaction's hash; the key never leaves it.
pub struct KmsSigner {
    client: aws_sdk_kms::Client,
    key_id: String,
    address: EvmAddress,
    /// Made on first use (it reads the key's public key from KMS), so a KMS that cannot be
    /// reached at start delays payouts instead of stopping the process.
    signer: tokio::sync::OnceCell<AwsSigner>,
}

impl std::fmt::Debug for KmsSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KmsSigner({}, {})", self.key_id, self.address)
    }
}

impl KmsSigner {
    /// The KMS key `key_id` (an id, ARN or alias), expected to be the key of `address`.
    pub fn new(client: aws_sdk_kms::Client, key_id: String, address: EvmAddress) -> KmsSigner {
        KmsSigner { client, key_id, address, signer: tokio::sync::OnceCell::new() }
    }

    /// A KMS client with the standard AWS credential chain (environment, profile, web identity,
    /// container and instance roles), in `region`, at `endpoint_url` when one is given (a VPC
    /// endpoint, or a local KMS in tests).
    pub async fn client(region: &str, endpoint_url: Option<&str>) -> aws_sdk_kms::Client {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(region.to_owned()));
        if let Some(url) = endpoint_url {
            loader = loader.endpoint_url(url);
        }
        aws_sdk_kms::Client::new(&loader.load().await)
    }

    /// The address the KMS key `key_id` signs for, read from KMS (its public key).
    pub async fn key_address(
        client: &aws_sdk_kms::Client,
        key_id: &str,
    ) -> Result<EvmAddress, WalletSignError> {
        let signer = Box::pin(AwsSigner::new(client.clone(), key_id.to_owned(), None)).await;
        let signer = signer.map_err(|e| {
            WalletSignError::Unreachable(format!("KMS key {key_id}: {}", error_chain(&e)))
        })?;
        Ok(from_alloy(alloy::signers::Signer::address(&signer)))
    }

    async fn signer(&self, chain_id: Option<u64>) -> Result<&AwsSigner, WalletSignError> {
        let made = self
            .signer
            .get_or_try_init(|| AwsSigner::new(self.client.clone(), self.key_id.clone(), chain_id))
            .await;
        made.map_err(|e| {
            WalletSignError::Unreachable(format!("KMS key {}: {}", self.key_id, error_chain(&e)))
        })
    }

    async fn sign(&self, mut tx: TxEip1559) -> Result<SignedTx, WalletSignError> {
        let signer = self.signer(Some(tx.chain_id)).await?;
        let key_address = from_alloy(alloy::signers::Signer::address(signer));
        if key_address != self.address {
            return Err(WalletSignError::Mismatch(format!(
                "KMS key {} signs for {key_address}, not {}",
                self.key_id, self.address
            )));
        }
        let asked = tx.clone();
        let signature =
            alloy::network::TxSigner::sign_transaction(signer, &mut tx).await.map_err(|e| {
                WalletSignError::Unreachable(format!(
                    "KMS key {}: {}",
                    self.key_id,
                    error_chain(&e)
                ))
            })?;
        let raw = alloy::eips::eip2718::Encodable2718::encoded_2718(&TxEnvelope::Eip1559(
            alloy::consensus::SignableTransaction::into_signed(tx, signature),
        ));
        // KMS returns (r, s) alone and the parity is recovered here: checked like any signer's answer.
        checked(self.address, &asked, &raw)
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
        let params = TxParams {
            chain_id: 31_337,
            nonce,
            fees: Fees { max_fee_per_gas: 2_000, max_priority_fee_per_gas: 100 },
            gas_limit: 21_000,
        };
        tx::native_transfer(
            &params,
            EvmAddress::parse("0x70997970C51812dc3A010C7d01b50e0d17dc79C8").unwrap(),
            payoutd_domain::Amount::from_u128(5),
            Vec::new(),
        )
        .unwrap()
    }

    #[test]
    fn the_answer_asked_for_is_kept_and_any_other_is_refused() {
        let key = SigningKey::from_hex(KEY).unwrap();
        let signer = remote(key.address());
        let good = tx::sign_local(&key, transfer(7)).unwrap();
        assert_eq!(signer.checked(&transfer(7), &good.raw).unwrap(), good);
        let other_nonce = tx::sign_local(&key, transfer(8)).unwrap();
        assert!(
            matches!(
                signer.checked(&transfer(7), &other_nonce.raw),
                Err(WalletSignError::Altered(_))
            ),
            "the wallet's own bytes, altered"
        );
        let other_key =
            tx::sign_local(&SigningKey::from_hex(OTHER_KEY).unwrap(), transfer(7)).unwrap();
        assert!(matches!(
            signer.checked(&transfer(7), &other_key.raw),
            Err(WalletSignError::Mismatch(_))
        ));
        assert!(matches!(
            signer.checked(&transfer(7), b"\x02junk"),
            Err(WalletSignError::Mismatch(_))
        ));
    }
}
