//! When a failed delivery is tried next: exponential waits with jitter inside a round, then a later round.

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::webhook_store::DeliveryNext;

use super::WebhookConfig;

/// Tries in one round (Standard Webhooks senders retry a handful of times before giving up a round).
pub const TRIES_PER_ROUND: u32 = 5;
/// A wait is stretched or shrunk by up to this share, so endpoints that failed together are not
/// all retried in the same instant.
pub const JITTER_PERCENT: u64 = 20;

/// What follows a failed try numbered `try_no` (1-based) in `round`. `jitter_key` spreads the waits
/// (the same key gives the same wait: a replayed schedule is reproducible).
pub fn after_failure(
    config: &WebhookConfig,
    round: u32,
    try_no: u32,
    now_ms: i64,
    jitter_key: impl Hash,
) -> DeliveryNext {
    if try_no < TRIES_PER_ROUND {
        let index = usize::try_from(try_no.saturating_sub(1))
            .unwrap_or(0)
            .min(config.retry_delays_ms.len() - 1);
        let wait_ms = jittered(config.retry_delays_ms[index], jitter_key);
        return DeliveryNext::RetryAt {
            at_ms: now_ms.saturating_add(wait_ms),
            round,
            tries_in_round: try_no,
        };
    }
    if round >= config.rounds_max {
        return DeliveryNext::Abandoned;
    }
    let wait_ms = i64::try_from(config.round_interval_ms).unwrap_or(i64::MAX);
    DeliveryNext::RetryAt {
        at_ms: now_ms.saturating_add(wait_ms),
        round: round + 1,
        tries_in_round: 0,
    }
}

fn jittered(wait_ms: u64, key: impl Hash) -> i64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    let spread = wait_ms * JITTER_PERCENT / 100;
    let offset = if spread == 0 { 0 } else { hasher.finish() % (2 * spread + 1) };
    i64::try_from(wait_ms - spread + offset).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> WebhookConfig {
        WebhookConfig {
            retry_delays_ms: [1_000, 2_000, 4_000, 8_000],
            round_interval_ms: 60_000,
            rounds_max: 3,
            ..WebhookConfig::default()
        }
    }

    #[test]
    fn waits_grow_within_a_round_and_stay_within_the_jitter() {
        let c = config();
        for try_no in 1..TRIES_PER_ROUND {
            let base = c.retry_delays_ms[try_no as usize - 1] as i64;
            for key in 0..50 {
                let DeliveryNext::RetryAt { at_ms, round, tries_in_round } =
                    after_failure(&c, 1, try_no, 0, key)
                else {
                    panic!("a try inside the round is retried");
                };
                assert_eq!((round, tries_in_round), (1, try_no));
                assert!(
                    (base * 8 / 10..=base * 12 / 10).contains(&at_ms),
                    "try {try_no}: {at_ms} outside {base} +/- 20%"
                );
            }
        }
    }

    #[test]
    fn the_fifth_failure_starts_the_next_round_and_the_last_round_abandons() {
        let c = config();
        assert_eq!(
            after_failure(&c, 1, TRIES_PER_ROUND, 100, "k"),
            DeliveryNext::RetryAt { at_ms: 60_100, round: 2, tries_in_round: 0 }
        );
        assert_eq!(after_failure(&c, 3, TRIES_PER_ROUND, 100, "k"), DeliveryNext::Abandoned);
    }
}
