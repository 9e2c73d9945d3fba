//! The simulator must be able to fail: each deliberate bug is caught within a bounded number of seeds.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use payoutd_sim::parallel::default_jobs;
use payoutd_sim::{Defect, Options, quiet_simulated_crashes, run_seed};

/// If a defect survives this many seeds, the simulator is too weak to trust.
const SEEDS_TO_CATCH_MAX: u64 = 50;

/// The first seed of 1..=SEEDS_TO_CATCH_MAX whose run reports a violation, on a runtime of its own.
fn caught(defect: Defect) -> (u64, String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let options = Options { defect: Some(defect), ..Options::default() };
    (1..=SEEDS_TO_CATCH_MAX)
        .find_map(|seed| {
            let report = rt.block_on(run_seed(seed, &options)).unwrap();
            (!report.violations.is_empty()).then(|| (seed, report.violations[0].to_string()))
        })
        .unwrap_or_else(|| panic!("{defect:?} went unnoticed for {SEEDS_TO_CATCH_MAX} seeds"))
}

/// One test. The unconditional-update defect is a process-wide switch of the store that every
/// seed run sets (on for that defect, off for the others), so it runs alone, after the others;
/// the others run on every CPU at once, a defect at a time per thread.
#[test]
fn each_deliberate_defect_is_caught() {
    quiet_simulated_crashes();
    let (alone, together): (Vec<Defect>, Vec<Defect>) = Defect::ALL
        .iter()
        .map(|(defect, _)| *defect)
        .partition(|defect| *defect == Defect::UnconditionalUpdate);
    let next = AtomicUsize::new(0);
    let found = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..default_jobs().min(together.len()) {
            scope.spawn(|| {
                while let Some(defect) = together.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let catch = caught(*defect);
                    found.lock().unwrap().push((*defect, catch));
                }
            });
        }
    });
    let mut found = found.into_inner().unwrap();
    found.extend(alone.into_iter().map(|defect| (defect, caught(defect))));
    payoutd_store::defects::set_unconditional_transitions(false);
    assert_eq!(found.len(), Defect::ALL.len(), "every defect was tried");
    found.sort_by_key(|(defect, _)| Defect::ALL.iter().position(|(listed, _)| listed == defect));
    for (defect, (seed, violation)) in found {
        println!("{defect:?}: caught at seed {seed}: {violation}");
    }
}
