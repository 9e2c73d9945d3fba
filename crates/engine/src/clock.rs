//! The clock port: the engine reads time only through it, so the simulator can drive time and every worker measures windows on the database's clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use crate::store::StoreError;

/// How far a worker's own clock may be from the database's before it makes no provider create: a
/// create judged inside the key window on a clock that far off could land after another worker,
/// reading the database's time, proved the attempt dead.
pub const CLOCK_SKEW_MAX_MS: i64 = 5_000;
/// How often a worker measures its clock against the database's.
pub const CLOCK_MEASURE_INTERVAL_MS: u64 = 1_000;
/// A reading whose round trip took longer says little about the offset: kept out.
const READING_ROUND_TRIP_MAX_MS: i64 = 2_000;

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Whether this clock is known to be within `CLOCK_SKEW_MAX_MS` of the database's: what a
    /// provider create needs. Clocks that are the database's by construction always are.
    fn in_step(&self) -> bool {
        true
    }
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

/// Where the database's time is read: the stores, and the tests' fakes.
#[async_trait]
pub trait DatabaseTime: Send + Sync + 'static {
    /// The database server's own clock, in milliseconds since the Unix epoch.
    async fn database_now_ms(&self) -> Result<i64, StoreError>;
}

/// The database's time as one worker reads it: its own clock plus the offset last measured against
/// the database, so every window (the provider key window, leases, unresolved ages) is measured on
/// one clock whichever worker stamps or judges it. It is in step while the last measurement found
/// the worker's own clock within `CLOCK_SKEW_MAX_MS` of the database's.
pub struct DatabaseClock {
    local: Arc<dyn Clock>,
    offset_ms: AtomicI64,
    in_step: AtomicBool,
    /// Whether a measurement ever succeeded (the first one out of step is said too).
    measured: AtomicBool,
}

impl DatabaseClock {
    /// Not in step until its first measurement.
    pub fn new(local: Arc<dyn Clock>) -> DatabaseClock {
        DatabaseClock {
            local,
            offset_ms: AtomicI64::new(0),
            in_step: AtomicBool::new(false),
            measured: AtomicBool::new(false),
        }
    }

    /// Reads the database's time once and takes the offset from it: the reading is placed in the
    /// middle of its round trip on the worker's clock. Returns the offset (database minus worker).
    pub async fn measure(&self, database: &dyn DatabaseTime) -> Result<i64, StoreError> {
        let before_ms = self.local.now_ms();
        let database_ms = database.database_now_ms().await?;
        let after_ms = self.local.now_ms();
        let round_trip_ms = after_ms - before_ms;
        if !(0..=READING_ROUND_TRIP_MAX_MS).contains(&round_trip_ms) {
            return Err(StoreError::Unavailable(format!(
                "the database's time took {round_trip_ms} ms to read: no offset taken from it"
            )));
        }
        let offset_ms = database_ms - (before_ms + round_trip_ms / 2);
        self.offset_ms.store(offset_ms, Ordering::SeqCst);
        let in_step = offset_ms.abs() + round_trip_ms / 2 <= CLOCK_SKEW_MAX_MS;
        let was_in_step = self.in_step.swap(in_step, Ordering::SeqCst);
        let first = !self.measured.swap(true, Ordering::SeqCst);
        metrics::gauge!("payoutd_clock_offset_ms").set(offset_ms as f64);
        if !in_step {
            metrics::counter!("payoutd_clock_out_of_step_total").increment(1);
        }
        // Said when it changes, not every second.
        if !in_step && (was_in_step || first) {
            tracing::warn!(
                offset_ms,
                bound_ms = CLOCK_SKEW_MAX_MS,
                "this process's clock is off the database's beyond the bound: no provider create until it is back"
            );
        } else if in_step && !was_in_step && !first {
            tracing::info!(
                offset_ms,
                "this process's clock is back within the bound of the database's"
            );
        }
        Ok(offset_ms)
    }

    /// A measurement that failed: the offset taken before stands, but nothing vouches for the
    /// worker's clock until the next one succeeds.
    pub fn measurement_failed(&self) {
        self.in_step.store(false, Ordering::SeqCst);
    }
}

impl Clock for DatabaseClock {
    fn now_ms(&self) -> i64 {
        self.local.now_ms() + self.offset_ms.load(Ordering::SeqCst)
    }

    fn in_step(&self) -> bool {
        self.in_step.load(Ordering::SeqCst)
    }
}
