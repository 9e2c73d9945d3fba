//! The node's blocks read back: every transaction a watched address sent, from full blocks, so the scan sees what this system never signed.

use alloy::primitives::{Address, B256, Bytes, U64, U256};
use payoutd_domain::{Amount, EvmAddress};
use serde::Deserialize;
use serde_json::json;

use super::{EvmRpc, RpcError, hex_quantity};
use crate::erc20::{decode_transfer_calldata, from_alloy, to_alloy};
use crate::tx::TxHash;

/// Most blocks one `outgoing_transactions` call reads; callers continue from `next_block`.
pub const OUTGOING_SCAN_MAX_BLOCKS: u64 = 1_000;

/// A mined transaction sent by the scanned account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedTx {
    pub hash: TxHash,
    pub nonce: u64,
    pub from: EvmAddress,
    /// `None` for a contract creation.
    pub to: Option<EvmAddress>,
    pub value: Amount,
    pub input: Vec<u8>,
    pub block_number: u64,
    pub status_ok: bool,
}

impl ObservedTx {
    /// `(recipient, amount)` when the input is an ERC-20 `transfer` call (the token is `to`).
    pub fn erc20_transfer_call(&self) -> Option<(EvmAddress, Amount)> {
        decode_transfer_calldata(&self.input)
    }
}

/// One bounded page of a scan; continue from `next_block`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingScan {
    pub transactions: Vec<ObservedTx>,
    /// First block not scanned: past `to_block`, past the chain head, or cut by
    /// [`OUTGOING_SCAN_MAX_BLOCKS`].
    pub next_block: u64,
}

/// A transaction a block lists as sent by a watched address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentTx {
    pub from: EvmAddress,
    pub hash: TxHash,
    pub nonce: u64,
    pub block_number: u64,
    /// The transaction's data (a token call's calldata, a native transfer's data).
    pub input: Vec<u8>,
}

/// A block fetched with full transaction objects (`eth_getBlockByNumber(n, true)`).
#[derive(Deserialize)]
struct RawFullBlock {
    #[serde(default)]
    transactions: Vec<RawTx>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTx {
    hash: B256,
    nonce: U64,
    from: Address,
    to: Option<Address>,
    value: U256,
    input: Bytes,
}

impl EvmRpc {
    /// Every transaction sent by `from` in blocks `from_block..=to_block`, read from full
    /// blocks (so it sees transfers this system never signed), with each one's receipt status, at
    /// most [`OUTGOING_SCAN_MAX_BLOCKS`] blocks per call.
    pub async fn outgoing_transactions(
        &self,
        from: EvmAddress,
        from_block: u64,
        to_block: u64,
    ) -> Result<OutgoingScan, RpcError> {
        const METHOD: &str = "eth_getBlockByNumber";
        let (sent, next_block) = self.sent_in_blocks(&[from], from_block, to_block).await?;
        let mut transactions = Vec::with_capacity(sent.len());
        for (block_number, tx) in sent {
            let hash = TxHash::from_bytes(tx.hash.0);
            let receipt = self.receipt(hash).await?.ok_or_else(|| RpcError::Decode {
                method: METHOD,
                detail: format!("block {block_number} lists {hash} but the node has no receipt (reorg in progress?)"),
            })?;
            transactions.push(ObservedTx {
                hash,
                nonce: tx.nonce.to(),
                from,
                to: tx.to.map(from_alloy),
                value: Amount::from_u256(tx.value),
                input: tx.input.to_vec(),
                block_number,
                status_ok: receipt.status_ok,
            });
        }
        Ok(OutgoingScan { transactions, next_block })
    }

    /// Sender, hash, nonce and block of every transaction sent by any of `senders` in blocks
    /// `from_block..=to_block` (no receipts read), each block read once, at most
    /// [`OUTGOING_SCAN_MAX_BLOCKS`] blocks per call; with the first block not scanned.
    pub async fn sent_from(
        &self,
        senders: &[EvmAddress],
        from_block: u64,
        to_block: u64,
    ) -> Result<(Vec<SentTx>, u64), RpcError> {
        let (sent, next_block) = self.sent_in_blocks(senders, from_block, to_block).await?;
        let sent = sent
            .into_iter()
            .map(|(block_number, tx)| SentTx {
                from: from_alloy(tx.from),
                hash: TxHash::from_bytes(tx.hash.0),
                nonce: tx.nonce.to(),
                block_number,
                input: tx.input.to_vec(),
            })
            .collect();
        Ok((sent, next_block))
    }

    async fn sent_in_blocks(
        &self,
        senders: &[EvmAddress],
        from_block: u64,
        to_block: u64,
    ) -> Result<(Vec<(u64, RawTx)>, u64), RpcError> {
        const METHOD: &str = "eth_getBlockByNumber";
        let last = to_block.min(from_block.saturating_add(OUTGOING_SCAN_MAX_BLOCKS - 1));
        let senders: Vec<Address> = senders.iter().map(|s| to_alloy(*s)).collect();
        let mut sent = Vec::new();
        let mut next_block = from_block;
        while next_block <= last {
            let block: Option<RawFullBlock> =
                self.call(METHOD, json!([hex_quantity(next_block), true])).await?;
            // Past the head: stop here and let the caller come back for the rest.
            let Some(block) = block else { break };
            sent.extend(
                block
                    .transactions
                    .into_iter()
                    .filter(|tx| senders.contains(&tx.from))
                    .map(|tx| (next_block, tx)),
            );
            next_block += 1;
        }
        Ok((sent, next_block))
    }
}
