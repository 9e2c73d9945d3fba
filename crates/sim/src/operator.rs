//! The simulated person at the needs-attention queue: verdicts while rails may still move (each must rest on the rail's proof) and, at the end, one verdict per payout left.

use payoutd_domain::PayoutStatus;
use payoutd_engine::Verdict;
use sha2::{Digest, Sha256};

use super::{PAYOUTS_READ_MAX, World};

/// Payouts in needs_attention read by one verdict while the seed runs.
const WAITING_READ_MAX: u32 = 64;

impl World {
    /// Half of the person's visits: `failed` or `retry` on a payout waiting for a person, whatever
    /// the rails may still do (a person may be wrong; the rail's proof must stop a wrong verdict).
    pub(super) async fn verdict_while_running(&mut self, step: usize) -> anyhow::Result<()> {
        let pick = Sha256::digest(format!("{}:verdict:{step}", self.report.seed).as_bytes());
        if pick[0] % 2 == 1 {
            return Ok(());
        }
        let waiting =
            self.store.payouts_in_status(PayoutStatus::NeedsAttention, WAITING_READ_MAX).await?;
        if waiting.is_empty() {
            return Ok(());
        }
        let id = waiting[usize::from(pick[1]) % waiting.len()].id.clone();
        let verdict = if pick[2] % 2 == 0 { Verdict::Failed } else { Verdict::Retry };
        let r = self.workers[0]
            .resolve_needs_attention(&id, verdict, "the simulated person saw nothing arrive")
            .await;
        if r.is_ok() {
            self.ended_by_verdict.insert(id.clone());
        }
        self.trace(format!("operator verdict {verdict:?} on {id}: {:?}", r.map(|p| p.status)));
        self.ended_unpaid_fresh = false;
        Ok(())
    }

    /// After the rails settled: `paid` where exactly one transfer of the payout landed, else
    /// `failed` or `retry` (hashed); each must still rest on the rail's proof.
    pub(super) async fn review_needs_attention(&mut self) -> anyhow::Result<()> {
        self.check(false).await?; // brings the landed transfers per payout up to date
        for payout in
            self.store.payouts_in_status(PayoutStatus::NeedsAttention, PAYOUTS_READ_MAX).await?
        {
            let verdict = match self.landed.get(&payout.id).copied().unwrap_or(0) {
                1 => Verdict::Paid,
                0 if Sha256::digest(
                    format!("{}:review:{}", self.report.seed, payout.id).as_bytes(),
                )[0] % 2
                    == 0 =>
                {
                    Verdict::Failed
                }
                0 => Verdict::Retry,
                _ => continue,
            };
            let r = self.workers[0]
                .resolve_needs_attention(&payout.id, verdict, "the simulated person read the rail")
                .await;
            if r.is_ok() {
                self.ended_by_verdict.insert(payout.id.clone());
            }
            self.trace(format!(
                "operator review {verdict:?} on {}: {:?}",
                payout.id,
                r.map(|p| p.status)
            ));
        }
        self.ended_unpaid_fresh = false;
        Ok(())
    }
}
