//! Failovers that lose the last commits: the database forgets a first attempt that may have gone out; the chain (the reference an EVM transaction carries) or the send guard, kept apart from the database as Redis is, must stop a second one.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use payoutd_domain::{PayoutStatus, SolanaExpiry};
use payoutd_engine::rail::{ReadError, SendGuard};
use sha2::{Digest, Sha256};

use super::World;
use crate::solana::{SIM_SOLANA_CHAIN, SIM_SOLANA_PAYER};

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

impl SimGuard {
    /// The guard's own last write lost (Redis replicates asynchronously too).
    fn forget(&self, attempt_key: &str) {
        self.records.lock().unwrap().remove(attempt_key);
    }
}

impl World {
    /// After a worker's pass, in a share of steps hashed from the seed (the schedule stays), the
    /// database fails over to a copy without its last commits: those that made a live first
    /// attempt, and everything written about it since. The attempt is gone and its payout approved
    /// again, while its bytes or request may be out there. On the EVM chain the lost attempt is the
    /// top of the wallet's line (a loss takes the newest commits): the wallet's counter goes back to
    /// its nonce, and the reconciliation cursor back to its block if it was mined. Solana attempts
    /// on a durable nonce are left out: their loss would also forget the nonce account's claim.
    pub(super) async fn failover(&mut self, step: usize) -> anyhow::Result<()> {
        let pick = Sha256::digest(format!("{}:failover:{step}", self.report.seed).as_bytes());
        if u32::from(pick[0]) * 1_000 / 256 >= self.failover_per_mille {
            return Ok(());
        }
        let processing =
            self.store.payouts_in_status(PayoutStatus::Processing, PROCESSING_READ_MAX).await?;
        let candidates: Vec<_> = processing
            .into_iter()
            .filter(|p| p.asset == self.sol || p.asset == self.usd || p.asset == self.eth)
            .collect();
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
        let mut lost_sql = vec![
            format!("DELETE FROM incidents WHERE attempt_id = '{}'", attempt.id),
            format!("DELETE FROM attempt_transactions WHERE attempt_id = '{}'", attempt.id),
            format!("DELETE FROM attempts WHERE id = '{}'", attempt.id),
            // The event of the payout's move to processing was written in the same commit.
            format!(
                "DELETE FROM events WHERE type = 'payout.processing' AND entity_id = '{}'",
                payout.id
            ),
            format!(
                "UPDATE payouts SET status = 'approved', version = version - 1 WHERE id = '{}'",
                payout.id
            ),
        ];
        if let Some(slot) = attempt.slot.as_evm() {
            let Some(line) = self.evm_line_back_to(attempt, slot).await? else { return Ok(()) };
            lost_sql.extend(line);
        }
        if attempt.slot.solana_expiry().is_some() {
            lost_sql.extend(self.solana_cursor_back_to(attempt));
        }
        for sql in lost_sql {
            self.db.exec_raw(&sql).await.map_err(|e| anyhow::anyhow!("failover: {e}"))?;
        }
        // The checks still know whose transfer it is, as the guard does.
        for tx in &attempt.txs {
            self.tx_owners.insert(tx.hash.clone(), payout.id.clone());
            self.lost.insert(tx.hash.to_string());
        }
        if attempt.slot.as_evm().is_some() || attempt.slot.solana_expiry().is_some() {
            self.lost_on_chain.push(attempt.txs.iter().map(|t| t.hash.clone()).collect());
            // With `--guard-losses` the send guard lost its record too: on an EVM chain and on
            // Solana the chain itself must then stop a second payment (the reference each
            // transaction carries); provider attempts rest on the guard and the provider's key.
            if self.guard_losses && pick[2] % 2 == 0 {
                self.guard.forget(&payoutd_engine::guard_key_of(payout, 1));
                self.trace(format!("failover: the send guard lost its record of {}", payout.id));
            }
        }
        self.report.lost_attempts += 1;
        let reference = &attempt.txs[0].hash;
        let landed = self.solana.landed().iter().any(|(s, _, _)| s == reference.as_str());
        self.trace(format!(
            "failover: the database lost attempt 1 of {} ({reference}, landed on Solana: {landed})",
            payout.id
        ));
        Ok(())
    }

    /// What else the loss of an EVM attempt at the top of its wallet's line takes back: the
    /// counter to its nonce, the reconciliation cursor to the block that mined it (a cursor moved
    /// past it was moved after its commit). `None` when it is not the top of the line.
    async fn evm_line_back_to(
        &self,
        attempt: &payoutd_domain::Attempt,
        slot: &payoutd_domain::EvmSlot,
    ) -> anyhow::Result<Option<Vec<String>>> {
        let lines = self.db.evm_lines();
        let Some(wallet) = lines.hot_wallet(&slot.wallet_id).await? else { return Ok(None) };
        if wallet.next_nonce != slot.nonce + 1 {
            return Ok(None);
        }
        let mut sql = vec![format!(
            "UPDATE hot_wallets SET next_nonce = {} WHERE id = '{}'",
            slot.nonce, slot.wallet_id
        )];
        let mined = attempt.txs.iter().filter_map(|t| self.chain.block_of(t.hash.as_str())).min();
        if let Some(block) = mined {
            sql.push(format!(
                "UPDATE hot_wallets SET reconciled_next_block = {block} \
                 WHERE id = '{}' AND reconciled_next_block > {block}",
                slot.wallet_id
            ));
        }
        Ok(Some(sql))
    }
}

impl World {
    /// The Solana reconciliation cursor back to before the lost attempt's landed transaction, if
    /// one landed: a cursor moved past it was moved after the attempt's commit. (The stored cursor
    /// is a count of the fee payer's landed transactions, in landing order.)
    fn solana_cursor_back_to(&self, attempt: &payoutd_domain::Attempt) -> Option<String> {
        let landed = self.solana.landed();
        let index = attempt
            .txs
            .iter()
            .filter_map(|t| landed.iter().position(|(s, _, _)| s == t.hash.as_str()))
            .min()?;
        let name = format!("{SIM_SOLANA_CHAIN}/{SIM_SOLANA_PAYER}");
        // Text cursors compare as numbers here: the simulated cursor is a count.
        Some(format!(
            "UPDATE rail_cursors SET cursor = '{index}' \
             WHERE name = '{name}' AND CAST(cursor AS INTEGER) > {index}"
        ))
    }

    /// Whether a transaction of an EVM attempt a failover lost was mined and is stored by no
    /// attempt now (not relinked: a cancel carries no reference). Solana's are judged apart.
    pub(super) async fn lost_landed_unlinked_on_chain(&self) -> anyhow::Result<bool> {
        let mined: Vec<payoutd_domain::TxRef> = self
            .lost_on_chain
            .iter()
            .flatten()
            .filter(|hash| self.chain.block_of(hash.as_str()).is_some())
            .cloned()
            .collect();
        Ok(mined.len() > self.store.tx_owners(&mined).await?.len())
    }
}
