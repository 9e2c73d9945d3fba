//! JSON-RPC client for one EVM node, classifying every failure into a kind the engine can act on.

use std::fmt;
use std::time::Duration;

use alloy::primitives::{Address, B256, Bytes, U64, U128, U256};
use alloy::rpc::client::RpcClient;
use alloy::transports::{TransportError, TransportErrorKind};
use payoutd_domain::{Amount, EvmAddress};
use payoutd_engine::evm::{ReceiptFacts, TransferLog};
use payoutd_engine::rail::answers_at;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::erc20::{
    balance_of_calldata, decode_balance_of, from_alloy, topic_address, transfer_topic,
};
use crate::tx::{Fees, TxHash};

/// Whole-call budget (connect, send, wait, read). Past it the outcome is unknown, never failed.
pub const RPC_CALL_TIMEOUT_MS: u64 = 10_000;
/// TCP/TLS connect budget; shorter than the call budget so a dead node is noticed quickly.
pub const RPC_CONNECT_TIMEOUT_MS: u64 = 3_000;
/// The longest answer read from a node: a batch of receipts or a block with its transactions is
/// a few MiB at most; anything longer is cut and counted as undecodable (the outcome unknown).
pub const RPC_ANSWER_BYTES_MAX: usize = 32 << 20;
/// `max_fee = base_fee * this + priority`: 2x survives about six consecutive full blocks
/// (+12.5 % each) before the transaction is priced out and needs a replacement.
pub const BASE_FEE_HEADROOM_MULTIPLIER: u128 = 2;
#[path = "rpc_error.rs"]
mod error;
pub(crate) use error::error_chain;
pub use error::{RPC_ERROR_MESSAGE_MAX_CHARS, RpcError, classify_node_error};
use error::{node_error, truncate};
#[path = "rpc_transport.rs"]
mod transport;
use transport::{Failure, NodeHttp};

#[derive(Debug, thiserror::Error)]
pub enum RpcSetupError {
    #[error("node URL is not a valid http(s) URL")]
    InvalidUrl,
    #[error("HTTP client could not be built: {0}")]
    Client(String),
    #[error("the bearer token holds characters an HTTP header cannot carry")]
    InvalidToken,
}

/// A client for one node URL: alloy's `RpcClient` (request ids, batch framing, answers matched
/// to calls) over [`NodeHttp`], with every failure classified here into an [`RpcError`]. Build it
/// once and clone it: clones share one connection pool.
#[derive(Clone)]
pub struct EvmRpc {
    client: RpcClient,
    url: reqwest::Url,
    call_timeout_ms: u64,
}

impl fmt::Debug for EvmRpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EvmRpc({}://{})", self.url.scheme(), self.host())
    }
}

/// A mined receipt, reduced to what resolution and reconciliation read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptInfo {
    pub tx_hash: TxHash,
    /// Status 1. A reverted transaction still consumed its nonce.
    pub status_ok: bool,
    pub block_number: u64,
    /// Compared with the canonical block at this height to notice reorgs.
    pub block_hash: [u8; 32],
    pub from: EvmAddress,
    pub to: Option<EvmAddress>,
    pub contract_address: Option<EvmAddress>,
    pub gas_used: u64,
    pub effective_gas_price: u128,
    /// An OP Stack chain's L1 data fee (the receipt's `l1Fee`), zero where the chain charges none.
    pub l1_fee: U256,
    pub logs: Vec<LogInfo>,
}

