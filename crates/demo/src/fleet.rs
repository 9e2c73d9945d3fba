//! A fleet of `payoutd worker` processes on one database, SIGKILLed at random intervals (one at a time, sometimes all at once) and restarted as a supervisor would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::process::Child;

use crate::rng::Rng;
use crate::server::{Launcher, sigkill, terminate};

/// Time between two kills, drawn uniformly from this range.
pub const KILL_EVERY_MS_MIN: u64 = 2_000;
pub const KILL_EVERY_MS_MAX: u64 = 8_000;
/// A killed worker is started again after up to this long (a supervisor's restart delay).
pub const RESTART_AFTER_MS_MAX: u64 = 1_500;
/// One kill in this many takes every worker down at once (a host crash, a bad deploy).
pub const KILL_ALL_ONE_IN: u64 = 6;
/// A failed start is tried again after this long.
pub const RESPAWN_RETRY_MS: u64 = 1_000;
const WATCH_MS: u64 = 50;
/// Each slot's wall clock, off the database's by this many seconds (slot `i` takes entry
/// `i % len`): one in step, one a little ahead (within the 5 s bound, corrected by the database's
/// clock), one far behind (out of step: it makes no provider create).
pub const WORKER_CLOCK_SKEW_SECS: [i64; 3] = [0, 3, -8];

fn clock_skew_secs(slot: usize) -> i64 {
    WORKER_CLOCK_SKEW_SECS[slot % WORKER_CLOCK_SKEW_SECS.len()]
}

pub fn log_name(slot: usize) -> String {
    format!("worker-{slot}.log")
}

/// What the fleet went through.
#[derive(Debug, Default)]
pub struct FleetReport {
    pub kills: u64,
    /// Kills that took every worker down together (each counted in `kills` once per worker).
    pub kill_all_events: u64,
    pub restarts: u64,
    /// Workers that exited without being killed: payoutd misbehaving (or the host).
    pub exited_on_their_own: Vec<String>,
    pub start_failures: Vec<String>,
    /// At the end: workers that stopped on SIGTERM, and those that had to be killed.
    pub stopped_gracefully: usize,
    pub stopped_hard: usize,
    /// The largest skew of a worker's wall clock the run had, in milliseconds.
    pub clock_skew_ms_max: i64,
}

pub struct Fleet {
    launcher: Launcher,
    slots: Vec<Option<Child>>,
    rng: Rng,
    kills: Arc<AtomicU64>,
}

impl Fleet {
    /// Starts `count` workers, each logging to [`log_name`] in the launcher's directory.
    pub fn start(launcher: Launcher, count: usize, rng: Rng) -> anyhow::Result<Fleet> {
        let slots = (0..count)
            .map(|i| launcher.spawn_worker_skewed(&log_name(i), clock_skew_secs(i)).map(Some))
            .collect::<anyhow::Result<_>>()?;
        Ok(Fleet { launcher, slots, rng, kills: Arc::new(AtomicU64::new(0)) })
    }

    /// Kills so far, readable while [`Fleet::run`] owns the fleet.
    pub fn kill_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.kills)
    }

    fn kill_delay(&mut self) -> Duration {
        Duration::from_millis(self.rng.between(KILL_EVERY_MS_MIN, KILL_EVERY_MS_MAX))
    }

    /// Kills and restarts until `stop` is set, then stops every worker with SIGTERM.
    pub async fn run(mut self, stop: Arc<AtomicBool>) -> FleetReport {
        let clock_skew_ms_max =
            (0..self.slots.len()).map(|i| clock_skew_secs(i).abs() * 1_000).max().unwrap_or(0);
        let mut report = FleetReport { clock_skew_ms_max, ..FleetReport::default() };
        let mut next_kill = Instant::now() + self.kill_delay();
        // (when, slot): workers to start again.
        let mut restarts: Vec<(Instant, usize)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            for (i, slot) in self.slots.iter_mut().enumerate() {
                let exited = slot.as_mut().and_then(|child| child.try_wait().ok().flatten());
                if let Some(status) = exited {
                    report
                        .exited_on_their_own
                        .push(format!("worker {i} exited with {status} (see {})", log_name(i)));
                    *slot = None;
                    restarts.push((now, i));
                }
            }
            let (due, later): (Vec<_>, Vec<_>) =
                restarts.into_iter().partition(|(at, _)| *at <= now);
            restarts = later;
            for (_, i) in due {
                match self.launcher.spawn_worker_skewed(&log_name(i), clock_skew_secs(i)) {
                    Ok(child) => {
                        self.slots[i] = Some(child);
                        report.restarts += 1;
                    }
                    Err(e) => {
                        report.start_failures.push(format!("worker {i}: {e:#}"));
                        restarts.push((now + Duration::from_millis(RESPAWN_RETRY_MS), i));
                    }
                }
            }
            if now >= next_kill {
                let live: Vec<usize> =
                    (0..self.slots.len()).filter(|&i| self.slots[i].is_some()).collect();
                let victims = if live.len() > 1 && self.rng.below(KILL_ALL_ONE_IN) == 0 {
                    report.kill_all_events += 1;
                    live
                } else if live.is_empty() {
                    Vec::new()
                } else {
                    vec![live[self.rng.below(live.len() as u64) as usize]]
                };
                for i in victims {
                    if let Some(child) = self.slots[i].take() {
                        // A kill that fails leaves a process we no longer track; it is killed on drop.
                        let _ = sigkill(child).await;
                        report.kills += 1;
                        self.kills.fetch_add(1, Ordering::Relaxed);
                        let after = Duration::from_millis(self.rng.below(RESTART_AFTER_MS_MAX + 1));
                        restarts.push((Instant::now() + after, i));
                    }
                }
                next_kill = Instant::now() + self.kill_delay();
            }
            tokio::time::sleep(Duration::from_millis(WATCH_MS)).await;
        }
        let stops: Vec<_> = self.slots.iter_mut().filter_map(Option::take).map(terminate).collect();
        for graceful in futures_join_all(stops).await {
            if graceful {
                report.stopped_gracefully += 1;
            } else {
                report.stopped_hard += 1;
            }
        }
        report
    }
}

/// Awaits all, concurrently (no `futures` dependency for one call).
async fn futures_join_all<F: std::future::Future<Output = bool> + Send + 'static>(
    futures: Vec<F>,
) -> Vec<bool> {
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.unwrap_or(false));
    }
    out
}
