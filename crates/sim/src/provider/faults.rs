//! A simulated provider's fault rates, drawn from its seed: what can go wrong, and how often.

use sha2::{Digest, Sha256};

/// The most a seed's provider saves errors for keys, and answers unknown errors, per mille of first
/// creates.
const SAVED_ERROR_PER_MILLE_MAX: u32 = 120;
const UNKNOWN_ERROR_PER_MILLE_MAX: u32 = 120;

/// Per mille of each fault while faults are on.
#[derive(Debug, Clone, Copy)]
pub struct ProviderFaults {
    /// A stretch of `OUTAGE_STRETCH_MS` in which every create fails with a 5xx, nothing made.
    pub outage: u32,
    /// A 5xx before the provider does anything.
    pub ambiguous_before: u32,
    /// The transfer is made, the answer is lost (timeout, reset).
    pub answer_lost: u32,
    /// A retry (a known key) refused with a 400 before the key is looked at.
    pub refused_retry: u32,
    /// The first create is refused (validation): nothing made, nothing saved.
    pub refused_first: u32,
    /// A made transfer shows in lists only after a lag (up to `LOOKUP_LAG_MS_MAX`).
    pub lag: u32,
    /// A lookup or list fails.
    pub read_error: u32,
    /// A lookup by reference stops short on a busy account (the rail must call it unknown).
    pub partial_scan: u32,
    /// A made transfer fails instead of completing.
    pub fails: u32,
    /// The provider breaks its documented contract: a create whose answer is lost is queued and made
    /// only `LATE_CREATE_AFTER_MS` later (unless its key was used meanwhile). No rail can prove that
    /// attempt dead for sure; payoutd must find the second payment and report it.
    pub late: u32,
    /// A made transfer first shows a state the adapter does not know (a person must look), for
    /// `ODD_STATE_MS` past its completion time.
    pub odd: u32,
    /// The provider makes a create twice (a retry it took as new, as documented providers may):
    /// two transfers carrying one reference, listed together; the one whose id the create
    /// answered fails, the other completes. The attempt is alive, whatever its recorded id says.
    pub twin: u32,
    /// A first create fails with a 5xx after execution began, the transfer made or not (half
    /// each), and the provider saves that error for the key: every later create with it is
    /// answered with the saved error, replayed (Stripe). The key is spent.
    pub saved_error: u32,
    /// A first create makes the transfer, then answers Circle's "unknown error" (HTTP 400, code
    /// -1), read by the Circle adapter's own classification.
    pub unknown_error: u32,
}

impl ProviderFaults {
    /// Each fault's rate, drawn from `seed` (a generator of the provider's own, so the rest of a
    /// seed's schedule stays what it was).
    pub fn seeded(seed: u64) -> ProviderFaults {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        ProviderFaults {
            outage: rng.random_range(0..500),
            ambiguous_before: rng.random_range(0..300),
            answer_lost: rng.random_range(200..500),
            refused_retry: rng.random_range(200..600),
            refused_first: rng.random_range(0..60),
            lag: rng.random_range(500..1000),
            read_error: rng.random_range(0..100),
            partial_scan: rng.random_range(0..100),
            fails: rng.random_range(0..80),
            late: rng.random_range(40..200),
            odd: rng.random_range(20..150),
            twin: rng.random_range(20..120),
            // Hashed, not drawn: the generator's draws above stay what they were.
            saved_error: hash_per_mille(&format!("{seed}:saved-error-rate"))
                % SAVED_ERROR_PER_MILLE_MAX,
            unknown_error: hash_per_mille(&format!("{seed}:unknown-error-rate"))
                % UNKNOWN_ERROR_PER_MILLE_MAX,
        }
    }
}

/// A per-mille draw that is a pure function of `text`.
pub(crate) fn hash_per_mille(text: &str) -> u32 {
    let digest = Sha256::digest(text.as_bytes());
    u32::from(u16::from_be_bytes([digest[0], digest[1]])) % 1000
}
