//! Relinking a lost standalone attempt: a final transfer out of the rail's hot wallet that no stored attempt explains but that names the business event of a payout waiting to be signed is that payout's attempt whose commit was lost after it was sent; it is stored as the payout's first attempt, so the payout settles by the rail's status of it and is never signed again.

use payoutd_domain::{
    AssetCode, Attempt, AttemptId, AttemptStatus, AttemptTx, EventType, PayoutStatus,
};

use super::{Foreign, StandaloneFamily};
use crate::pipeline::{Core, PipelineError};
use crate::store::NewEvent;

impl StandaloneFamily {
    /// Stores `transfer` as the first attempt of the approved payout whose business event it
    /// names; `false` when it names none (it stays an `unmatched_transfer`). The payout's caps
    /// are not checked again: the money already left, and a hold for review could only release
    /// the hold of a payout that was paid.
    pub(super) async fn relinked(
        &self,
        core: &Core,
        transfer: &Foreign,
    ) -> Result<bool, PipelineError> {
        let Some((reference, prepared)) = &transfer.names else { return Ok(false) };
        let pays = |code: &AssetCode| self.line.assets.iter().any(|a| &a.code == code);
        let Some(payout) = core.approved_payout_carrying(reference, pays).await? else {
            return Ok(false);
        };
        let now = core.clock.now_ms();
        let attempt = Attempt {
            id: AttemptId::new(),
            payout_id: payout.id.clone(),
            attempt_no: 1,
            status: AttemptStatus::Signed,
            slot: prepared.slot.clone(),
            txs: vec![AttemptTx { created_at_ms: now, ..prepared.tx.clone() }],
            mined: None,
            last_sent_at_ms: now,
            created_at_ms: now,
            updated_at_ms: now,
        };
        assert!(self.line.rail.owns(&attempt.slot), "a rail relinks only its own transfers");
        let mut after = payout.clone();
        after.status = PayoutStatus::Processing;
        after.version += 1;
        let event = NewEvent::for_payout(EventType::PayoutProcessing, &after, now);
        if !core.store.create_first_attempt(&payout, &attempt, &event).await? {
            return Ok(false); // signed meanwhile by another worker: a second payment, for a person
        }
        tracing::warn!(rail = self.line.rail.name(), payout = %payout.id, attempt = %attempt.id, transfer = %transfer.reference, "a transfer the database lost was found carrying the payout's reference: recorded as its attempt, the payout is never signed again");
        Ok(true)
    }
}
