//! Keys the provider answered with a replayed saved error (Stripe's saved 500): spent keys, whose attempts lookups decide without waiting out the key window.

use std::collections::HashMap;
use std::sync::Mutex;

use payoutd_domain::AttemptId;

/// Spent keys remembered at most; past it the memory starts over, which only delays deaths (the
/// key window decides them then).
pub const SPENT_KEYS_MAX: usize = 10_000;

/// Each attempt whose key was spent, with when the replay was first seen (the database's clock,
/// as the process reads it). Process memory: a restart forgets, which only delays deaths.
#[derive(Debug, Default)]
pub struct SpentKeys {
    since_ms: Mutex<HashMap<AttemptId, i64>>,
}

impl SpentKeys {
    /// The provider replayed a saved error for `attempt`'s key at `now_ms`; the first sight counts.
    pub fn record(&self, attempt: &AttemptId, now_ms: i64) {
        let mut since = self.since_ms.lock().expect("spent keys lock");
        if since.len() >= SPENT_KEYS_MAX && !since.contains_key(attempt) {
            since.clear();
        }
        since.entry(attempt.clone()).or_insert(now_ms);
    }

    pub fn is_spent(&self, attempt: &AttemptId) -> bool {
        self.since_ms.lock().expect("spent keys lock").contains_key(attempt)
    }

    /// Whether `attempt`'s key was seen spent at or before `at_ms`.
    pub fn spent_before(&self, attempt: &AttemptId, at_ms: i64) -> bool {
        self.since_ms.lock().expect("spent keys lock").get(attempt).is_some_and(|s| *s <= at_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_sight_of_a_spent_key_counts_and_a_later_one_does_not_move_it() {
        let keys = SpentKeys::default();
        let attempt = AttemptId::new();
        assert!(!keys.is_spent(&attempt));
        keys.record(&attempt, 1_000);
        keys.record(&attempt, 5_000);
        assert!(keys.is_spent(&attempt));
        assert!(keys.spent_before(&attempt, 1_000));
        assert!(!keys.spent_before(&attempt, 999));
    }
}
