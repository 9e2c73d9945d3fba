//! Per-merchant intake rate: a token bucket per merchant in this process, so that one merchant's flood of payouts cannot hold up everyone else's.

use std::collections::HashMap;
use std::sync::Mutex;

use payoutd_domain::MerchantId;

/// New payouts one merchant may create per minute in one process, by default; up to a minute's
/// worth may come at once.
pub const PAYOUTS_PER_MERCHANT_PER_MINUTE_DEFAULT: u32 = 60_000;
/// Merchants whose buckets are kept; past it, full buckets (the same as none) are forgotten.
const MERCHANTS_TRACKED_MAX: usize = 100_000;
/// A token is counted in 60,000 units, so that each elapsed millisecond adds exactly `per_minute`
/// units: no rounding, however often a merchant asks.
const UNITS_PER_TOKEN: u128 = 60_000;

/// How many new payouts each merchant may create per minute.
pub struct IntakeRate {
    per_minute: u32,
    buckets: Mutex<HashMap<MerchantId, Bucket>>,
}

struct Bucket {
    units: u128,
    at_ms: i64,
}

impl IntakeRate {
    pub fn new(per_minute: u32) -> IntakeRate {
        assert!(per_minute > 0, "a rate of zero would refuse every payout");
        IntakeRate { per_minute, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one new payout's token for `merchant` at `now_ms`; `Err` with the milliseconds until
    /// one is back.
    pub fn take(&self, merchant: &MerchantId, now_ms: i64) -> Result<(), u64> {
        let mut buckets = self.buckets.lock().expect("intake rate lock");
        if buckets.len() >= MERCHANTS_TRACKED_MAX && !buckets.contains_key(merchant) {
            buckets.retain(|_, b| self.refilled(b, now_ms) < self.capacity());
        }
        let bucket = buckets.entry(merchant.clone()).or_insert(Bucket { units: self.capacity(), at_ms: now_ms });
        bucket.units = self.refilled(bucket, now_ms);
        bucket.at_ms = bucket.at_ms.max(now_ms);
        if bucket.units >= UNITS_PER_TOKEN {
            bucket.units -= UNITS_PER_TOKEN;
            return Ok(());
        }
        let missing = UNITS_PER_TOKEN - bucket.units;
        Err(u64::try_from(missing.div_ceil(u128::from(self.per_minute))).unwrap_or(u64::MAX))
    }

    fn capacity(&self) -> u128 {
        u128::from(self.per_minute) * UNITS_PER_TOKEN
    }

    /// What `bucket` holds at `now_ms` (a clock that went back refills nothing).
    fn refilled(&self, bucket: &Bucket, now_ms: i64) -> u128 {
        let elapsed_ms = u128::try_from(now_ms.saturating_sub(bucket.at_ms)).unwrap_or(0);
        bucket.units.saturating_add(elapsed_ms * u128::from(self.per_minute)).min(self.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merchant_gets_a_minutes_worth_then_one_per_interval_and_others_are_untouched() {
        let rate = IntakeRate::new(3);
        let (a, b) = (MerchantId::new(), MerchantId::new());
        for _ in 0..3 {
            assert_eq!(rate.take(&a, 0), Ok(()));
        }
        assert_eq!(rate.take(&a, 0), Err(20_000), "one token every 20 s at 3 a minute");
        assert_eq!(rate.take(&b, 0), Ok(()), "another merchant has its own bucket");
        assert_eq!(rate.take(&a, 19_999), Err(1));
        assert_eq!(rate.take(&a, 20_000), Ok(()));
        assert_eq!(rate.take(&a, 10_000), Err(20_000), "a clock that went back refills nothing");
        for ms in (20_001..39_999).step_by(7) {
            assert!(rate.take(&a, ms).is_err(), "asking often neither refills faster nor starves");
        }
        assert_eq!(rate.take(&a, 40_000), Ok(()));
    }
}
