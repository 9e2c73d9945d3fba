//! The EVM family's port: the thin node operations of one EVM chain (sign, send, read a receipt, read the mined nonce).
//!
//! Every decision about what a reply means is made in the family's reasoning (`evm::resolve`), so
//! the simulator drives the same reasoning that production runs.

use async_trait::async_trait;
use payoutd_domain::{Amount, Asset, ChainReference, EvmAddress, FeeBid, HotWallet, TxRef};

use crate::rail::{ATTEMPTS_PER_PAYOUT_MAX_DEFAULT, ReadError};

/// Bytes signed for one transaction, with the hash they will have on chain.
#[derive(Clone, PartialEq, Eq)]
pub struct SignedBytes {
    /// 0x-prefixed lower-case hex.
    pub hash: TxRef,
    pub raw: Vec<u8>,
    pub fees: FeeBid,
}

impl std::fmt::Debug for SignedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignedBytes({}, {} bytes)", self.hash, self.raw.len())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The signer refused (no key for this wallet, bad parameters): nothing was produced.
    #[error("signer refused: {0}")]
    Refused(String),
    /// The signer could not be reached, or gave an answer that may not be kept but may not be
    /// ruled out either (the wallet's own bytes for another transaction): the payout waits,
    /// unchanged, with its hold, for the next pass.
    #[error("signer unavailable: {0}")]
    Unavailable(String),
}

/// What a node said to `eth_sendRawTransaction`, classified at the adapter boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    Accepted,
    /// "already known" / "already imported" / "nonce too low": maybe ours. Look the hashes up.
    MaybeAlreadySent,
    /// "replacement transaction underpriced": a *different* transaction holds this nonce in the pool.
    SlotHeldByOther,
    /// The sending account cannot pay for these bytes (value plus gas): not in that pool now; they
    /// may be accepted once the wallet is funded.
    InsufficientFunds,
    /// Refused outright (fee below base fee, ...): these bytes are not in that pool now.
    Refused(String),
    /// Timeout, lost connection, unreadable answer: the node may or may not have them.
    Unknown(String),
}

impl SendOutcome {
    /// How strongly the answer says the bytes may be in a pool: the answers of several endpoints
    /// together say the strongest of them (one pool holding the bytes is enough to mine them).
    fn presence_rank(&self) -> u8 {
        match self {
            SendOutcome::Accepted => 5,
            SendOutcome::MaybeAlreadySent => 4,
            SendOutcome::Unknown(_) => 3,
            SendOutcome::SlotHeldByOther => 2,
            SendOutcome::InsufficientFunds => 1,
            SendOutcome::Refused(_) => 0,
        }
    }

    /// What the answers of every endpoint to one send say together: the bytes are absent only
    /// when every endpoint said so, and in doubt wherever any endpoint left them in doubt.
    pub fn of_every_endpoint(outcomes: Vec<SendOutcome>) -> SendOutcome {
        outcomes
            .into_iter()
            .reduce(
                |kept, next| if next.presence_rank() > kept.presence_rank() { next } else { kept },
            )
            .expect("a send goes to at least one endpoint")
    }
}

/// A transaction that a final block lists as sent from a hot wallet, whoever signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingTx {
    /// The hot wallet it was sent from.
    pub from: EvmAddress,
    pub hash: TxRef,
    pub nonce: u64,
    pub block: u64,
    /// The reference its data carries where payoutd's transfers put one (after a token call's
    /// arguments; a native transfer's whole data), read by the rail; `None` where no reference
    /// can be. Any 16 bytes read so are only a candidate: a reference is ours when it is one of
    /// our payouts' under the deployment's key.
    pub reference: Option<ChainReference>,
}

/// What one scan of the hot wallets' outgoing transactions saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingScan {
    pub txs: Vec<OutgoingTx>,
    /// The first block not scanned (the rail may stop before the end of the asked range).
    pub next_block: u64,
}

/// A mined transaction of ours, as far as the engine cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub block: u64,
    /// Execution status 1.
    pub succeeded: bool,
    /// For a payout transaction: the token's Transfer(from, to, amount) log (ERC-20) or the plain value
    /// transfer (native) is there. Meaningless for a cancel.
    pub transfer_matches: bool,
    /// What it moved to the payout's destination in the payout's asset (the token's Transfer logs
    /// from the wallet to it, or the value of a plain transfer that succeeded): zero for a cancel
    /// or a failed transaction.
    pub moved: Amount,
    /// What the transaction cost its sender in the chain's native asset (gas used times the
    /// effective gas price): booked as a `fee` journal when the attempt settles.
    pub fee_paid: Amount,
}

/// A hot wallet as a final block shows it: what the balance check compares with the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletAtBlock {
    /// Transactions mined from the wallet up to the block (its nonce there).
    pub nonce: u64,
    /// Its balance of each asset asked for, in the order asked.
    pub balances: Vec<Amount>,
}

/// What a proof of death reads: the final block, the wallet's nonce there and the receipts of the
/// attempt's transactions, every answer from one node that has that block. A receipt `None` here
/// is no receipt on the chain up to the final block, never the silence of a replica behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalView {
    pub block: u64,
    /// Transactions mined from the wallet up to `block`.
    pub nonce: u64,
    /// One per query, in order.
    pub receipts: Vec<Option<Receipt>>,
}

/// The transfer a payout transaction must perform, for the receipt check.
#[derive(Debug, Clone)]
pub struct ExpectedTransfer {
    pub asset: Asset,
    pub from: EvmAddress,
    pub to: EvmAddress,
    pub amount: Amount,
}

