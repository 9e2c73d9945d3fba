//! The engine's `EvmRail` port over a real node: each hot wallet's signer (its key here, or a signer service), classified sends and reads.

use std::collections::HashMap;

use async_trait::async_trait;
use futures::StreamExt;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Asset, ChainReference, EvmAddress, FeeBid, HotWallet, TxRef};
use payoutd_engine::endpoints::{Endpoint, Endpoints, EndpointsError};
use payoutd_engine::evm::{
    EvmRail, ExpectedTransfer, FinalView, OutgoingScan, OutgoingTx, Receipt, SendOutcome,
    SignError, SignedBytes, WalletAtBlock,
};
use payoutd_engine::rail::ReadError;

use alloy::consensus::TxEip1559;

use crate::rpc::{EvmRpc, ReceiptInfo, RpcError};
use crate::signer::{KmsSigner, RemoteSigner, WalletSignError, WalletSigner};
use crate::tx::{self, Fees, SignedTx, TxHash, TxParams};
use crate::{ERC20_TRANSFER_GAS_LIMIT_DEFAULT, NATIVE_TRANSFER_GAS_LIMIT, SigningKey};

/// Transactions per JSON-RPC batch request when the engine sends several at once. Nodes and
/// gateways cap batches (often at 100 or 1,000 calls); 1 sends each in its own request.
pub const SEND_BATCH_MAX_DEFAULT: usize = 32;
/// Upper bound of the configurable batch size.
pub const SEND_BATCH_MAX_LIMIT: usize = 1_000;

/// One chain's node, with the signing keys of the hot wallets that pay on it.
/// How a chain says which blocks no reorg can take back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finality {
    /// The node's `finalized` block tag (proof-of-stake Ethereum and chains that publish one).
    FinalizedTag,
    /// Blocks on top of a receipt's block, inclusive of it (chains without a finalized tag).
    Depth(u64),
}

/// The gauge of how many blocks each endpoint's head is behind the highest of its chain.
pub const ENDPOINT_LAG_METRIC: &str = "payoutd_rpc_endpoint_lag_blocks";

pub struct EvmNode {
    endpoints: Endpoints<EvmRpc>,
    chain_id: u64,
    finality: Finality,
    max_fee_per_gas_cap: u128,
    erc20_gas_limit: u64,
    send_batch_max: usize,
    signers: HashMap<EvmAddress, WalletSigner>,
}

impl std::fmt::Debug for EvmNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvmNode")
            .field("endpoints", &self.endpoints.hosts())
            .field("chain_id", &self.chain_id)
            .field("signers", &self.signers.values().collect::<Vec<_>>())
            .finish()
    }
}

impl EvmNode {
    /// One batch request's receipts, one outcome per query.
    async fn receipts_chunk(
        &self,
        chunk: &[(TxRef, ExpectedTransfer)],
    ) -> Vec<Result<Option<Receipt>, ReadError>> {
        let hashes: Result<Vec<TxHash>, ReadError> =
            chunk.iter().map(|(hash, _)| parse_hash(hash)).collect();
        let hashes = match hashes {
            Ok(hashes) => hashes,
            Err(e) => return chunk.iter().map(|_| Err(e.clone())).collect(),
        };
        match self.endpoints.read("receipts", |rpc| rpc.receipts_batch(&hashes)).await {
            Ok(answers) => answers
                .into_iter()
                .zip(chunk)
                .map(|(answer, (_, expected))| {
                    Ok(answer.map_err(read_error)?.map(|r| engine_receipt(&r, expected)))
                })
                .collect(),
            // A node without batches: the same reads one by one.
            Err(RpcError::BatchRefused { .. }) => {
                let mut outcomes = Vec::with_capacity(chunk.len());
                for (hash, expected) in chunk {
                    outcomes.push(self.receipt(hash, expected).await);
                }
                outcomes
            }
            // The request failed as a whole: every read of it is unknown.
            Err(e) => chunk.iter().map(|_| Err(read_error(e.clone()))).collect(),
        }
    }

