//! Rail ports: the thin node operations of an EVM chain, and the optional signing guard.
//!
//! The port is deliberately thin (sign, send, read a receipt, read the mined nonce): every
//! decision about what a reply means is made in the engine (`evm_resolve`), so the simulator
//! drives the same reasoning that production runs. A Solana or provider rail gets its own thin
//! port and resolver beside this one and shares the attempt lifecycle and settlement.

use async_trait::async_trait;
use payoutd_domain::{Amount, Asset, Attempt, AttemptSlot, AttemptTx, EvmAddress, FeeBid, HotWallet, Payout, TxRef};

/// Attempts per payout on a chain unless its configuration says otherwise (SPEC 4.5).
pub const ATTEMPTS_PER_PAYOUT_MAX_DEFAULT: u32 = 3;

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

/// A read that failed: it says nothing (an error is never "absent" and never zero).
#[derive(Debug, Clone, thiserror::Error)]
#[error("rail read failed: {0}")]
pub struct ReadError(pub String);

/// A transaction that a final block lists as sent from a hot wallet, whoever signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingTx {
    pub hash: TxRef,
    pub nonce: u64,
    pub block: u64,
}

/// What one scan of a wallet's outgoing transactions saw.
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

    /// Local signing, no I/O: a payout transfer at `nonce`.
    fn sign_transfer(&self, wallet: &HotWallet, transfer: &ExpectedTransfer, nonce: u64, fees: FeeBid) -> Result<SignedBytes, SignError>;
    /// Local signing: a zero-value self-send at `nonce` (the cancel).
    fn sign_cancel(&self, wallet: &HotWallet, nonce: u64, fees: FeeBid) -> Result<SignedBytes, SignError>;

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
    async fn receipt(&self, hash: &TxRef, expected: &ExpectedTransfer) -> Result<Option<Receipt>, ReadError>;
    /// `receipt` for several transactions, one outcome per query in order, in batch requests where
    /// the node takes them. The default reads them one after the other.
    async fn receipts(&self, queries: &[(TxRef, ExpectedTransfer)]) -> Vec<Result<Option<Receipt>, ReadError>> {
        let mut outcomes = Vec::with_capacity(queries.len());
        for (hash, expected) in queries {
            outcomes.push(self.receipt(hash, expected).await);
        }
        outcomes
    }
    /// `eth_getTransactionCount(address, "latest")`: nonces below it are used on chain.
    async fn mined_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError>;
    /// The nonce as of `final_block()`: nonces below it are used by transactions no reorg can take
    /// back (0 while no block is final).
    async fn final_nonce(&self, address: &EvmAddress) -> Result<u64, ReadError>;
    /// The newest block no reorg can take back, as the chain is configured: the node's `finalized`
    /// block tag, or a depth under the head. `None` while no block is final. Every decision that
    /// releases or settles money rests on a block at or below it.
    async fn final_block(&self) -> Result<Option<u64>, ReadError>;
    /// Every transaction sent from `address` in blocks `from_block..=to_block`, read from the blocks
    /// themselves (so it sees what this system never signed).
    async fn outgoing(&self, address: &EvmAddress, from_block: u64, to_block: u64) -> Result<OutgoingScan, ReadError>;
    /// The wallet's nonce and its balance of each of `assets` (this chain's) as of block `block`,
    /// all read at that one block so they describe the same moment.
    async fn wallet_at(&self, address: &EvmAddress, block: u64, assets: &[Asset]) -> Result<WalletAtBlock, ReadError>;
}

/// Attempt n of a payout as a rail without nonces prepares it: its slot and the one transaction or
/// request stored before anything is sent (I4).
#[derive(Debug, Clone)]
pub struct Prepared {
    pub slot: AttemptSlot,
    pub tx: AttemptTx,
}

/// What a rail without nonces said to a submission of stored bytes or a stored request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// Taken; the rail's reference for it when it gives one (a provider's transfer id).
    Accepted { reference: Option<TxRef> },
    /// Anything else: a timeout, a lost answer, a refusal. An earlier copy of the same bytes or
    /// request may still have been taken, so a refusal proves nothing here: the resolver asks the
    /// rail (`status`) before anything is decided.
    NotAccepted(String),
    /// Only from `submit_first`: the rail's answer proves this call created nothing (a provider's
    /// validation refusal), and no other call with the attempt's bytes or key can have been made
    /// (the resolver re-sends only once the first send's outcome is recorded). The engine ends
    /// the attempt at once, before anyone could send it again.
    Refused { proof: String },
}

/// Where a rail without nonces says an attempt stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StandaloneStatus {
    /// Not landed, and still able to.
    Pending,
    /// Landed; `final_` once no reorg or reversal can take it back. `transfer_matches`: it moved
    /// exactly the payout's amount to its destination. `fee_paid`: what it cost the rail's hot
    /// wallet beyond the payout itself, in the rail's native asset (network fee, rent of an account
    /// it created); zero on rails whose source the ledger does not hold.
    Landed { reference: TxRef, final_: bool, transfer_matches: bool, fee_paid: Amount },
    /// Proven never to land (an expired blockhash with a final status check finding nothing, a
    /// provider's failed transfer that moved nothing), with the proof. `cancel_fee_paid`: what the
    /// attempt's landed cancel cost the hot wallet (zero when none landed).
    Dead { proof: String, cancel_fee_paid: Amount },
    /// Landed at the rail's finality and failed there (a Solana transaction with an error): nothing
    /// but its fee moved, and the same bytes can never land again. Like an EVM revert, the payout
    /// waits for a person with a `reverted` incident; this is the proof a `failed` or `retry`
    /// verdict rests on.
    Reverted { reference: TxRef, detail: String, fee_paid: Amount },
    /// The rail answered something it cannot map onto the lifecycle (a provider state it does not
    /// know): the payout needs a person, with an incident; the hold stays.
    Unrecognised { reference: TxRef, detail: String },
}