#[async_trait]
pub trait EvmRail: Send + Sync + 'static {
    fn chain_id(&self) -> u64;
    /// Attempts one payout may have on this chain: past it, a proven death fails the payout.
    fn attempts_max(&self) -> u32 {
        ATTEMPTS_PER_PAYOUT_MAX_DEFAULT
    }
    /// No transaction of ours bids more than this per gas, whatever the market says.
    fn max_fee_per_gas_cap(&self) -> u128;

    /// A payout transfer at `nonce`, signed by the wallet's signer (a key in this process, or a
    /// signer service that holds it); never sent. It carries `reference` where the transfer can
    /// (after a token call's arguments; as a native transfer's data to an address without code).
    async fn sign_transfer(
        &self,
        wallet: &HotWallet,
        transfer: &ExpectedTransfer,
        reference: &ChainReference,
        nonce: u64,
        fees: FeeBid,
    ) -> Result<SignedBytes, SignError>;
    /// A zero-value self-send at `nonce` (the cancel), signed like `sign_transfer`.
    async fn sign_cancel(
        &self,
        wallet: &HotWallet,
        nonce: u64,
        fees: FeeBid,
    ) -> Result<SignedBytes, SignError>;

    async fn fee_quote(&self) -> Result<FeeBid, ReadError>;
    async fn send(&self, raw: &[u8]) -> SendOutcome;
    /// Sends several signed transactions, in one round trip where the node takes batches: one
    /// outcome per input, in input order. The default sends them one after the other.
    async fn send_batch(&self, raws: &[&[u8]]) -> Vec<SendOutcome> {
        let mut outcomes = Vec::with_capacity(raws.len());
        for raw in raws {
            outcomes.push(self.send(raw).await);
        }
        outcomes
    }
    /// `Ok(None)`: the node knows no receipt for this hash (yet, or any more after a reorg).
    async fn receipt(
        &self,
        hash: &TxRef,
        expected: &ExpectedTransfer,
    ) -> Result<Option<Receipt>, ReadError>;
    /// `receipt` for several transactions, one outcome per query in order, in batch requests where
    /// the node takes them. The default reads them one after the other.
    async fn receipts(
        &self,
        queries: &[(TxRef, ExpectedTransfer)],
    ) -> Vec<Result<Option<Receipt>, ReadError>> {
        let mut outcomes = Vec::with_capacity(queries.len());
        for (hash, expected) in queries {
            outcomes.push(self.receipt(hash, expected).await);
        }
        outcomes
    }
    /// The wallet's final nonce and the receipts of `queries` as one node that has the final block
    /// answers them. An error when no block is final yet or when no such node answered (a node
    /// behind the final block, an endpoint that takes no batches): unknown, never absent.
    async fn final_view(
        &self,
        address: &EvmAddress,
        queries: &[(TxRef, ExpectedTransfer)],
    ) -> Result<FinalView, ReadError>;
    /// `eth_getTransactionCount(address, "latest")`: nonces below it are used on chain.
    async fn mined_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError>;
    /// `eth_getTransactionCount(address, "pending")`, the highest any endpoint answers: nonces
    /// below it are used on chain or held by a node's pool. Read only to prove the database is
    /// not behind the chain (never to choose a nonce: nonces come from the database).
    async fn pending_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError>;
    /// The nonce as of `final_block()`: nonces below it are used by transactions no reorg can take
    /// back (0 while no block is final).
    async fn final_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError>;
    /// The newest block no reorg can take back, as the chain is configured: the node's `finalized`
    /// block tag, or a depth under the head. `None` while no block is final. Every decision that
    /// releases or settles money rests on a block at or below it.
    async fn final_block(&self) -> Result<Option<u64>, ReadError>;
    /// Every transaction sent from any of `senders` in blocks `from_block..=to_block`, read from the
    /// blocks themselves (so it sees what this system never signed). Each block is read once for
    /// all the senders: a block is the expensive read, not the filter.
    async fn outgoing(
        &self,
        senders: &[EvmAddress],
        from_block: u64,
        to_block: u64,
    ) -> Result<OutgoingScan, ReadError>;
    /// The wallet's nonce and its balance of each of `assets` (this chain's) as of block `block`,
    /// all read at that one block so they describe the same moment.
    async fn wallet_at(
        &self,
        address: &EvmAddress,
        block: u64,
        assets: &[Asset],
    ) -> Result<WalletAtBlock, ReadError>;
}

#[cfg(test)]
mod tests {
    use super::SendOutcome;

    #[test]
    fn the_bytes_are_absent_only_when_every_endpoint_says_so() {
        let refused = || SendOutcome::Refused("fee too low".into());
        let unknown = || SendOutcome::Unknown("timed out".into());
        assert_eq!(SendOutcome::of_every_endpoint(vec![refused(), unknown()]), unknown());
        assert_eq!(
            SendOutcome::of_every_endpoint(vec![unknown(), SendOutcome::Accepted, refused()]),
            SendOutcome::Accepted
        );
        assert_eq!(
            SendOutcome::of_every_endpoint(vec![SendOutcome::InsufficientFunds, refused()]),
            SendOutcome::InsufficientFunds
        );
        assert_eq!(
            SendOutcome::of_every_endpoint(vec![
                SendOutcome::SlotHeldByOther,
                SendOutcome::MaybeAlreadySent
            ]),
            SendOutcome::MaybeAlreadySent
        );
        assert_eq!(SendOutcome::of_every_endpoint(vec![refused()]), refused());
    }
}
