//! What the send guard stores for an EVM attempt: enough for the chain to show later whether it can still land, even if the database lost the attempt.

use payoutd_domain::Attempt;

use super::evm_slot;
use crate::pipeline::GUARD_RECORD_SEPARATOR;

/// What the send guard remembers of an attempt that went out: enough for the chain to show later
/// whether it can still land, even if the database lost the attempt (its wallet, nonce and the hash
/// of its first transaction, the one the guard let out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GuardRecord {
    pub attempt_id: String,
    pub wallet_id: String,
    pub nonce: u64,
    pub hash: String,
}

impl GuardRecord {
    const SEPARATOR: char = GUARD_RECORD_SEPARATOR;

    pub(crate) fn of(attempt: &Attempt) -> GuardRecord {
        let slot = evm_slot(attempt);
        GuardRecord {
            attempt_id: attempt.id.to_string(),
            wallet_id: slot.wallet_id.clone(),
            nonce: slot.nonce,
            hash: attempt.txs[0].hash.to_string(),
        }
    }

    pub(crate) fn encode(&self) -> String {
        let s = GuardRecord::SEPARATOR;
        format!("{}{s}{}{s}{}{s}{}", self.attempt_id, self.wallet_id, self.nonce, self.hash)
    }

    /// `None` for a value this version did not write (then the chain cannot be asked about it).
    pub(crate) fn parse(text: &str) -> Option<GuardRecord> {
        let mut parts = text.split(GuardRecord::SEPARATOR);
        let record = GuardRecord {
            attempt_id: parts.next()?.to_owned(),
            wallet_id: parts.next()?.to_owned(),
            nonce: parts.next()?.parse().ok()?,
            hash: parts.next()?.to_owned(),
        };
        parts.next().is_none().then_some(record)
    }
}
