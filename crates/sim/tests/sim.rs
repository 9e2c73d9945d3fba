//! The engine's real code under seeded faults: fixed seeds must show no violation, and a seed's schedule replays exactly.

use payoutd_sim::parallel::{default_jobs, run_seeds};
use payoutd_sim::{quiet_simulated_crashes, run_seed, Options};

/// Seeds in CI: about three minutes of a debug build on two CPUs; `scripts/sim --seeds N` runs more.
const CI_SEEDS: u64 = 500;
/// Seeds on PostgreSQL in CI (a database each; slower than the in-memory SQLite databases).
const PG_SEEDS: u64 = 5;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn fixed_seeds_run_clean_through_faults_crashes_reorgs_and_races() {
    quiet_simulated_crashes();
    let (mut payouts, mut faults, mut crashes, mut transfers, mut next_attempts) = (0, 0, 0, 0, 0);
    let mut violations = Vec::new();
    run_seeds(1..CI_SEEDS + 1, &Options::default(), default_jobs(), |report| {
        if !report.violations.is_empty() {
            violations.push(format!(
                "seed {} violated the promise: {:?}\nreplay: scripts/sim --start {} --seeds 1 --trace",
                report.seed, report.violations, report.seed
            ));
        }
        payouts += report.payouts;
        faults += report.faults;
        crashes += report.crashes;
        transfers += report.transfers;
        next_attempts += report.attempts_after_death;
    })
    .unwrap();
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    // The run must actually have exercised the pipeline under faults, or a clean result means nothing.
    assert!(payouts > 20 * CI_SEEDS as usize, "{payouts} payouts");
    assert!(faults > 10 * CI_SEEDS, "{faults} faults");
    assert!(crashes > CI_SEEDS / 2, "{crashes} crashes");
    assert!(transfers > 15 * CI_SEEDS as usize, "{transfers} transfers");
    assert!(next_attempts > CI_SEEDS / 2, "{next_attempts} attempts after a proven death: the path must be exercised");
}

/// The same engine on PostgreSQL (a fresh database per seed): a few seeds, the same checks.
#[test]
fn fixed_seeds_run_clean_on_postgres() {
    quiet_simulated_crashes();
    let rt = runtime();
    let options = Options { store: payoutd_sim::SimStore::Postgres, ..Options::default() };
    let mut payouts = 0;
    for seed in 1..=PG_SEEDS {
        let report = rt.block_on(run_seed(seed, &options)).unwrap();
        assert!(report.violations.is_empty(), "seed {seed} on PostgreSQL: {:?}\nreplay: scripts/sim --store postgres --start {seed} --seeds 1 --trace", report.violations);
        payouts += report.payouts;
    }
    assert!(payouts > 20 * PG_SEEDS as usize, "{payouts} payouts");
}

#[test]
fn the_same_seed_replays_the_same_schedule_of_actions() {
    quiet_simulated_crashes();
    let rt = runtime();
    let schedule = |seed| {
        let report = rt.block_on(run_seed(seed, &Options::default())).unwrap();
        report.trace.into_iter().filter(|l| l.starts_with("step ")).collect::<Vec<_>>()
    };
    for seed in [3, 11] {
        let (a, b) = (schedule(seed), schedule(seed));
        assert!(a.len() > 100);
        assert_eq!(a, b, "seed {seed}");
    }
}