impl ReceiptInfo {
    /// What the transaction cost its sender in wei: gas used times the effective gas price (the
    /// execution fee), plus the L1 data fee an OP Stack chain reports beside it.
    pub fn fee_paid(&self) -> Amount {
        let execution = U256::from(self.gas_used) * U256::from(self.effective_gas_price);
        Amount::from_u256(execution.saturating_add(self.l1_fee))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogInfo {
    pub address: EvmAddress,
    pub topics: Vec<[u8; 32]>,
    pub data: Vec<u8>,
}

impl ReceiptInfo {
    /// What the receipt says, before any judgement: the engine judges it (`Receipt::judge`), the
    /// same code the simulator's chain is judged by. Logs that are not a well-formed ERC-20
    /// `Transfer` (three topics, addresses zero-padded, a 32-byte value) are left out.
    pub fn facts(&self) -> ReceiptFacts {
        ReceiptFacts {
            block: self.block_number,
            status_ok: self.status_ok,
            from: self.from,
            to: self.to,
            transfer_logs: self.logs.iter().filter_map(LogInfo::transfer).collect(),
            fee_paid: self.fee_paid(),
        }
    }
}

impl LogInfo {
    /// This log as an ERC-20 `Transfer(from, to, value)`, if it is one.
    fn transfer(&self) -> Option<TransferLog> {
        let [signature, from, to] = self.topics.as_slice() else { return None };
        if *signature != transfer_topic().0 {
            return None;
        }
        let value = <[u8; 32]>::try_from(self.data.as_slice()).ok()?;
        Some(TransferLog {
            token: self.address,
            from: topic_address(from)?,
            to: topic_address(to)?,
            amount: Amount::from_u256(U256::from_be_bytes(value)),
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawReceipt {
    transaction_hash: B256,
    block_number: Option<U64>,
    block_hash: Option<B256>,
    // Pre-Byzantium receipts carry a state root instead; treated as not ok.
    #[serde(default)]
    status: Option<U64>,
    from: Address,
    to: Option<Address>,
    #[serde(default)]
    contract_address: Option<Address>,
    gas_used: U64,
    #[serde(default)]
    effective_gas_price: Option<U128>,
    #[serde(default)]
    logs: Vec<RawLog>,
    /// The L1 data fee an OP Stack chain (Base, Optimism) charges on top of the execution fee;
    /// absent on other chains and on the L2's deposit transactions.
    #[serde(default)]
    l1_fee: Option<U256>,
}

#[derive(Deserialize)]
struct RawLog {
    address: Address,
    topics: Vec<B256>,
    data: Bytes,
    // Set on logs of a block that a reorg removed.
    #[serde(default)]
    removed: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawHeader {
    #[serde(default)]
    base_fee_per_gas: Option<U128>,
}

/// A receipt as the node sent it, reduced to what resolution reads; `None` until it is in a block.
fn receipt_info(raw: RawReceipt) -> Option<ReceiptInfo> {
    let (Some(block_number), Some(block_hash)) = (raw.block_number, raw.block_hash) else {
        return None;
    };
    Some(ReceiptInfo {
        tx_hash: TxHash::from_bytes(raw.transaction_hash.0),
        status_ok: raw.status == Some(U64::from(1)),
        block_number: block_number.to(),
        block_hash: block_hash.0,
        from: from_alloy(raw.from),
        to: raw.to.map(from_alloy),
        contract_address: raw.contract_address.map(from_alloy),
        gas_used: raw.gas_used.to(),
        effective_gas_price: raw.effective_gas_price.map(|p| p.to()).unwrap_or_default(),
        l1_fee: raw.l1_fee.unwrap_or_default(),
        logs: raw
            .logs
            .into_iter()
            .filter(|log| !log.removed)
            .map(|log| LogInfo {
                address: from_alloy(log.address),
                topics: log.topics.into_iter().map(|t| t.0).collect(),
                data: log.data.to_vec(),
            })
            .collect(),
    })
}

/// A call's result as `T`; an answer of the wrong shape is undecodable (the outcome unknown).
fn decode<T: DeserializeOwned>(method: &'static str, raw: &RawValue) -> Result<T, RpcError> {
    serde_json::from_str(raw.get()).map_err(|e| RpcError::Decode { method, detail: e.to_string() })
}

fn hex_quantity(value: u64) -> String {
    format!("{value:#x}")
}

fn hex_bytes(bytes: &[u8]) -> String {
    format!("0x{}", hex::encode(bytes))
}

fn address_param(address: EvmAddress) -> String {
    hex_bytes(address.as_bytes())
}

impl EvmRpc {
    /// A client with the default per-call budget [`RPC_CALL_TIMEOUT_MS`].
    pub fn new(url: &str) -> Result<EvmRpc, RpcSetupError> {
        EvmRpc::with_timeout(url, RPC_CALL_TIMEOUT_MS)
    }

    pub fn with_timeout(url: &str, call_timeout_ms: u64) -> Result<EvmRpc, RpcSetupError> {
        EvmRpc::with_headers(url, call_timeout_ms, reqwest::header::HeaderMap::new())
    }

    /// A client that sends `Authorization: Bearer <token>` with every call (a signer service's
    /// caller token), marked sensitive so that no log or debug print of a request shows it.
    pub fn with_bearer_token(url: &str, token: &str) -> Result<EvmRpc, RpcSetupError> {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| RpcSetupError::InvalidToken)?;
        value.set_sensitive(true);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, value);
        EvmRpc::with_headers(url, RPC_CALL_TIMEOUT_MS, headers)
    }

    fn with_headers(
        url: &str,
        call_timeout_ms: u64,
        headers: reqwest::header::HeaderMap,
    ) -> Result<EvmRpc, RpcSetupError> {
        let url = reqwest::Url::parse(url).map_err(|_| RpcSetupError::InvalidUrl)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(RpcSetupError::InvalidUrl);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(Duration::from_millis(call_timeout_ms))
            .connect_timeout(Duration::from_millis(RPC_CONNECT_TIMEOUT_MS.min(call_timeout_ms)))
            .build()
            .map_err(|e| RpcSetupError::Client(error_chain(&e.without_url())))?;
        let client = RpcClient::new(NodeHttp { http, url: url.clone() }, false);
        Ok(EvmRpc { client, url, call_timeout_ms })
    }

    /// The node's host and port, never its path or query: those of hosted nodes carry API keys.
    pub fn host(&self) -> String {
        let host = self.url.host_str().unwrap_or("?");
        match self.url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        }
    }

    /// One JSON-RPC call; `T` may be `Option<_>` for methods that answer `null`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: Value,
    ) -> Result<T, RpcError> {
        let raw: Box<RawValue> =
            self.client.request(method, params).await.map_err(|e| self.classify(method, e))?;
        decode(method, &raw)
    }

    /// Broadcasts signed bytes; the answer is the node's hash for them.
    pub async fn send_raw(&self, raw: &[u8]) -> Result<TxHash, RpcError> {
        let hash: B256 = self.call("eth_sendRawTransaction", json!([hex_bytes(raw)])).await?;
        Ok(TxHash::from_bytes(hash.0))
    }

    /// Broadcasts several signed transactions in one JSON-RPC batch request (one HTTP round trip):
    /// one result per input, in input order; an entry missing from the answer is unknown. `Err`
    /// when the request failed as a whole: no answer in time, a transport failure or an answer
    /// that does not parse (the node may have taken any of them: unknown), or one error object for
    /// the whole batch (a node or gateway that takes no batches: it took none of them).
    pub async fn send_raw_batch(
        &self,
        raws: &[&[u8]],
    ) -> Result<Vec<Result<TxHash, RpcError>>, RpcError> {
        let params = raws.iter().map(|raw| json!([hex_bytes(raw)])).collect();
        let answers: Vec<Result<B256, RpcError>> =
            self.call_batch("eth_sendRawTransaction", params).await?;
        Ok(answers.into_iter().map(|a| a.map(|hash| TxHash::from_bytes(hash.0))).collect())
    }

    /// One JSON-RPC batch request of `method` with each of `params`: one result per entry, in
    /// order; an entry the answer lacks or that does not parse is a decode error of its own, and one
    /// error object for the whole batch (a node or gateway that takes no batches) is `BatchRefused`.
    async fn call_batch<T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: Vec<Value>,
    ) -> Result<Vec<Result<T, RpcError>>, RpcError> {
        if params.is_empty() {
            return Ok(Vec::new());
        }
        let mut batch = self.client.new_batch();
        let waiters = params
            .iter()
            .map(|p| batch.add_call::<Value, Box<RawValue>>(method, p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.classify(method, e))?;
        batch.send().await.map_err(|e| self.classify(method, e))?;
        let mut answers = Vec::with_capacity(waiters.len());
        for waiter in waiters {
            answers.push(match waiter.await {
                Ok(raw) => decode(method, &raw),
                Err(e) => Err(self.classify(method, e)),
            });
        }
        Ok(answers)
    }

    /// Every failure alloy hands back, as the kind the engine acts on: an error object by its
    /// text ([`classify_node_error`]), the transport's own failures by what they say about the
    /// outcome, and anything else unknown (the node may have acted).
    fn classify(&self, method: &'static str, error: TransportError) -> RpcError {
        match error {
            TransportError::ErrorResp(payload) => node_error(method, &payload),
            TransportError::Transport(TransportErrorKind::MissingBatchResponse(id)) => {
                RpcError::Decode {
                    method,
                    detail: format!("no answer for request id {id} in the batch"),
                }
            }
            TransportError::Transport(TransportErrorKind::Custom(custom)) => {
                match custom.downcast::<Failure>().map(|failure| *failure) {
                    Ok(Failure::Timeout) => {
                        RpcError::Timeout { method, timeout_ms: self.call_timeout_ms }
                    }
                    Ok(Failure::BatchRefused { code, message }) => {
                        RpcError::BatchRefused { code, message: truncate(&message) }
                    }
                    Ok(Failure::Undecodable(detail)) => RpcError::Decode { method, detail },
                    Ok(failure) => RpcError::Transport { method, detail: failure.to_string() },
                    Err(other) => RpcError::Transport { method, detail: error_chain(&*other) },
                }
            }
            other => RpcError::Transport { method, detail: error_chain(&other) },
        }
    }

    /// Receipts of several transactions in one batch request, one per hash in order (`None` while
    /// pending, dropped or never seen); errors as for `send_raw_batch`.
    pub async fn receipts_batch(
        &self,
        hashes: &[TxHash],
    ) -> Result<Vec<Result<Option<ReceiptInfo>, RpcError>>, RpcError> {
        let params = hashes.iter().map(|h| json!([h.to_string()])).collect();
        let answers: Vec<Result<Option<RawReceipt>, RpcError>> =
            self.call_batch("eth_getTransactionReceipt", params).await?;
        Ok(answers.into_iter().map(|a| a.map(|raw| raw.and_then(receipt_info))).collect())
    }

    /// The account's nonce at `block` and the receipts of `hashes`, in one batch request after
    /// the node's head: one node answers all of it (an endpoint balances requests, not the entries
    /// of one), and that node has `block`, or the whole read is `NodeBehind`. A `None` receipt here
    /// is no receipt on that node's chain up to `block`: what a proof of death may rest on.
    pub async fn nonce_and_receipts_at(
        &self,
        address: EvmAddress,
        block: u64,
        hashes: &[TxHash],
    ) -> Result<(u64, Vec<Option<ReceiptInfo>>), RpcError> {
        const METHOD: &str = "eth_getTransactionReceipt";
        let mut batch = self.client.new_batch();
        let head = batch
            .add_call::<Value, Box<RawValue>>("eth_blockNumber", &json!([]))
            .map_err(|e| self.classify("eth_blockNumber", e))?;
        let nonce = batch
            .add_call::<Value, Box<RawValue>>(
                "eth_getTransactionCount",
                &json!([address_param(address), hex_quantity(block)]),
            )
            .map_err(|e| self.classify("eth_getTransactionCount", e))?;
        let receipts = hashes
            .iter()
            .map(|h| batch.add_call::<Value, Box<RawValue>>(METHOD, &json!([h.to_string()])))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.classify(METHOD, e))?;
        batch.send().await.map_err(|e| self.classify(METHOD, e))?;
        let head: U64 = decode(
            "eth_blockNumber",
            &head.await.map_err(|e| self.classify("eth_blockNumber", e))?,
        )?;
        answers_at(head.to(), block)
            .map_err(|behind| RpcError::NodeBehind { head: behind.at, needed: behind.needed })?;
        let count = nonce.await.map_err(|e| self.classify("eth_getTransactionCount", e))?;
        let nonce: U64 = decode("eth_getTransactionCount", &count)?;
        let mut found = Vec::with_capacity(receipts.len());
        for waiter in receipts {
            let raw: Option<RawReceipt> =
                decode(METHOD, &waiter.await.map_err(|e| self.classify(METHOD, e))?)?;
            found.push(raw.and_then(receipt_info));
        }
        Ok((nonce.to(), found))
    }

    /// The receipt, or `None` while the transaction is pending, dropped or never seen.
    pub async fn receipt(&self, hash: TxHash) -> Result<Option<ReceiptInfo>, RpcError> {
        let raw: Option<RawReceipt> =
            self.call("eth_getTransactionReceipt", json!([hash.to_string()])).await?;
        Ok(raw.and_then(receipt_info))
    }

    /// Whether the node knows the hash at all, pending or mined.
    pub async fn transaction_known(&self, hash: TxHash) -> Result<bool, RpcError> {
        let found: Option<Value> =
            self.call("eth_getTransactionByHash", json!([hash.to_string()])).await?;
        Ok(found.is_some())
    }

    /// Transactions mined from `address` and held in the node's pool
    /// (`eth_getTransactionCount(address, "pending")`): never a nonce to sign at (nonces come
    /// from the database), only the proof that the database is not behind the chain.
    pub async fn pending_nonce(&self, address: EvmAddress) -> Result<u64, RpcError> {
        let count: U64 = self
            .call("eth_getTransactionCount", json!([address_param(address), "pending"]))
            .await?;
        Ok(count.to())
    }

    /// Transactions mined from `address` (`eth_getTransactionCount(address, "latest")`).
    pub async fn mined_nonce(&self, address: EvmAddress) -> Result<u64, RpcError> {
        let count: U64 =
            self.call("eth_getTransactionCount", json!([address_param(address), "latest"])).await?;
        Ok(count.to())
    }

    /// The account's nonce as of block `block` (its transactions in blocks up to it).
    pub async fn nonce_at(&self, address: EvmAddress, block: u64) -> Result<u64, RpcError> {
        let count: U64 = self
            .call("eth_getTransactionCount", json!([address_param(address), hex_quantity(block)]))
            .await?;
        Ok(count.to())
    }

    /// Whether `address` holds code at the latest block (a contract, or an account delegating
    /// to one): such an address may refuse a call with data it does not expect.
    pub async fn has_code(&self, address: EvmAddress) -> Result<bool, RpcError> {
        let code: String =
            self.call("eth_getCode", json!([address_param(address), "latest"])).await?;
        Ok(!matches!(code.trim(), "" | "0x" | "0X"))
    }

    /// The node's `finalized` block; `None` while it has none (a fresh chain).
    pub async fn finalized_block(&self) -> Result<Option<u64>, RpcError> {
        #[derive(serde::Deserialize)]
        struct Header {
            number: U64,
        }
        let header: Option<Header> =
            self.call("eth_getBlockByNumber", json!(["finalized", false])).await?;
        Ok(header.map(|h| h.number.to()))
    }

    pub async fn block_number(&self) -> Result<u64, RpcError> {
        let number: U64 = self.call("eth_blockNumber", json!([])).await?;
        Ok(number.to())
    }

    pub async fn chain_id(&self) -> Result<u64, RpcError> {
        let id: U64 = self.call("eth_chainId", json!([])).await?;
        Ok(id.to())
    }

    /// Fees for a new transaction: the node's suggested tip, and a cap of
    /// [`BASE_FEE_HEADROOM_MULTIPLIER`] times the latest base fee plus that tip.
    pub async fn suggest_fees(&self) -> Result<Fees, RpcError> {
        const METHOD: &str = "eth_getBlockByNumber";
        let block: Option<RawHeader> = self.call(METHOD, json!(["latest", false])).await?;
        let base_fee = block
            .and_then(|b| b.base_fee_per_gas)
            .ok_or(RpcError::Decode {
                method: METHOD,
                detail: "latest block has no baseFeePerGas (pre-London chain?)".into(),
            })?
            .to::<u128>();
        let priority: U128 = self.call("eth_maxPriorityFeePerGas", json!([])).await?;
        let priority = priority.to::<u128>();
        Ok(Fees {
            max_fee_per_gas: base_fee
                .saturating_mul(BASE_FEE_HEADROOM_MULTIPLIER)
                .saturating_add(priority),
            max_priority_fee_per_gas: priority,
        })
    }

    /// Native balance in wei at the latest block.
    pub async fn balance(&self, address: EvmAddress) -> Result<Amount, RpcError> {
        self.balance_tagged(address, json!("latest")).await
    }

    /// Native balance in wei as of block `block`.
    pub async fn balance_at(&self, address: EvmAddress, block: u64) -> Result<Amount, RpcError> {
        self.balance_tagged(address, json!(hex_quantity(block))).await
    }

    async fn balance_tagged(
        &self,
        address: EvmAddress,
        block_tag: Value,
    ) -> Result<Amount, RpcError> {
        let wei: U256 =
            self.call("eth_getBalance", json!([address_param(address), block_tag])).await?;
        Ok(Amount::from_u256(wei))
    }

    /// `token.balanceOf(owner)` at the latest block.
    pub async fn erc20_balance(
        &self,
        token: EvmAddress,
        owner: EvmAddress,
    ) -> Result<Amount, RpcError> {
        self.erc20_balance_tagged(token, owner, json!("latest")).await
    }

    /// `token.balanceOf(owner)` as of block `block`.
    pub async fn erc20_balance_at(
        &self,
        token: EvmAddress,
        owner: EvmAddress,
        block: u64,
    ) -> Result<Amount, RpcError> {
        self.erc20_balance_tagged(token, owner, json!(hex_quantity(block))).await
    }

    async fn erc20_balance_tagged(
        &self,
        token: EvmAddress,
        owner: EvmAddress,
        block_tag: Value,
    ) -> Result<Amount, RpcError> {
        const METHOD: &str = "eth_call";
        let call =
            json!({ "to": address_param(token), "input": hex_bytes(&balance_of_calldata(owner)) });
        let output: Bytes = self.call(METHOD, json!([call, block_tag])).await?;
        let balance = decode_balance_of(&output).ok_or_else(|| RpcError::Decode {
            method: METHOD,
            detail: format!("balanceOf returned {} bytes", output.len()),
        })?;
        Ok(Amount::from_u256(balance))
    }

    /// Gas the node expects a call to use (no headroom added).
    pub async fn estimate_gas(
        &self,
        from: EvmAddress,
        to: EvmAddress,
        value: Amount,
        input: &[u8],
    ) -> Result<u64, RpcError> {
        let call = json!({
            "from": address_param(from),
            "to": address_param(to),
            "value": format!("{:#x}", value.as_u256()),
            "input": hex_bytes(input),
        });
        let gas: U64 = self.call("eth_estimateGas", json!([call])).await?;
        Ok(gas.to())
    }
}

#[path = "rpc_scan.rs"]
mod scan;
pub use scan::{OUTGOING_SCAN_MAX_BLOCKS, ObservedTx, OutgoingScan, SentTx};

#[cfg(test)]
#[path = "rpc_tests.rs"]
mod tests;
