//! Policy (SPEC 4 step 2, 5): near-duplicates and caps decide approved or held_for_review.

use payoutd_domain::{Amount, EventType, HotWallet, Payout, PayoutStatus};

use super::{HOUR_MS, Pipeline, PipelineError, TickReport};
use crate::store::TransitionOutcome;

impl Pipeline {

    /// requested -> approved, or held_for_review for near-duplicates and cap breaches (SPEC 5).
    pub async fn policy_pass(&self) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let now = self.clock.now_ms();
        for payout in self.store.payouts_in_status(PayoutStatus::Requested, self.config.policy_batch_max).await? {
            let similar = self.store.count_similar_payouts(&payout, now - self.config.near_duplicate_window_ms).await?;
            let over_cap = self.over_destination_cap(&payout, Amount::ZERO, now).await?;
            let (to, event_type) = if similar > 0 || over_cap {
                (PayoutStatus::HeldForReview, EventType::PayoutHeldForReview)
            } else {
                (PayoutStatus::Approved, EventType::PayoutApproved)
            };
            if let TransitionOutcome::Applied(_) = self.transition(&payout, to, event_type, vec![], now).await? {
                match to {
                    PayoutStatus::Approved => report.approved += 1,
                    _ => report.held += 1,
                }
            }
        }
        Ok(report)
    }

    pub(super) async fn over_destination_cap(&self, payout: &Payout, pending: Amount, now: i64) -> Result<bool, PipelineError> {
        let Some(caps) = self.config.caps.get(&payout.asset) else { return Ok(false) };
        let volume = self.store.destination_volume_since(&payout.asset, &payout.destination, now - HOUR_MS).await?;
        let total = volume.checked_add(pending).and_then(|v| v.checked_add(payout.amount));
        Ok(total.is_none_or(|t| t > caps.per_destination_per_hour))
    }

    pub(super) async fn over_wallet_cap(&self, wallet: &HotWallet, payout: &Payout, pending: Amount, now: i64) -> Result<bool, PipelineError> {
        let Some(caps) = self.config.caps.get(&payout.asset) else { return Ok(false) };
        let volume = self.store.wallet_volume_since(&wallet.id, &payout.asset, now - HOUR_MS).await?;
        let total = volume.checked_add(pending).and_then(|v| v.checked_add(payout.amount));
        Ok(total.is_none_or(|t| t > caps.per_wallet_per_hour))
    }

}
