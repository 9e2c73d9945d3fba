//! The optional send guard (SPEC 4 step 3), rail-neutral: one record per payout attempt, kept outside the database, written before anything is sent.

use std::sync::Arc;

use payoutd_domain::{Attempt, PayoutId};

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

    /// What the guard remembers of attempt `attempt_no` of a payout.
    pub(crate) async fn remembered(
        &self,
        payout_id: &PayoutId,
        attempt_no: u32,
    ) -> Result<Option<String>, PipelineError> {
        let Some(guard) = &self.inner else { return Ok(None) };
        guard
            .get(&guard_key_of(payout_id, attempt_no))
            .await
            .map_err(|e| PipelineError::RailUnavailable(e.0))
    }

    /// False when another attempt of this payout already went out, or when the guard cannot be
    /// asked (then nothing is sent this pass). `record` is what the attempt's family stores so
    /// that its rail can be asked about the attempt later, even if the database loses it; it
    /// starts with the attempt's id.
    pub(crate) async fn allows(&self, attempt: &Attempt, record: &str) -> bool {
        let Some(guard) = &self.inner else { return true };
        debug_assert_eq!(
            attempt_of(record),
            attempt.id.as_str(),
            "a guard record starts with its attempt's id"
        );
        match guard
            .record_or_get(&guard_key_of(&attempt.payout_id, attempt.attempt_no), record)
            .await
        {
            Ok(recorded) if attempt_of(&recorded) == attempt.id.as_str() => true,
            Ok(recorded) => {
                tracing::error!(attempt = %attempt.id, %recorded, "send guard: another attempt of this payout went out; not sending");
                false
            }
            Err(e) => {
                tracing::warn!(attempt = %attempt.id, error = %e, "send guard unreachable; not sending this pass");
                false
            }
        }
    }
}

/// The send guard's key of attempt `attempt_no` of a payout.
pub(crate) fn guard_key_of(payout_id: &PayoutId, attempt_no: u32) -> String {
    format!("payoutd:sent:{payout_id}:{attempt_no}")
}

/// The attempt id in a stored record (older records hold only the id).
fn attempt_of(record: &str) -> &str {
    record.split(GUARD_RECORD_SEPARATOR).next().unwrap_or(record)
}
