//! Policy (SPEC 4 step 2, 5): near-duplicates and caps decide approved or held_for_review; the destination cap is checked here and again by every family when it signs.

use payoutd_domain::{Amount, EventId, EventType, Payout, PayoutStatus};

use super::{Core, HOUR_MS, PipelineError, TickReport};
use crate::pipeline_store::{CapCheck, exceeds};
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
        for payout in core.store.requested_in_turn(core.config.policy_batch_max).await? {
            let similar = core
                .store
                .count_similar_payouts(&payout, now - core.config.near_duplicate_window_ms)
                .await?;
            let over_cap = core.over_destination_cap(&payout, Amount::ZERO, now).await?;
            let (to, event_type) = if similar > 0 || over_cap {
                (PayoutStatus::HeldForReview, EventType::PayoutHeldForReview)
            } else {
                (PayoutStatus::Approved, EventType::PayoutApproved)
            };
            if let TransitionOutcome::Applied(_) =
                core.transition(&payout, to, event_type, vec![], now).await?
            {
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
    pub(crate) async fn over_destination_cap(
        &self,
        payout: &Payout,
        pending: Amount,
        now: i64,
    ) -> Result<bool, PipelineError> {
        let Some(caps) = self.config.caps.get(&payout.asset) else { return Ok(false) };
        let volume = self
            .store
            .destination_volume_since(&payout.asset, &payout.destination, now - HOUR_MS)
            .await?;
        Ok(volume
            .checked_add(pending)
            .is_none_or(|v| exceeds(v, payout.amount, caps.per_destination_per_hour)))
    }

    /// What I8 checks again as a payout's first attempt is made, on every rail (an EVM signing
    /// session or a standalone rail's create): `None` when the payout's asset has no caps. The store
    /// reads the volumes under its locks; `CapCheck::breach` decides.
    pub(crate) fn signing_caps(&self, payout: &Payout, now: i64) -> Option<CapCheck> {
        #[cfg(feature = "defects")]
        if self.config.defects.caps_unchecked_at_signing {
            return None;
        }
        let caps = self.config.caps.get(&payout.asset)?;
        Some(CapCheck {
            per_destination_per_hour: caps.per_destination_per_hour,
            per_account_per_hour: caps.per_wallet_per_hour,
            since_ms: now - HOUR_MS,
            review_event: EventId::derive(EventType::PayoutReviewApproved, payout.id.as_str()),
        })
    }
}
