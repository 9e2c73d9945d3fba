//! Per-merchant intake rate: governor's keyed rate limiter (a GCRA bucket per merchant) on the engine's clock, so that one merchant's flood of payouts cannot hold up everyone else's, and the simulator's time drives it like every other rule.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use payoutd_domain::MerchantId;

use crate::clock::Clock;

/// New payouts one merchant may create per minute in one process, by default; up to a minute's
/// worth may come at once.
pub const PAYOUTS_PER_MERCHANT_PER_MINUTE_DEFAULT: u32 = 60_000;
/// New payouts one merchant may create per clock hour, across every process (counted by the store).
pub const PAYOUTS_PER_MERCHANT_PER_HOUR_DEFAULT: u32 = 1_000_000;
/// Merchants whose state is kept; past it, those whose bucket is full again (the same as none) are
/// forgotten.
const MERCHANTS_TRACKED_MAX: usize = 100_000;

/// The engine's clock as governor's: milliseconds since the epoch as a duration.
#[derive(Clone)]
struct EngineTime(Arc<dyn Clock>);

impl GovernorClock for EngineTime {
    type Instant = Duration;

    fn now(&self) -> Duration {
        // A clock before the epoch reads as the epoch: it refills nothing.
        Duration::from_millis(u64::try_from(self.0.now_ms()).unwrap_or(0))
    }
}

/// How many new payouts each merchant may create per minute.
pub struct IntakeRate {
    clock: EngineTime,
    limiter: RateLimiter<
        MerchantId,
        DefaultKeyedStateStore<MerchantId>,
        EngineTime,
        NoOpMiddleware<Duration>,
    >,
}

impl IntakeRate {
    pub fn new(per_minute: u32, clock: Arc<dyn Clock>) -> IntakeRate {
        let per_minute =
            NonZeroU32::new(per_minute).expect("a rate of zero would refuse every payout");
        let clock = EngineTime(clock);
        let limiter = RateLimiter::new(
            Quota::per_minute(per_minute),
            DefaultKeyedStateStore::default(),
            clock.clone(),
        );
        IntakeRate { clock, limiter }
    }

    /// Takes one new payout's place for `merchant` now; `Err` with the milliseconds until one is back.
    pub fn take(&self, merchant: &MerchantId) -> Result<(), u64> {
        if self.limiter.len() >= MERCHANTS_TRACKED_MAX {
            self.limiter.retain_recent();
        }
        self.limiter.check_key(merchant).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    struct At(AtomicI64);

    impl Clock for At {
        fn now_ms(&self) -> i64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn a_merchant_gets_a_minutes_worth_then_one_per_interval_and_others_are_untouched() {
        let clock = Arc::new(At(AtomicI64::new(1_000_000)));
        let rate = IntakeRate::new(3, clock.clone());
        let at = |ms: i64| clock.0.store(1_000_000 + ms, Ordering::SeqCst);
        let (a, b) = (MerchantId::new(), MerchantId::new());
        for _ in 0..3 {
            assert_eq!(rate.take(&a), Ok(()));
        }
        assert_eq!(rate.take(&a), Err(20_000), "one every 20 s at 3 a minute");
        assert_eq!(rate.take(&b), Ok(()), "another merchant has its own bucket");
        at(19_999);
        assert_eq!(rate.take(&a), Err(1));
        at(20_000);
        assert_eq!(rate.take(&a), Ok(()));
        at(10_000);
        assert!(rate.take(&a).is_err(), "a clock that went back refills nothing");
        for ms in (20_001..39_999).step_by(7) {
            at(ms);
            assert!(rate.take(&a).is_err(), "asking often neither refills faster nor starves");
        }
        at(40_000);
        assert_eq!(rate.take(&a), Ok(()));
    }
}
