//! The optional send guard (SPEC 4 step 3), rail-neutral: one record per attempt of a business event (a merchant's idempotency key), kept outside the database, written before anything is sent.

use std::sync::Arc;

use payoutd_domain::{Attempt, Payout, PayoutId};

use super::PipelineError;
use crate::rail::SendGuard;

/// Separates the fields of a guard record; a record's first field is always its attempt's id.
pub(crate) const GUARD_RECORD_SEPARATOR: char = '|';

/// The send guard, when one is configured.
pub(crate) struct Guard {
    inner: Option<Arc<dyn SendGuard>>,
}

impl Guard {
    pub(crate) fn none() -> Guard {
        Guard { inner: None }
    }

    pub(crate) fn of(guard: Arc<dyn SendGuard>) -> Guard {
        Guard { inner: Some(guard) }
    }

    /// What the guard remembers of attempt `attempt_no` of `payout`'s business event: an attempt
    /// of this payout, or of an earlier payout for the same event whose creation the database lost
    /// (the client's retry re-created it under a new id). Records written before the guard was
    /// keyed by event are read under the payout's id as well, until they expire.
    pub(crate) async fn remembered(
        &self,
        payout: &Payout,
        attempt_no: u32,
    ) -> Result<Option<String>, PipelineError> {
        let Some(guard) = &self.inner else { return Ok(None) };
        for key in [guard_key_of(payout, attempt_no), legacy_guard_key_of(&payout.id, attempt_no)] {
            let remembered =
                guard.get(&key).await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
            if remembered.is_some() {
                return Ok(remembered);
            }
        }
        Ok(None)
    }

    /// False when another attempt of this payout's business event already went out under its
    /// number, or when the guard cannot be asked (then nothing is sent this pass). `record` is
    /// what the attempt's family stores so that its rail can be asked about the attempt later,
    /// even if the database loses it; it starts with the attempt's id.
    pub(crate) async fn allows(&self, payout: &Payout, attempt: &Attempt, record: &str) -> bool {
        let Some(guard) = &self.inner else { return true };
        assert_eq!(attempt.payout_id, payout.id, "a guard record is written for its own payout");
        debug_assert_eq!(
            attempt_of(record),
            attempt.id.as_str(),
            "a guard record starts with its attempt's id"
        );
        match guard.record_or_get(&guard_key_of(payout, attempt.attempt_no), record).await {
            Ok(recorded) if attempt_of(&recorded) == attempt.id.as_str() => true,
            Ok(recorded) => {
                tracing::error!(attempt = %attempt.id, %recorded, "send guard: another attempt of this business event went out; not sending");
                false
            }
            Err(e) => {
                tracing::warn!(attempt = %attempt.id, error = %e, "send guard unreachable; not sending this pass");
                false
            }
        }
    }
}

/// The send guard's key of attempt `attempt_no` of `payout`'s business event: the same for every
/// payout made for that event.
pub fn guard_key_of(payout: &Payout, attempt_no: u32) -> String {
    format!("payoutd:sent:{}:{attempt_no}", payout.business_event())
}

/// The key records were written under before the guard was keyed by business event.
fn legacy_guard_key_of(payout_id: &PayoutId, attempt_no: u32) -> String {
    format!("payoutd:sent:{payout_id}:{attempt_no}")
}

/// The attempt id in a stored record (older records hold only the id).
fn attempt_of(record: &str) -> &str {
    record.split(GUARD_RECORD_SEPARATOR).next().unwrap_or(record)
}
