//! Attempts (one try at satisfying a payout on a rail), their slots and transactions, hot wallets and incidents.

use std::fmt;

use crate::address::EvmAddress;
use crate::ids::{AttemptId, IncidentId, PayoutId};
use crate::status::AttemptStatus;

/// A hot wallet: one signing account on one chain. `next_nonce` is the database's counter,
/// the only source of EVM nonces (never `eth_getTransactionCount(pending)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotWallet {
    pub id: String,
    pub chain_id: u64,
    pub address: EvmAddress,
    pub next_nonce: u64,
}

impl HotWallet {
    pub fn id_for(chain_id: u64, address: &EvmAddress) -> String {
        format!("hw_{chain_id}_{}", hex::encode(address.as_bytes()))
    }
}

/// EIP-1559 fee bid of one transaction; replacements must raise both fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeeBid {
    pub max_fee_per_gas: u128,
    pub max_priority_fee_per_gas: u128,
}

/// Basis points in a whole (100%).
pub const BPS_PER_WHOLE: u32 = 10_000;

impl FeeBid {
    /// Both fields raised by at least `bump_bps` (rounded up, at least one wei), as nodes require.
    pub fn bumped(self, bump_bps: u32) -> FeeBid {
        let bump = |v: u128| {
            let raised = v
                .saturating_mul(u128::from(BPS_PER_WHOLE + bump_bps))
                .div_ceil(u128::from(BPS_PER_WHOLE));
            raised.max(v.saturating_add(1))
        };
        FeeBid {
            max_fee_per_gas: bump(self.max_fee_per_gas),
            max_priority_fee_per_gas: bump(self.max_priority_fee_per_gas),
        }
    }

    /// Field-wise maximum: a new send at a nonce must outbid everything already sent at it.
    pub fn max(self, other: FeeBid) -> FeeBid {
        FeeBid {
            max_fee_per_gas: self.max_fee_per_gas.max(other.max_fee_per_gas),
            max_priority_fee_per_gas: self
                .max_priority_fee_per_gas
                .max(other.max_priority_fee_per_gas),
        }
    }

    pub fn capped(self, max_fee_cap: u128) -> FeeBid {
        FeeBid {
            max_fee_per_gas: self.max_fee_per_gas.min(max_fee_cap),
            max_priority_fee_per_gas: self.max_priority_fee_per_gas.min(max_fee_cap),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxKind {
    Original,
    Replacement,
    Cancel,
}

impl TxKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TxKind::Original => "original",
            TxKind::Replacement => "replacement",
            TxKind::Cancel => "cancel",
        }
    }

    pub fn parse(text: &str) -> Option<TxKind> {
        match text {
            "original" => Some(TxKind::Original),
            "replacement" => Some(TxKind::Replacement),
            "cancel" => Some(TxKind::Cancel),
            _ => None,
        }
    }
}

/// Longest transaction reference any rail uses (a Solana signature is 88 base58 characters; provider
/// references are ids of a few dozen).
pub const TX_REF_MAX_LEN: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a transaction reference is 1 to {TX_REF_MAX_LEN} printable ASCII characters")]
pub struct TxRefError;

/// What a rail calls one transaction or request: an EVM transaction hash (0x-prefixed lower-case
/// hex), a Solana signature, a provider's transfer id.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxRef(String);

impl TxRef {
    pub fn parse(text: &str) -> Result<TxRef, TxRefError> {
        let fits = !text.is_empty()
            && text.len() <= TX_REF_MAX_LEN
            && text.bytes().all(|b| b.is_ascii_graphic());
        if fits { Ok(TxRef(text.to_owned())) } else { Err(TxRefError) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TxRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TxRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TxRef({})", self.0)
    }
}

/// An EVM attempt's place: one hot wallet's nonce. Every transaction of the attempt (original,
/// replacements, cancel) shares it, so at most one of them can ever be mined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvmSlot {
    pub wallet_id: String,
    pub nonce: u64,
}

