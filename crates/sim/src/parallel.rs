//! Runs seeds on several threads at once, one seed runner per CPU, and hands the reports back in seed order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

use crate::run::{Options, SeedReport, run_seed};

/// Seed runners at most, whatever the machine says it has.
pub const JOBS_MAX: usize = 64;

/// One runner per CPU this process may use (at least one, at most `JOBS_MAX`).
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map(usize::from).unwrap_or(1).clamp(1, JOBS_MAX)
}

/// Runs `seeds` on `jobs` threads and calls `on_report` for each seed in increasing order.
///
/// Each runner has its own single-threaded runtime and is pinned to one CPU before it opens any
/// database: SQLite's connection threads inherit the pin, so the many small handoffs between the
/// engine and its store stay on one CPU instead of waking another (a cross-CPU wakeup costs more
/// than the statement on a virtual machine). A seed's schedule depends only on its seed, so the
/// reports are the same as on one thread.
pub fn run_seeds(
    seeds: std::ops::Range<u64>,
    options: &Options,
    jobs: usize,
    mut on_report: impl FnMut(SeedReport),
) -> anyhow::Result<()> {
    let jobs = jobs.clamp(1, JOBS_MAX);
    let cpus = core_affinity::get_core_ids().unwrap_or_default();
    let (tx, rx) = mpsc::channel::<(u64, anyhow::Result<SeedReport>)>();
    let mut handles = Vec::with_capacity(jobs);
    // Seeds are handed out one at a time: their lengths differ, and a free runner takes the next.
    let next_seed = Arc::new(AtomicU64::new(seeds.start));
    for job in 0..jobs {
        let tx = tx.clone();
        let options = options.clone();
        let cpu = cpus.get(job % cpus.len().max(1)).copied();
        let next_seed = next_seed.clone();
        let end = seeds.end;
        handles.push(std::thread::spawn(move || {
            if let Some(cpu) = cpu {
                // Best effort: an unpinned runner is only slower.
                core_affinity::set_for_current(cpu);
            }
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = tx.send((next_seed.load(Ordering::SeqCst), Err(e.into())));
                    return;
                }
            };
            loop {
                let seed = next_seed.fetch_add(1, Ordering::SeqCst);
                if seed >= end {
                    return;
                }
                let report = runtime.block_on(run_seed(seed, &options));
                let failed = report.is_err();
                if tx.send((seed, report)).is_err() || failed {
                    return;
                }
            }
        }));
    }
    drop(tx);
    let mut waiting: BTreeMap<u64, SeedReport> = BTreeMap::new();
    let mut next = seeds.start;
    let mut error = None;
    for (seed, report) in rx {
        match report {
            Ok(report) => {
                waiting.insert(seed, report);
            }
            Err(e) => {
                error.get_or_insert(e.context(format!("seed {seed}")));
            }
        }
        while let Some(report) = waiting.remove(&next) {
            on_report(report);
            next += 1;
        }
    }
    for handle in handles {
        if handle.join().is_err() {
            error
                .get_or_insert(anyhow::anyhow!("a seed runner panicked outside a simulated crash"));
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
