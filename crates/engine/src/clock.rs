//! The clock port: the engine reads time only through it, so the simulator can drive time.

use std::time::{SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// Wall-clock time for production.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970");
        i64::try_from(since.as_millis()).expect("milliseconds fit in i64")
    }
}
