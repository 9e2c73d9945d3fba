//! What reads at finality prove, for any rail whose attempt is consumed by a value moving on chain (a durable nonce) or proven absent by a status search: a value that disagrees is a move only once seen again a finalization later, and "not found" counts only in a history that reaches back to the signing.

use std::collections::HashMap;
use std::sync::Mutex;

use payoutd_domain::AttemptId;

/// Sightings remembered at most; past it the memory starts over, which only delays deaths.
pub const SIGHTINGS_MAX: usize = 10_000;

/// A value read at finality that was not the one the attempt was signed against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sighting<V> {
    pub value: V,
    /// The chain's height (at its newest commitment) when the value was first seen.
    pub at_height: u64,
}

/// What one read of the value at finality means, given the sighting remembered before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizedLook<V> {
    /// The value the attempt was signed against: it can still land; a sighting (of a value that
    /// was behind) is forgotten.
    Live,
    /// Another value, not the one seen before (or none was): remember it and wait. A value read at
    /// finality may be *behind* the signed one (finality lags the newest block), so only a value
    /// seen again once finality has passed its first sighting is a move.
    Sight,
    /// The value seen before, still there: a move once finality passes the sighting's height.
    Seen(Sighting<V>),
}

/// Values are compared for equality only: a nonce's values have no order.
pub fn look<V: PartialEq + Copy>(
    signed: V,
    finalized_now: V,
    before: Option<Sighting<V>>,
) -> FinalizedLook<V> {
    match before {
        _ if finalized_now == signed => FinalizedLook::Live,
        Some(sighting) if sighting.value == finalized_now => FinalizedLook::Seen(sighting),
        _ => FinalizedLook::Sight,
    }
}

/// Whether a status search that found none of an attempt's signatures proves they never landed:
/// only when the node's history begins at or below the height the attempt was signed at (a node
/// restored from a snapshot, or one that prunes, knows nothing older than its first block).
pub fn absence_is_proof(first_available_height: u64, signed_at_height: u64) -> bool {
    first_available_height <= signed_at_height
}

/// Each attempt's sighting, kept by the rail between status checks (process memory: a restart
/// forgets them, which only delays deaths).
#[derive(Debug)]
pub struct Sightings<V> {
    seen: Mutex<HashMap<AttemptId, Sighting<V>>>,
}

impl<V: Copy> Default for Sightings<V> {
    fn default() -> Self {
        Sightings { seen: Mutex::new(HashMap::new()) }
    }
}

impl<V: Copy> Sightings<V> {
    pub fn of(&self, attempt: &AttemptId) -> Option<Sighting<V>> {
        self.seen.lock().expect("sightings lock").get(attempt).copied()
    }

    pub fn remember(&self, attempt: &AttemptId, sighting: Sighting<V>) {
        let mut seen = self.seen.lock().expect("sightings lock");
        if seen.len() >= SIGHTINGS_MAX {
            seen.clear();
        }
        seen.insert(attempt.clone(), sighting);
    }

    pub fn forget(&self, attempt: &AttemptId) {
        self.seen.lock().expect("sightings lock").remove(attempt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_behind_the_signed_one_is_only_a_sighting_and_is_forgotten_once_caught_up() {
        let (behind, signed, moved) = (1u8, 2u8, 3u8);
        assert_eq!(look(signed, behind, None), FinalizedLook::Sight);
        let sighting = Sighting { value: behind, at_height: 10 };
        assert_eq!(
            look(signed, signed, Some(sighting)),
            FinalizedLook::Live,
            "caught up: the sighting goes"
        );
        // A later real move is a new sighting, not a move seen before.
        assert_eq!(look(signed, moved, Some(sighting)), FinalizedLook::Sight);
        let sighting = Sighting { value: moved, at_height: 20 };
        assert_eq!(look(signed, moved, Some(sighting)), FinalizedLook::Seen(sighting));
    }

    #[test]
    fn absence_proves_something_only_in_a_history_that_reaches_the_signing() {
        assert!(absence_is_proof(0, 100));
        assert!(absence_is_proof(100, 100));
        assert!(!absence_is_proof(101, 100));
    }
}