/// Until when a Solana transaction can land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SolanaExpiry {
    /// A recent blockhash: dead once the chain's block height passes this and a final status check
    /// still finds none of the attempt's signatures.
    LastValidBlockHeight(u64),
    /// A durable nonce account: dead once the nonce is advanced past the attempt's value.
    /// `value` is the nonce value signed against (base58; empty for attempts stored before it
    /// was kept): the store holds one attempt per account and value. `signed_at_block_height` is
    /// the block height read just before signing: nothing of the attempt can have landed below it.
    DurableNonce { account: String, value: String, signed_at_block_height: u64 },
}

/// Where an attempt sits on its rail: what makes its transactions exclusive of each other, and what
/// proves it dead. The engine's lifecycle, settlement, the ledger, events and the API never look
/// inside; each rail's reasoning does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptSlot {
    Evm(EvmSlot),
    Solana {
        fee_payer: String,
        expiry: SolanaExpiry,
    },
    /// A provider API: the idempotency key sent with every retry, the provider's reference once
    /// the response that carries it is recorded, and the hot wallet row standing for the provider
    /// account it pays from when the ledger keeps that account (`None`: an account held elsewhere).
    Provider {
        provider: String,
        idempotency_key: String,
        reference: Option<TxRef>,
        wallet: Option<String>,
        /// When the provider first answered a call with an error it saved for the key (Stripe's
        /// and Coinbase's saved 5xx), on the database's clock: no call with the key can create
        /// anything since, so lookups decide the attempt without waiting out the key window.
        key_spent_at_ms: Option<i64>,
        /// How long after the attempt began a create may still be sent, fixed when the attempt is
        /// made (the rail's resend horizon then): lookups read the transfers created until a margin
        /// after it, whatever the configuration says later. `None` for attempts made before it was
        /// stored: their creates could go on until a margin before the key window's end.
        creates_for_ms: Option<i64>,
    },
}

/// `attempts.rail` of each slot kind.
pub const RAIL_EVM: &str = "evm";
pub const RAIL_SOLANA: &str = "solana";
pub const RAIL_PROVIDER: &str = "provider";

impl AttemptSlot {
    /// The rail family, as stored in `attempts.rail`.
    pub fn rail(&self) -> &'static str {
        match self {
            AttemptSlot::Evm(_) => RAIL_EVM,
            AttemptSlot::Solana { .. } => RAIL_SOLANA,
            AttemptSlot::Provider { .. } => RAIL_PROVIDER,
        }
    }

    /// The hot wallet (its row id) the attempt pays from, on rails whose source the ledger holds:
    /// an EVM wallet, the Solana fee payer (the wallet that also sends the transfer), or a
    /// provider account the ledger keeps.
    pub fn paying_wallet(&self) -> Option<&str> {
        match self {
            AttemptSlot::Evm(slot) => Some(&slot.wallet_id),
            AttemptSlot::Solana { fee_payer, .. } => Some(fee_payer),
            AttemptSlot::Provider { wallet, .. } => wallet.as_deref(),
        }
    }

    /// The rail's own id of the one transfer the attempt made, once recorded, on rails that name a
    /// transfer apart from the reference the attempt stored (a provider's transfer id): any other
    /// transfer carrying the attempt's reference is a second one.
    pub fn transfer_id(&self) -> Option<&TxRef> {
        match self {
            AttemptSlot::Provider { reference, .. } => reference.as_ref(),
            AttemptSlot::Evm(_) | AttemptSlot::Solana { .. } => None,
        }
    }

    /// A Solana attempt's expiry; `None` on other rails.
    pub fn solana_expiry(&self) -> Option<&SolanaExpiry> {
        match self {
            AttemptSlot::Solana { expiry, .. } => Some(expiry),
            _ => None,
        }
    }

    pub fn as_evm(&self) -> Option<&EvmSlot> {
        match self {
            AttemptSlot::Evm(slot) => Some(slot),
            _ => None,
        }
    }
}

