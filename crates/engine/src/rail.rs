//! Rail-neutral port pieces every rail family shares: a failed read, the default attempt limit and the optional send guard.

use async_trait::async_trait;

/// Attempts per payout on a chain unless its configuration says otherwise (SPEC 4.5).
pub const ATTEMPTS_PER_PAYOUT_MAX_DEFAULT: u32 = 3;

/// A read that failed: it says nothing (an error is never "absent" and never zero).
#[derive(Debug, Clone, thiserror::Error)]
#[error("rail read failed: {0}")]
pub struct ReadError(pub String);

/// Defence in depth against a database that loses its last commits (SPEC 4 step 3): a record,
/// outside the database, of which attempt went out with which hash.
#[async_trait]
pub trait SendGuard: Send + Sync + 'static {
    /// Records `hash` for `attempt_key` unless a record exists; returns the recorded hash.
    async fn record_or_get(&self, attempt_key: &str, hash: &str) -> Result<String, ReadError>;
    /// The recorded hash for `attempt_key`, if any.
    async fn get(&self, attempt_key: &str) -> Result<Option<String>, ReadError>;
}
