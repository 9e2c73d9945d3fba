//! Randomness for the harness: a seeded generator (rand's `StdRng`, so a run's fault and kill decisions can be replayed by seed) and OS random bytes for tags and keys.

use rand::rngs::StdRng;
use rand::{Rng as _, RngCore, SeedableRng, TryRngCore};

/// The harness's picks of faults and kill times; never used for keys.
#[derive(Debug, Clone)]
pub struct Rng(StdRng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(StdRng::seed_from_u64(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.0.random_range(0..n) }
    }

    /// Uniform in `lo..=hi` (`lo` when the range is empty).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo { lo } else { self.0.random_range(lo..=hi) }
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1_000) < per_mille
    }

    /// An independent generator for another task, derived from this one.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

/// Random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> anyhow::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    rand::rngs::OsRng.try_fill_bytes(&mut bytes)?;
    Ok(bytes)
}

/// A count flag's parser: a whole number within `min..=max`, with clap's own error otherwise.
pub fn count_in(min: usize, max: usize) -> impl clap::builder::TypedValueParser<Value = usize> {
    let (lo, hi) =
        (u64::try_from(min).expect("a small bound"), u64::try_from(max).expect("a small bound"));
    clap::builder::RangedU64ValueParser::<usize>::new().range(lo..=hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_bounds_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1_000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.between(3, 5);
            assert!((3..=5).contains(&x));
            b.between(3, 5);
        }
        assert_eq!(Rng::new(1).below(0), 0);
        assert_eq!(Rng::new(1).between(5, 5), 5);
    }
}
