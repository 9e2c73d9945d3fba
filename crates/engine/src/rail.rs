//! Rail-neutral port pieces every rail family shares: a failed read, whether a node's answer may stand in a proof, the default attempt limit and the optional send guard.

use async_trait::async_trait;

/// Attempts per payout on a chain unless its configuration says otherwise (SPEC 4.5).
pub const ATTEMPTS_PER_PAYOUT_MAX_DEFAULT: u32 = 3;

/// A read that failed: it says nothing (an error is never "absent" and never zero).
#[derive(Debug, Clone, thiserror::Error)]
#[error("rail read failed: {0}")]
pub struct ReadError(pub String);

/// A node answered at a block (or slot) below the one a proof is judged at: what it says there is
/// unknown (what it lacks may be in a block it has not seen), never absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the node that answered is at {at}, behind {needed}, where the read is judged")]
pub struct NodeBehind {
    /// The block (or slot) the node answered at.
    pub at: u64,
    pub needed: u64,
}

/// Whether the answers of a node at block (or slot) `node_at` may stand in a proof judged at
/// `judged_at`: only when the node has reached it. The one rule the rails' adapters and the
/// simulator's chains apply.
pub fn answers_at(node_at: u64, judged_at: u64) -> Result<(), NodeBehind> {
    if node_at < judged_at {
        return Err(NodeBehind { at: node_at, needed: judged_at });
    }
    Ok(())
}

/// Defence in depth against a database that loses its last commits (SPEC 4 step 3): a record,
/// outside the database, of which attempt went out with which hash.
#[async_trait]
pub trait SendGuard: Send + Sync + 'static {
    /// Records `hash` for `attempt_key` unless a record exists; returns the recorded hash.
    async fn record_or_get(&self, attempt_key: &str, hash: &str) -> Result<String, ReadError>;
    /// The recorded hash for `attempt_key`, if any.
    async fn get(&self, attempt_key: &str) -> Result<Option<String>, ReadError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_behind_the_judged_block_answers_nothing_that_counts() {
        assert_eq!(answers_at(10, 10), Ok(()));
        assert_eq!(answers_at(11, 10), Ok(()));
        assert_eq!(answers_at(9, 10), Err(NodeBehind { at: 9, needed: 10 }));
    }
}
