//! The simulator must be able to fail: each deliberate bug is caught within a bounded number of seeds.

use payoutd_sim::{Defect, Options, quiet_simulated_crashes, run_seed};

/// If a defect survives this many seeds, the simulator is too weak to trust.
const SEEDS_TO_CATCH_MAX: u64 = 50;

/// One test, sequential: the unconditional-update defect is a process-wide switch of the store.
#[test]
fn each_deliberate_defect_is_caught() {
    quiet_simulated_crashes();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for (defect, _) in Defect::ALL {
        let options = Options { defect: Some(defect), ..Options::default() };
        let caught = (1..=SEEDS_TO_CATCH_MAX).find_map(|seed| {
            let report = rt.block_on(run_seed(seed, &options)).unwrap();
            (!report.violations.is_empty()).then(|| (seed, report.violations[0].clone()))
        });
        let (seed, violation) = caught
            .unwrap_or_else(|| panic!("{defect:?} went unnoticed for {SEEDS_TO_CATCH_MAX} seeds"));
        println!("{defect:?}: caught at seed {seed}: {violation}");
    }
    payoutd_store::defects::set_unconditional_transitions(false);
}
