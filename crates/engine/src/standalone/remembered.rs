//! What the send guard keeps of a standalone attempt: its slot, its first request or transaction and when it was made, so that its rail can be asked where it stands even after the database lost it.

use payoutd_domain::{
    Attempt, AttemptId, AttemptSlot, AttemptStatus, AttemptTx, Payout, SolanaExpiry, TxKind, TxRef,
};
use serde::{Deserialize, Serialize};

use crate::pipeline::GUARD_RECORD_SEPARATOR;

/// A record larger than this keeps only the attempt's id, rail and reference: Redis values stay
/// small, and such an attempt (a request body of tens of KiB) is judged by a person alone.
pub(super) const GUARD_RECORD_BYTES_MAX: usize = 16 * 1024;

#[derive(Debug, Serialize, Deserialize)]
struct Remembered {
    attempt_no: u32,
    slot: Slot,
    /// The first transaction's reference (a signature, our provider reference).
    reference: String,
    /// The first transaction's bytes or request body, hex.
    raw_hex: String,
    created_at_ms: i64,
}

/// `AttemptSlot` of the standalone rails, as the record carries it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Slot {
    SolanaBlockhash {
        fee_payer: String,
        last_valid_block_height: u64,
    },
    SolanaDurable {
        fee_payer: String,
        account: String,
        value: String,
        signed_at_block_height: u64,
    },
    /// `wallet`: absent in records written before provider accounts were kept in the ledger.
    Provider {
        provider: String,
        idempotency_key: String,
        #[serde(default)]
        wallet: Option<String>,
    },
}

/// The record the guard stores for `attempt`: its id, then what its rail needs to find it.
pub(super) fn record_of(attempt: &Attempt) -> String {
    let s = GUARD_RECORD_SEPARATOR;
    let first = &attempt.txs[0];
    let slot = match &attempt.slot {
        AttemptSlot::Solana { fee_payer, expiry: SolanaExpiry::LastValidBlockHeight(h) } => {
            Slot::SolanaBlockhash { fee_payer: fee_payer.clone(), last_valid_block_height: *h }
        }
        AttemptSlot::Solana {
            fee_payer,
            expiry: SolanaExpiry::DurableNonce { account, value, signed_at_block_height },
        } => Slot::SolanaDurable {
            fee_payer: fee_payer.clone(),
            account: account.clone(),
            value: value.clone(),
            signed_at_block_height: *signed_at_block_height,
        },
        AttemptSlot::Provider { provider, idempotency_key, wallet, .. } => Slot::Provider {
            provider: provider.clone(),
            idempotency_key: idempotency_key.clone(),
            wallet: wallet.clone(),
        },
        AttemptSlot::Evm(_) => {
            panic!("attempt {} on an EVM slot reached the standalone family", attempt.id)
        }
    };
    let remembered = Remembered {
        attempt_no: attempt.attempt_no,
        slot,
        reference: first.hash.to_string(),
        raw_hex: hex::encode(&first.raw),
        created_at_ms: attempt.created_at_ms,
    };
    let json =
        serde_json::to_string(&remembered).expect("a record of strings and numbers serializes");
    let record = format!("{}{s}{json}", attempt.id);
    if record.len() <= GUARD_RECORD_BYTES_MAX {
        return record;
    }
    tracing::warn!(attempt = %attempt.id, bytes = record.len(), "attempt too large for the guard's record: it keeps the reference only");
    format!("{}{s}{}{s}{}", attempt.id, attempt.slot.rail(), first.hash)
}

/// The attempt of `payout` a record describes, as its rail needs it for a status read; `None` for
/// a record that carries only a reference (older versions, or a request too large).
pub(super) fn attempt_of(record: &str, payout: &Payout) -> Option<Attempt> {
    let (id, json) = record.split_once(GUARD_RECORD_SEPARATOR)?;
    let remembered: Remembered = serde_json::from_str(json).ok()?;
    let slot = match remembered.slot {
        Slot::SolanaBlockhash { fee_payer, last_valid_block_height } => AttemptSlot::Solana {
            fee_payer,
            expiry: SolanaExpiry::LastValidBlockHeight(last_valid_block_height),
        },
        Slot::SolanaDurable { fee_payer, account, value, signed_at_block_height } => {
            AttemptSlot::Solana {
                fee_payer,
                expiry: SolanaExpiry::DurableNonce { account, value, signed_at_block_height },
            }
        }
        Slot::Provider { provider, idempotency_key, wallet } => {
            // Whether the key was spent is not remembered: the key window decides, as ever.
            AttemptSlot::Provider {
                provider,
                idempotency_key,
                reference: None,
                wallet,
                key_spent_at_ms: None,
                creates_for_ms: None,
            }
        }
    };
    let first = AttemptTx {
        hash: TxRef::parse(&remembered.reference).ok()?,
        kind: TxKind::Original,
        raw: hex::decode(&remembered.raw_hex).ok()?,
        fees: None,
        created_at_ms: remembered.created_at_ms,
    };
    Some(Attempt {
        id: AttemptId::parse(id).ok()?,
        payout_id: payout.id.clone(),
        attempt_no: remembered.attempt_no,
        // It went out (the guard let it), as far as anyone can tell: never `signed` only.
        status: AttemptStatus::Broadcast,
        slot,
        txs: vec![first],
        mined: None,
        last_sent_at_ms: remembered.created_at_ms,
        created_at_ms: remembered.created_at_ms,
        updated_at_ms: remembered.created_at_ms,
    })
}