    /// One chunk of transactions to one endpoint: a lone one as a plain call (nodes without batch
    /// support take it), several as a batch, one by one where the batch is refused.
    async fn send_chunk_to(&self, rpc: &EvmRpc, chunk: &[&[u8]]) -> Vec<SendOutcome> {
        if let [raw] = chunk {
            return vec![send_outcome(rpc.send_raw(raw).await)];
        }
        match rpc.send_raw_batch(chunk).await {
            Ok(answers) => answers.into_iter().map(send_outcome).collect(),
            Err(RpcError::BatchRefused { code, message }) => {
                // Nothing was taken, and the same bytes can always go again: one per request.
                tracing::warn!(chain = self.chain_id, host = %rpc.host(), code, %message, "endpoint refused a batch request; sending one by one (set send_batch_max = 1 for this chain)");
                let mut outcomes = Vec::with_capacity(chunk.len());
                for raw in chunk {
                    outcomes.push(send_outcome(rpc.send_raw(raw).await));
                }
                outcomes
            }
            // The request failed as a whole: every transaction in it is unknown.
            Err(e) => chunk.iter().map(|_| send_outcome(Err(e.clone()))).collect(),
        }
    }

    /// Counts a send whose outcome an endpoint left unknown against that endpoint.
    fn count_send_failure(&self, endpoint: usize, answer: &Result<TxHash, RpcError>) {
        if answer.as_ref().is_err_and(RpcError::outcome_unknown) {
            self.endpoints.count_error(endpoint, "send");
        }
    }

    /// The head (or finalized block) one endpoint reports, as the finality rule reads it.
    async fn final_block_of(&self, rpc: &EvmRpc) -> Result<u64, RpcError> {
        match self.finality {
            // A chain without a finalized block yet reads as block 0 with nothing final.
            Finality::FinalizedTag => Ok(rpc.finalized_block().await?.map_or(0, |b| b + 1)),
            Finality::Depth(_) => rpc.block_number().await,
        }
    }

    /// The last final block, from the highest answer of `final_block_of`.
    fn final_of(&self, highest: u64) -> Option<u64> {
        match self.finality {
            Finality::FinalizedTag => highest.checked_sub(1),
            // Block b has head - b + 1 confirmations.
            Finality::Depth(blocks) => (highest + 1).checked_sub(blocks),
        }
    }

    /// A chain served by one endpoint.
    pub fn new(
        rpc: EvmRpc,
        chain_id: u64,
        finality: Finality,
        max_fee_per_gas_cap: u128,
        keys: Vec<SigningKey>,
    ) -> EvmNode {
        EvmNode::over_endpoints(vec![rpc], chain_id, finality, max_fee_per_gas_cap, keys)
            .expect("one endpoint is within the limit")
    }

    /// A chain served by several endpoints (in the configuration's order): reads fail over,
    /// sends go to every one.
    pub fn over_endpoints(
        rpcs: Vec<EvmRpc>,
        chain_id: u64,
        finality: Finality,
        max_fee_per_gas_cap: u128,
        keys: Vec<SigningKey>,
    ) -> Result<EvmNode, EndpointsError> {
        let endpoints = rpcs.into_iter().map(|rpc| Endpoint { host: rpc.host(), client: rpc });
        let endpoints =
            Endpoints::new(format!("evm:{chain_id}"), ENDPOINT_LAG_METRIC, endpoints.collect())?;
        if let Finality::Depth(blocks) = finality {
            assert!(blocks >= 1, "a receipt needs at least its own block");
        }
        let signers = keys.into_iter().map(|k| (k.address(), WalletSigner::Local(k))).collect();
        Ok(EvmNode {
            endpoints,
            chain_id,
            finality,
            max_fee_per_gas_cap,
            erc20_gas_limit: ERC20_TRANSFER_GAS_LIMIT_DEFAULT,
            send_batch_max: SEND_BATCH_MAX_DEFAULT,
            signers,
        })
    }

    /// Transactions per JSON-RPC batch request, within `1..=SEND_BATCH_MAX_LIMIT`; 1 for nodes
    /// that take no batches.
    pub fn with_send_batch_max(mut self, send_batch_max: usize) -> EvmNode {
        assert!(
            (1..=SEND_BATCH_MAX_LIMIT).contains(&send_batch_max),
            "send_batch_max {send_batch_max} out of range"
        );
        self.send_batch_max = send_batch_max;
        self
    }

    /// The endpoint reads go to first.
    pub fn rpc(&self) -> &EvmRpc {
        self.endpoints.preferred()
    }

    /// Adds a wallet whose key a signer service holds; its address must not already have a signer.
    pub fn with_remote_signer(self, signer: RemoteSigner) -> EvmNode {
        self.with_signer(WalletSigner::Remote(signer))
    }

