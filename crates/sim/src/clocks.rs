//! Each simulated worker's own clock, off the database's by an offset drawn from the seed, and the database's clock that the worker measures its windows on (with the deliberate defect, its own instead).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use payoutd_engine::store::StoreError;
use payoutd_engine::{Clock, DatabaseClock, DatabaseTime};
use sha2::{Digest, Sha256};

/// How far a worker's clock may be off the database's, in milliseconds: beyond the engine's bound
/// (`CLOCK_SKEW_MAX_MS`), so a worker can be out of step and must then make no provider create, and
/// beyond the provider rail's margin (11 s here), so a worker that judged the key window on its own
/// clock would create after the provider forgot the key, or prove death while a create can land.
pub const CLOCK_OFFSET_MS_MAX: i64 = 30_000;

/// Most draws keep a clock within this of the database's (in step, its offset corrected).
pub const NEAR_OFFSET_MS_MAX: i64 = 4_000;
/// Per cent of draws that put a clock up to `CLOCK_OFFSET_MS_MAX` off.
pub const FAR_OFF_PERCENT: u32 = 25;

/// The simulated database's clock: the one every window is measured on.
pub struct SimClock(pub AtomicI64);

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A worker machine's own clock: the database's plus an offset that drifts.
struct WorkerClock {
    database: Arc<SimClock>,
    offset_ms: AtomicI64,
}

impl Clock for WorkerClock {
    fn now_ms(&self) -> i64 {
        self.database.now_ms() + self.offset_ms.load(Ordering::SeqCst)
    }
}

/// The database's time as the store would answer it: the simulated clock.
struct SimDatabaseTime(Arc<SimClock>);

#[async_trait]
impl DatabaseTime for SimDatabaseTime {
    async fn database_now_ms(&self) -> Result<i64, StoreError> {
        Ok(self.0.now_ms())
    }
}

/// Every worker's clock and, unless the defect is on, the database clock it reads time from.
pub struct WorkerClocks {
    seed: u64,
    own: Vec<Arc<WorkerClock>>,
    read: Vec<Option<Arc<DatabaseClock>>>,
    database: SimDatabaseTime,
    skew_ms_max: AtomicI64,
}

impl WorkerClocks {
    /// `workers` clocks that read the database's time through a `DatabaseClock`.
    pub fn measured(seed: u64, database: &Arc<SimClock>, workers: usize) -> WorkerClocks {
        let mut clocks = WorkerClocks::own(seed, database, workers);
        clocks.read = clocks
            .own
            .iter()
            .map(|own| Some(Arc::new(DatabaseClock::new(own.clone() as Arc<dyn Clock>))))
            .collect();
        clocks
    }

    /// The deliberate defect: every worker reads its own clock.
    pub fn own(seed: u64, database: &Arc<SimClock>, workers: usize) -> WorkerClocks {
        let own = (0..workers)
            .map(|_| {
                Arc::new(WorkerClock { database: database.clone(), offset_ms: AtomicI64::new(0) })
            })
            .collect();
        let clocks = WorkerClocks {
            seed,
            own,
            read: vec![None; workers],
            database: SimDatabaseTime(database.clone()),
            skew_ms_max: AtomicI64::new(0),
        };
        clocks.drift(0);
        clocks
    }

    /// What worker `worker` reads time from.
    pub fn of(&self, worker: usize) -> Arc<dyn Clock> {
        match &self.read[worker] {
            Some(measured) => measured.clone(),
            None => self.own[worker].clone(),
        }
    }

    /// Each worker's offset drawn again for `step` (hashed from the seed: the schedule stays).
    pub fn drift(&self, step: usize) {
        for (worker, own) in self.own.iter().enumerate() {
            let digest = Sha256::digest(format!("{}:clock:{worker}:{step}", self.seed).as_bytes());
            let bound = if u32::from(digest[2]) * 100 / 256 < FAR_OFF_PERCENT {
                CLOCK_OFFSET_MS_MAX
            } else {
                NEAR_OFFSET_MS_MAX
            };
            let draw = i64::from(u16::from_be_bytes([digest[0], digest[1]]));
            let offset_ms = draw * (2 * bound + 1) / 65_536 - bound;
            own.offset_ms.store(offset_ms, Ordering::SeqCst);
            self.skew_ms_max.fetch_max(offset_ms.abs(), Ordering::SeqCst);
        }
    }

    /// The worker measures its clock against the database's, as its process does every second.
    pub async fn measure(&self, worker: usize) {
        if let Some(measured) = &self.read[worker] {
            measured.measure(&self.database).await.expect("the simulated database tells its time");
        }
    }

    /// Every worker measures its clock.
    pub async fn measure_all(&self) {
        for worker in 0..self.own.len() {
            self.measure(worker).await;
        }
    }

    /// Every clock set right (the operator fixed time sync), and measured again.
    pub async fn heal(&self) {
        for (worker, own) in self.own.iter().enumerate() {
            own.offset_ms.store(0, Ordering::SeqCst);
            self.measure(worker).await;
        }
    }

    /// The largest distance of any worker's clock from the database's so far.
    pub fn skew_ms_max(&self) -> i64 {
        self.skew_ms_max.load(Ordering::SeqCst)
    }
}
