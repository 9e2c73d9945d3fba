//! Sign-in throttling: an address that failed to sign in too often is refused for a while, even with the right key, so the operator key cannot be guessed at request speed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Failed sign-ins one client address may make within `SIGN_IN_WINDOW_MS`.
pub const SIGN_IN_FAILURES_MAX: u32 = 5;
/// The window failures are counted in, and how long an address is refused once past them.
pub const SIGN_IN_WINDOW_MS: i64 = 15 * 60 * 1_000;
/// Addresses tracked at once; past it, those whose window is over are forgotten first.
const ADDRESSES_TRACKED_MAX: usize = 10_000;

/// Failed sign-ins per client address (`None`: an address this server could not tell).
#[derive(Default)]
pub struct SignInThrottle(Mutex<HashMap<Option<IpAddr>, Failures>>);

#[derive(Clone, Copy)]
struct Failures {
    count: u32,
    window_start_ms: i64,
}

impl SignInThrottle {
    /// When `address` may try again, if it is refused now.
    pub fn refused_until(&self, address: Option<IpAddr>, now_ms: i64) -> Option<i64> {
        let failures = *self.0.lock().expect("throttle lock").get(&address)?;
        let until = failures.window_start_ms + SIGN_IN_WINDOW_MS;
        (failures.count >= SIGN_IN_FAILURES_MAX && now_ms < until).then_some(until)
    }

    /// Counts a failed sign-in from `address`.
    pub fn failed(&self, address: Option<IpAddr>, now_ms: i64) {
        let mut all = self.0.lock().expect("throttle lock");
        if all.len() >= ADDRESSES_TRACKED_MAX {
            all.retain(|_, f| now_ms < f.window_start_ms + SIGN_IN_WINDOW_MS);
        }
        let f = all.entry(address).or_insert(Failures { count: 0, window_start_ms: now_ms });
        if now_ms >= f.window_start_ms + SIGN_IN_WINDOW_MS {
            *f = Failures { count: 0, window_start_ms: now_ms };
        }
        f.count = f.count.saturating_add(1);
    }

    /// A successful sign-in forgets the address's failures.
    pub fn succeeded(&self, address: Option<IpAddr>) {
        self.0.lock().expect("throttle lock").remove(&address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_past_its_failures_waits_out_the_window_and_others_do_not() {
        let throttle = SignInThrottle::default();
        let (a, b): (Option<IpAddr>, Option<IpAddr>) =
            (Some("203.0.113.7".parse().unwrap()), Some("203.0.113.8".parse().unwrap()));
        for i in 0..SIGN_IN_FAILURES_MAX {
            assert_eq!(throttle.refused_until(a, i64::from(i)), None);
            throttle.failed(a, i64::from(i));
        }
        assert_eq!(throttle.refused_until(a, 10), Some(SIGN_IN_WINDOW_MS));
        assert_eq!(throttle.refused_until(b, 10), None, "another address is not refused");
        assert_eq!(throttle.refused_until(a, SIGN_IN_WINDOW_MS), None, "the window is over");
        throttle.failed(a, SIGN_IN_WINDOW_MS);
        assert_eq!(
            throttle.refused_until(a, SIGN_IN_WINDOW_MS + 1),
            None,
            "a new window counts from one"
        );
    }
}
