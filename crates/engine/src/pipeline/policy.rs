//! Policy (SPEC 4 step 2, 5): near-duplicates and caps decide approved or held_for_review; the destination cap is checked here and again by every family when it signs.

use payoutd_domain::{Amount, AssetCode, EventId, EventType, Payout, PayoutStatus};

use super::{Caps, Core, HOUR_MS, PipelineError, TickReport};
use crate::store::TransitionOutcome;

/// The policy stage.
pub(super) struct Policy<'a> {
    pub core: &'a Core,
}

impl Policy<'_> {
    /// requested -> approved, or held_for_review for near-duplicates and cap breaches (SPEC 5).
    pub async fn pass(&self) -> Result<TickReport, PipelineError> {
        let core = self.core;
        let mut report = TickReport::default();
        let now = core.clock.now_ms();
        for payout in core.store.payouts_in_status(PayoutStatus::Requested, core.config.policy_batch_max).await? {
            let similar = core.store.count_similar_payouts(&payout, now - core.config.near_duplicate_window_ms).await?;
            let over_cap = core.over_destination_cap(&payout, Amount::ZERO, now).await?;
            let (to, event_type) = if similar > 0 || over_cap {
                (PayoutStatus::HeldForReview, EventType::PayoutHeldForReview)
            } else {
                (PayoutStatus::Approved, EventType::PayoutApproved)
            };
            if let TransitionOutcome::Applied(_) = core.transition(&payout, to, event_type, vec![], now).await? {
                match to {
                    PayoutStatus::Approved => report.approved += 1,
                    _ => report.held += 1,
                }
            }
        }
        Ok(report)
    }
}

impl Core {
    /// I8 per destination: the hour's volume towards the payout's destination (any rail, any
    /// merchant), plus `pending` not yet committed, plus the payout, over the asset's cap.
    pub(crate) async fn over_destination_cap(&self, payout: &Payout, pending: Amount, now: i64) -> Result<bool, PipelineError> {
        let Some(caps) = self.config.caps.get(&payout.asset) else { return Ok(false) };
        let volume = self.store.destination_volume_since(&payout.asset, &payout.destination, now - HOUR_MS).await?;
        let total = volume.checked_add(pending).and_then(|v| v.checked_add(payout.amount));
        Ok(total.is_none_or(|t| t > caps.per_destination_per_hour))
    }

    /// The asset's caps when they are checked again as a first attempt is made (I8 at signing).
    pub(crate) fn caps_at_signing(&self, asset: &AssetCode) -> Option<&Caps> {
        #[cfg(feature = "defects")]
        if self.config.defects.caps_unchecked_at_signing {
            return None;
        }
        self.config.caps.get(asset)
    }

    /// Whether a person approved this payout after a review: no cap holds it again.
    pub(crate) async fn reviewed(&self, payout: &Payout) -> Result<bool, PipelineError> {
        Ok(self.store.event_exists(&EventId::derive(EventType::PayoutReviewApproved, payout.id.as_str())).await?)
    }
}