    /// Adds a wallet whose key is an AWS KMS key; its address must not already have a signer.
    pub fn with_kms_signer(self, signer: KmsSigner) -> EvmNode {
        self.with_signer(WalletSigner::Kms(signer))
    }

    fn with_signer(mut self, signer: WalletSigner) -> EvmNode {
        let address = signer.address();
        assert!(self.signers.insert(address, signer).is_none(), "two signers for {address}");
        self
    }

    fn signer(&self, wallet: &HotWallet) -> Result<&WalletSigner, SignError> {
        self.signers.get(&wallet.address).ok_or_else(|| {
            SignError::Refused(format!("no signer configured for {}", wallet.address))
        })
    }

    async fn sign(
        &self,
        wallet: &HotWallet,
        tx: Result<TxEip1559, tx::SignError>,
    ) -> Result<SignedBytes, SignError> {
        let tx = tx.map_err(|e| SignError::Refused(e.to_string()))?;
        match self.signer(wallet)?.sign(tx).await {
            Ok(signed) => Ok(signed_bytes(signed)),
            Err(e @ WalletSignError::Unreachable(_)) => Err(SignError::Unavailable(e.to_string())),
            // The wallet's own bytes exist beside what was asked: the payout keeps its hold and
            // waits, the wallet's signing stops this pass, and a person must look at the signer.
            Err(e @ WalletSignError::Altered(_)) => {
                tracing::error!(wallet = %wallet.address, error = %e, "the signer signed another transaction for this wallet: nothing is released; check the signer");
                Err(SignError::Unavailable(e.to_string()))
            }
            Err(e @ (WalletSignError::Malformed(_) | WalletSignError::Mismatch(_))) => {
                tracing::error!(wallet = %wallet.address, error = %e, "the signer's answer is refused: nothing is stored or sent");
                Err(SignError::Refused(e.to_string()))
            }
        }
    }
}

fn fees(bid: FeeBid) -> Fees {
    Fees {
        max_fee_per_gas: bid.max_fee_per_gas,
        max_priority_fee_per_gas: bid.max_priority_fee_per_gas,
    }
}

fn signed_bytes(signed: SignedTx) -> SignedBytes {
    SignedBytes {
        hash: tx_ref(signed.hash),
        raw: signed.raw,
        fees: FeeBid {
            max_fee_per_gas: signed.fees.max_fee_per_gas,
            max_priority_fee_per_gas: signed.fees.max_priority_fee_per_gas,
        },
    }
}

fn send_outcome(answer: Result<TxHash, RpcError>) -> SendOutcome {
    match answer {
        Ok(_) => SendOutcome::Accepted,
        Err(e) if e.maybe_already_sent() => SendOutcome::MaybeAlreadySent,
        Err(RpcError::ReplacementUnderpriced { .. }) => SendOutcome::SlotHeldByOther,
        Err(RpcError::InsufficientFunds { .. }) => SendOutcome::InsufficientFunds,
        Err(e) if e.outcome_unknown() => SendOutcome::Unknown(e.to_string()),
        Err(e) => SendOutcome::Refused(e.to_string()),
    }
}

/// An EVM hash as the engine's transaction reference: 0x-prefixed lower-case hex, always valid.
fn tx_ref(hash: TxHash) -> TxRef {
    TxRef::parse(&hash.to_string())
        .expect("a 0x-prefixed hex hash is a valid transaction reference")
}

/// Receipt batch requests in flight at once.
pub const RECEIPT_BATCHES_IN_FLIGHT_MAX: usize = 4;

/// Receipts read per JSON-RPC batch request.
pub const RECEIPTS_PER_BATCH_MAX: usize = 100;

fn parse_hash(hash: &TxRef) -> Result<TxHash, ReadError> {
    TxHash::parse(hash.as_str())
        .map_err(|_| ReadError(format!("stored hash {hash} does not parse")))
}

/// What a receipt means for the engine, judged by the engine's own rule.
fn engine_receipt(r: &ReceiptInfo, expected: &ExpectedTransfer) -> Receipt {
    Receipt::judge(&r.facts(), expected)
}

impl EvmNode {
    /// What a native transfer to `to` carries: the reference, to an address without code; nothing
    /// to a contract (or an account delegating to one), whose fallback may refuse data it does not
    /// expect. There the link rests on the stored nonce and hash. A node that cannot say holds the
    /// payout back this pass (signing may not guess).
    async fn native_data(
        &self,
        to: EvmAddress,
        reference: &ChainReference,
    ) -> Result<Vec<u8>, SignError> {
        match self.endpoints.read("code", |rpc| rpc.has_code(to)).await {
            Ok(false) => Ok(reference.as_bytes().to_vec()),
            Ok(true) => Ok(Vec::new()),
            Err(e) => {
                Err(SignError::Unavailable(format!("cannot tell whether {to} holds code: {e}")))
            }
        }
    }
}

