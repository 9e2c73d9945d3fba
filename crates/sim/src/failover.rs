//! Failovers that lose the last commits: the database forgets a first attempt that may have gone out, and the send guard, kept apart from it as Redis is, must stop a second one.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use payoutd_domain::{PayoutStatus, SolanaExpiry};
use payoutd_engine::rail::{ReadError, SendGuard};
use sha2::{Digest, Sha256};

use super::World;

/// Payouts in processing read when a failover picks the attempt it loses.
const PROCESSING_READ_MAX: u32 = 256;

/// The send guard's records, outside the database: what a failover of the database leaves.
#[derive(Default)]
pub(crate) struct SimGuard {
    records: Mutex<HashMap<String, String>>,
}

#[async_trait]
impl SendGuard for SimGuard {
    async fn record_or_get(&self, attempt_key: &str, hash: &str) -> Result<String, ReadError> {
        Ok(self
            .records
            .lock()
            .unwrap()
            .entry(attempt_key.to_owned())
            .or_insert_with(|| hash.to_owned())
            .clone())
    }

    async fn get(&self, attempt_key: &str) -> Result<Option<String>, ReadError> {
        Ok(self.records.lock().unwrap().get(attempt_key).cloned())
    }
}

impl World {
    /// After a worker's pass, in a share of steps hashed from the seed (the schedule stays), the
    /// database fails over to a copy without its last commits: those that made a live first
    /// attempt of a Solana (blockhash) or provider payout, and everything written about it since.
    /// The attempt is gone and its payout approved again, while its bytes or request may be out
    /// there. EVM attempts and durable nonces are left out: their loss also frees a nonce that
    /// other payouts would then sign on, which no guard of one payout can prevent.
    pub(super) async fn failover(&mut self, step: usize) -> anyhow::Result<()> {
        let pick = Sha256::digest(format!("{}:failover:{step}", self.report.seed).as_bytes());
        if u32::from(pick[0]) * 1_000 / 256 >= self.failover_per_mille {
            return Ok(());
        }
        let processing =
            self.store.payouts_in_status(PayoutStatus::Processing, PROCESSING_READ_MAX).await?;
        let candidates: Vec<_> =
            processing.into_iter().filter(|p| p.asset == self.sol || p.asset == self.usd).collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let payout = &candidates[usize::from(pick[1]) % candidates.len()];
        let attempts = self.store.attempts_of(&payout.id).await?;
        let [attempt] = attempts.as_slice() else { return Ok(()) };
        let durable =
            matches!(attempt.slot.solana_expiry(), Some(SolanaExpiry::DurableNonce { .. }));
        if attempt.attempt_no != 1 || !attempt.status.is_live() || durable {
            return Ok(());
        }
        for sql in [
            format!("DELETE FROM incidents WHERE attempt_id = '{}'", attempt.id),
            format!("DELETE FROM attempt_transactions WHERE attempt_id = '{}'", attempt.id),
            format!("DELETE FROM attempts WHERE id = '{}'", attempt.id),
            // The event of the payout's move to processing was written in the same commit.
            format!(
                "DELETE FROM events WHERE type = 'payout.processing' AND entity_id = '{}'",
                payout.id
            ),
            format!("UPDATE payouts SET status = 'approved' WHERE id = '{}'", payout.id),
        ] {
            self.db.exec_raw(&sql).await.map_err(|e| anyhow::anyhow!("failover: {e}"))?;
        }
        // The checks still know whose transfer it is, as the guard does.
        let reference = attempt.txs[0].hash.clone();
        self.tx_owners.insert(reference.clone(), payout.id.clone());
        self.lost.insert(reference.to_string());
        self.report.lost_attempts += 1;
        self.trace(format!("failover: the database lost attempt 1 of {} ({reference})", payout.id));
        Ok(())
    }
}