/// One signed transaction of an attempt, stored before it is ever sent (I4).
#[derive(Clone, PartialEq, Eq)]
pub struct AttemptTx {
    pub hash: TxRef,
    pub kind: TxKind,
    pub raw: Vec<u8>,
    /// The EIP-1559 bid of an EVM transaction; `None` on rails without one.
    pub fees: Option<FeeBid>,
    pub created_at_ms: i64,
}

impl fmt::Debug for AttemptTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttemptTx")
            .field("hash", &self.hash)
            .field("kind", &self.kind)
            .field("raw_bytes", &self.raw.len())
            .field("fees", &self.fees)
            .finish()
    }
}

/// One try at satisfying a payout on one rail, in the lifecycle every rail shares (created -> signed
/// -> broadcast -> confirmed, or dead with its proof, or reverted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub id: AttemptId,
    pub payout_id: PayoutId,
    pub attempt_no: u32,
    pub status: AttemptStatus,
    pub slot: AttemptSlot,
    /// Every transaction ever signed for this attempt, oldest first.
    pub txs: Vec<AttemptTx>,
    /// A transaction seen mined (block, reference): below finality while live (cleared if a reorg
    /// drops it), the final one once the attempt ended.
    pub mined: Option<(u64, TxRef)>,
    pub last_sent_at_ms: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl Attempt {
    /// The highest fees ever sent at this attempt's nonce (payout transfers and cancels alike).
    pub fn highest_fees(&self) -> FeeBid {
        self.txs.iter().filter_map(|tx| tx.fees).fold(FeeBid::default(), FeeBid::max)
    }

    /// The transaction to re-send when nothing landed: the latest one, which outbids the others.
    pub fn latest_tx(&self) -> &AttemptTx {
        self.txs.last().expect("a stored attempt has at least its original transaction")
    }

    pub fn has_cancel(&self) -> bool {
        self.txs.iter().any(|t| t.kind == TxKind::Cancel)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IncidentKind {
    /// A transaction of ours was mined and reverted: nonce used, payment not made; a person decides.
    Reverted,
    /// The wallet's mined nonce passed ours and none of our hashes landed.
    NonceConsumedByUnknownTx,
    /// A transfer out of a hot wallet matches no attempt.
    UnmatchedTransfer,
    /// Two transfers landed for one payout.
    DuplicateTransfer,
    /// A landed transaction does not carry the transfer it should (wrong log, wrong amount).
    TransferMismatch,
    /// A node refused a hot wallet's transaction for want of funds: the wallet's line is paused
    /// (payouts wait, none fails) until it is funded.
    HotWalletLowBalance,
    /// The send guard remembers an attempt (maybe sent) that the database does not have.
    LostAttempt,
    /// A hot wallet's balance on its chain differs from what the ledger says it holds: units left
    /// or arrived that no payout, fee or recorded funding explains.
    BalanceMismatch,
    /// A provider answered with a state the rail does not know: a person decides, never a guess.
    ProviderStateUnrecognised,
    /// An attempt still live past the configured age: its rail could not settle it either way (a
    /// lookup that cannot reach an answer, a chain that cannot be read); a person looks.
    AttemptUnresolved,
    /// A hot wallet's line holds transactions on its chain beyond what the database records (lost
    /// commits: a failover, a restore; or its key used elsewhere): the line does not sign until
    /// every such transaction is final and read back.
    RecordsBehindChain,
}

impl IncidentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentKind::Reverted => "reverted",
            IncidentKind::NonceConsumedByUnknownTx => "nonce_consumed_by_unknown_tx",
            IncidentKind::UnmatchedTransfer => "unmatched_transfer",
            IncidentKind::DuplicateTransfer => "duplicate_transfer",
            IncidentKind::TransferMismatch => "transfer_mismatch",
            IncidentKind::HotWalletLowBalance => "hot_wallet_low_balance",
            IncidentKind::LostAttempt => "lost_attempt",
            IncidentKind::BalanceMismatch => "balance_mismatch",
            IncidentKind::ProviderStateUnrecognised => "provider_state_unrecognised",
            IncidentKind::AttemptUnresolved => "attempt_unresolved",
            IncidentKind::RecordsBehindChain => "records_behind_chain",
        }
    }

    pub const ALL: [IncidentKind; 11] = [
        IncidentKind::Reverted,
        IncidentKind::NonceConsumedByUnknownTx,
        IncidentKind::UnmatchedTransfer,
        IncidentKind::DuplicateTransfer,
        IncidentKind::TransferMismatch,
        IncidentKind::HotWalletLowBalance,
        IncidentKind::LostAttempt,
        IncidentKind::BalanceMismatch,
        IncidentKind::ProviderStateUnrecognised,
        IncidentKind::AttemptUnresolved,
        IncidentKind::RecordsBehindChain,
    ];

    pub fn parse(text: &str) -> Option<IncidentKind> {
        IncidentKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incident {
    pub id: IncidentId,
    pub kind: IncidentKind,
    pub payout_id: Option<PayoutId>,
    pub attempt_id: Option<AttemptId>,
    pub detail: String,
    pub resolution: Option<String>,
    pub created_at_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bump_raises_both_fields_by_at_least_the_percentage() {
        let bid = FeeBid { max_fee_per_gas: 1_000, max_priority_fee_per_gas: 7 };
        let bumped = bid.bumped(1_250);
        assert_eq!(bumped, FeeBid { max_fee_per_gas: 1_125, max_priority_fee_per_gas: 8 });
        let zero = FeeBid::default().bumped(1_250);
        assert_eq!(zero, FeeBid { max_fee_per_gas: 1, max_priority_fee_per_gas: 1 });
        assert_eq!(
            bid.max(FeeBid { max_fee_per_gas: 5, max_priority_fee_per_gas: 9 }),
            FeeBid { max_fee_per_gas: 1_000, max_priority_fee_per_gas: 9 }
        );
    }

    #[test]
    fn tx_refs_are_short_printable_and_never_empty() {
        for good in [
            "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed5aaeb6053f3e94c9b9a09f33",
            "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnb",
            "tr_1Nv0",
        ] {
            assert_eq!(TxRef::parse(good).unwrap().as_str(), good);
        }
        let long = "a".repeat(TX_REF_MAX_LEN + 1);
        for bad in ["", "has space", "tab\t", "é", long.as_str()] {
            assert!(TxRef::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn slots_name_their_rail_and_only_evm_has_a_nonce() {
        let evm = AttemptSlot::Evm(EvmSlot { wallet_id: "hw_1".into(), nonce: 7 });
        assert_eq!((evm.rail(), evm.as_evm().map(|s| s.nonce)), ("evm", Some(7)));
        let sol = AttemptSlot::Solana {
            fee_payer: "payer".into(),
            expiry: SolanaExpiry::LastValidBlockHeight(9),
        };
        let provider = AttemptSlot::Provider {
            provider: "circle".into(),
            idempotency_key: "k".into(),
            reference: None,
            wallet: None,
            key_spent_at_ms: None,
            creates_for_ms: None,
        };
        assert_eq!((sol.rail(), provider.rail()), ("solana", "provider"));
        assert!(sol.as_evm().is_none() && provider.as_evm().is_none());
    }

    #[test]
    fn incident_kinds_round_trip() {
        for k in [
            "reverted",
            "nonce_consumed_by_unknown_tx",
            "unmatched_transfer",
            "duplicate_transfer",
            "transfer_mismatch",
            "hot_wallet_low_balance",
            "lost_attempt",
        ] {
            assert_eq!(IncidentKind::parse(k).unwrap().as_str(), k);
        }
    }
}