fn read_error(e: RpcError) -> ReadError {
    ReadError(e.to_string())
}

#[async_trait]
impl EvmRail for EvmNode {
    fn chain_id(&self) -> u64 {
        self.chain_id
    }

    fn max_fee_per_gas_cap(&self) -> u128 {
        self.max_fee_per_gas_cap
    }

    async fn sign_transfer(
        &self,
        wallet: &HotWallet,
        transfer: &ExpectedTransfer,
        reference: &ChainReference,
        nonce: u64,
        bid: FeeBid,
    ) -> Result<SignedBytes, SignError> {
        let tx = match &transfer.asset.token {
            TokenKind::Native => {
                let data = self.native_data(transfer.to, reference).await?;
                let params = TxParams {
                    chain_id: self.chain_id,
                    nonce,
                    fees: fees(bid),
                    gas_limit: NATIVE_TRANSFER_GAS_LIMIT + tx::calldata_gas(&data),
                };
                tx::native_transfer(&params, transfer.to, transfer.amount, data)
            }
            TokenKind::Erc20(token) => {
                let params = TxParams {
                    chain_id: self.chain_id,
                    nonce,
                    fees: fees(bid),
                    gas_limit: self.erc20_gas_limit,
                };
                let (to, amount) = (transfer.to, transfer.amount);
                tx::erc20_transfer(&params, *token, to, amount, reference.as_bytes())
            }
            TokenKind::Spl(_) | TokenKind::Provider(_) | TokenKind::Other => {
                return Err(SignError::Refused(format!(
                    "asset {} has no token contract configured",
                    transfer.asset.code
                )));
            }
        };
        self.sign(wallet, tx).await
    }

    async fn sign_cancel(
        &self,
        wallet: &HotWallet,
        nonce: u64,
        bid: FeeBid,
    ) -> Result<SignedBytes, SignError> {
        self.sign(wallet, tx::cancel(wallet.address, self.chain_id, nonce, fees(bid))).await
    }

    async fn fee_quote(&self) -> Result<FeeBid, ReadError> {
        let f = self.endpoints.read("fees", EvmRpc::suggest_fees).await.map_err(read_error)?;
        Ok(FeeBid {
            max_fee_per_gas: f.max_fee_per_gas,
            max_priority_fee_per_gas: f.max_priority_fee_per_gas,
        })
    }

    /// The same bytes to every endpoint (each may reach another node's pool; stored bytes make a
    /// second send harmless), and what their answers say together.
    async fn send(&self, raw: &[u8]) -> SendOutcome {
        let answers = self.endpoints.every(|rpc| rpc.send_raw(raw)).await;
        let outcomes = answers.into_iter().enumerate().map(|(endpoint, answer)| {
            self.count_send_failure(endpoint, &answer);
            send_outcome(answer)
        });
        SendOutcome::of_every_endpoint(outcomes.collect())
    }

    async fn send_batch(&self, raws: &[&[u8]]) -> Vec<SendOutcome> {
        let mut outcomes = Vec::with_capacity(raws.len());
        for chunk in raws.chunks(self.send_batch_max) {
            let per_endpoint = self.endpoints.every(|rpc| self.send_chunk_to(rpc, chunk)).await;
            outcomes.extend((0..chunk.len()).map(|i| {
                SendOutcome::of_every_endpoint(per_endpoint.iter().map(|o| o[i].clone()).collect())
            }));
        }
        outcomes
    }

    async fn receipt(
        &self,
        hash: &TxRef,
        expected: &ExpectedTransfer,
    ) -> Result<Option<Receipt>, ReadError> {
        let hash = parse_hash(hash)?;
        let receipt =
            self.endpoints.read("receipt", |rpc| rpc.receipt(hash)).await.map_err(read_error)?;
        Ok(receipt.map(|r| engine_receipt(&r, expected)))
    }