/// The hot wallet a rail without nonces pays from, when the ledger holds it: its payouts and fees
/// leave that wallet's account, and the balance check compares it with the rail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailWallet {
    /// The hot wallet id (`hot_wallets.id`).
    pub id: String,
    /// Its address on the rail, for logs and incidents.
    pub address: String,
    /// The rail's native asset: what fees are paid in.
    pub native: Asset,
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// Nothing was produced and nothing can be (no key, invalid destination for the rail).
    #[error("refused: {0}")]
    Refused(String),
    /// What preparing needs could not be read (a recent blockhash); try again later.
    #[error(transparent)]
    Unavailable(#[from] ReadError),
}

/// A rail whose attempts are not lined up by nonces (Solana with a blockhash or a durable nonce,
/// provider APIs with an idempotency key): each attempt stands alone. The engine runs the same
/// attempt lifecycle as for EVM (stored before sent, re-sent unchanged, resolved from the rail,
/// settled by `AttemptEnd`); this port only says what the rail answers.
#[async_trait]
pub trait StandaloneRail: Send + Sync + 'static {
    /// For logs and metrics.
    fn name(&self) -> &str;
    /// Attempts one payout may have on this rail: past it, a proven death fails the payout.
    fn attempts_max(&self) -> u32 {
        ATTEMPTS_PER_PAYOUT_MAX_DEFAULT
    }
    /// Attempt `attempt_no` of `payout`, before any database transaction (reads only).
    async fn prepare(&self, payout: &Payout, attempt_no: u32) -> Result<Prepared, PrepareError>;
    /// Sends the attempt's stored transaction or request, unchanged: a re-send, after an earlier
    /// call whose answer may have been lost. A refusal here proves nothing (the earlier call may
    /// have been taken).
    async fn submit(&self, attempt: &Attempt) -> SubmitOutcome;
    /// The first send of an attempt, made by the process that just stored it and before any other
    /// call with its bytes or key could have been made: only this call's refusal can prove that
    /// nothing was created (`SubmitOutcome::Refused`).
    async fn submit_first(&self, attempt: &Attempt) -> SubmitOutcome {
        self.submit(attempt).await
    }
    /// The attempt `prepare` made was not stored (another worker stored the payout's attempt
    /// first): whatever the rail set aside for it (a durable nonce value) is free again.
    fn discarded(&self, attempt: &Attempt) {
        let _ = attempt;
    }
    /// Looks the attempt up. An error is "unknown", never "absent".
    async fn status(&self, attempt: &Attempt, payout: &Payout) -> Result<StandaloneStatus, ReadError>;

    /// The hot wallet whose account the ledger keeps for this rail; `None` for a rail paying from
    /// an account held elsewhere (a provider's), whose payouts settle to the world account.
    fn hot_wallet(&self) -> Option<&RailWallet> {
        None
    }
    /// The hot wallet's balance of each of `assets`, in the order asked, at the commitment payouts
    /// are paid at (what the balance check compares with the ledger).
    async fn wallet_balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, ReadError> {
        let _ = assets;
        Err(ReadError(format!("{} keeps no hot wallet in the ledger", self.name())))
    }

    /// A transaction that, once it lands, proves none of the attempt's transfers ever can (a
    /// durable nonce's advance); stored with the attempt and sent like it. Rails whose attempts end
    /// by themselves (an expiring blockhash) refuse.
    async fn cancel(&self, attempt: &Attempt) -> Result<AttemptTx, PrepareError> {
        Err(PrepareError::Refused(format!("{} cannot cancel attempt {}: it ends by itself (expiry) or by its provider's answer", self.name(), attempt.id)))
    }

    /// The name of this rail's reconciliation cursor (one per account it pays from); `None` when
    /// the rail cannot list what left its account, and then nothing is reconciled on it.
    fn reconcile_cursor_name(&self) -> Option<String> {
        None
    }
    /// References that appeared on the rail's account after `cursor`, at finality, oldest first,
    /// and the cursor after them. Without a cursor the rail names its starting point (what is
    /// there now) and judges nothing before it.
    async fn outgoing_since(&self, cursor: Option<&str>) -> Result<OutgoingSince, ReadError> {
        let _ = cursor;
        Ok(OutgoingSince::default())
    }
    /// Of `refs` (none of them stored by payoutd), those that moved money out of the rail's
    /// account; the others brought money in.
    async fn outgoing_of(&self, refs: &[TxRef]) -> Result<Vec<TxRef>, ReadError> {
        Ok(refs.to_vec())
    }
}

/// One read of what appeared on a rail's account since a cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutgoingSince {
    /// Oldest first.
    pub refs: Vec<TxRef>,
    /// Where the next read starts; `None` leaves the cursor where it is.
    pub cursor: Option<String>,
}

/// Defence in depth against a database that loses its last commits (SPEC 4 step 3): a record,
/// outside the database, of which attempt went out with which hash.
#[async_trait]
pub trait SendGuard: Send + Sync + 'static {
    /// Records `hash` for `attempt_key` unless a record exists; returns the recorded hash.
    async fn record_or_get(&self, attempt_key: &str, hash: &str) -> Result<String, ReadError>;
    /// The recorded hash for `attempt_key`, if any.
    async fn get(&self, attempt_key: &str) -> Result<Option<String>, ReadError>;
}