    async fn receipts(
        &self,
        queries: &[(TxRef, ExpectedTransfer)],
    ) -> Vec<Result<Option<Receipt>, ReadError>> {
        // Batches in flight together (answered in order): a node serves reads on several threads.
        let chunks: Vec<_> = queries
            .chunks(RECEIPTS_PER_BATCH_MAX)
            .map(|chunk| self.receipts_chunk(chunk))
            .collect();
        let answers: Vec<Vec<_>> =
            futures::stream::iter(chunks).buffered(RECEIPT_BATCHES_IN_FLIGHT_MAX).collect().await;
        answers.into_iter().flatten().collect()
    }

    async fn final_view(
        &self,
        address: &EvmAddress,
        queries: &[(TxRef, ExpectedTransfer)],
    ) -> Result<FinalView, ReadError> {
        let hashes =
            queries.iter().map(|(hash, _)| parse_hash(hash)).collect::<Result<Vec<_>, _>>()?;
        let Some(block) = self.final_block().await? else {
            return Err(ReadError("no block is final yet: nothing is proven".into()));
        };
        // The whole view from one endpoint that has the block; one behind fails over whole.
        let (nonce, receipts) = self
            .endpoints
            .read("final_view", |rpc| rpc.nonce_and_receipts_at(*address, block, &hashes))
            .await
            .map_err(read_error)?;
        let receipts = receipts
            .iter()
            .zip(queries)
            .map(|(receipt, (_, expected))| receipt.as_ref().map(|r| engine_receipt(r, expected)))
            .collect();
        Ok(FinalView { block, nonce, receipts })
    }

    async fn mined_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        self.endpoints.read("nonce", |rpc| rpc.mined_nonce(*address)).await.map_err(read_error)
    }

    /// Every endpoint is asked: a transaction one pool holds may be mined, so the highest answer
    /// counts; an error only when none answered.
    async fn pending_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        let answers = self.endpoints.every(|rpc| rpc.pending_nonce(*address)).await;
        self.endpoints.highest("pending_nonce", answers).map_err(read_error)
    }

    /// The highest final block any endpoint answers (reads at it fail over past endpoints that
    /// lack it); each endpoint's lag behind it goes to the metrics.
    async fn final_block(&self) -> Result<Option<u64>, ReadError> {
        let answers = self.endpoints.every(|rpc| self.final_block_of(rpc)).await;
        let highest = self.endpoints.highest_head("final_block", answers).map_err(read_error)?;
        Ok(self.final_of(highest))
    }

    async fn final_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError> {
        let Some(last_final) = self.final_block().await? else { return Ok(0) };
        self.endpoints
            .read("nonce", |rpc| rpc.nonce_at(*address, last_final))
            .await
            .map_err(read_error)
    }

    async fn outgoing(
        &self,
        senders: &[EvmAddress],
        from_block: u64,
        to_block: u64,
    ) -> Result<OutgoingScan, ReadError> {
        let (sent, next_block) = self
            .endpoints
            .read("scan", |rpc| rpc.sent_from(senders, from_block, to_block))
            .await
            .map_err(read_error)?;
        let txs = sent
            .into_iter()
            .map(|t| OutgoingTx {
                from: t.from,
                hash: tx_ref(t.hash),
                nonce: t.nonce,
                block: t.block_number,
                reference: tx::carried_reference(&t.input),
            })
            .collect();
        Ok(OutgoingScan { txs, next_block })
    }

    async fn wallet_at(
        &self,
        address: &EvmAddress,
        block: u64,
        assets: &[Asset],
    ) -> Result<WalletAtBlock, ReadError> {
        if let Some(asset) =
            assets.iter().find(|a| !matches!(a.token, TokenKind::Native | TokenKind::Erc20(_)))
        {
            return Err(ReadError(format!("asset {} is not an EVM asset", asset.code)));
        }
        // The nonce and every balance from one endpoint: one view of the block.
        self.endpoints
            .read("wallet", |rpc| wallet_at_block(rpc, *address, block, assets))
            .await
            .map_err(read_error)
    }
}

/// The wallet's nonce and each asset's balance at `block`, all read from `rpc`.
async fn wallet_at_block(
    rpc: &EvmRpc,
    address: EvmAddress,
    block: u64,
    assets: &[Asset],
) -> Result<WalletAtBlock, RpcError> {
    let nonce = rpc.nonce_at(address, block).await?;
    let mut balances = Vec::with_capacity(assets.len());
    for asset in assets {
        balances.push(match &asset.token {
            TokenKind::Erc20(token) => rpc.erc20_balance_at(*token, address, block).await?,
            _ => rpc.balance_at(address, block).await?,
        });
    }
    Ok(WalletAtBlock { nonce, balances })
}
