//! The engine's real code under seeded faults: fixed seeds must show no violation, and a seed's schedule replays exactly.

use payoutd_sim::parallel::run_seeds;
use payoutd_sim::{Options, quiet_simulated_crashes, run_seed};

/// Seeds on PostgreSQL in CI (a database each; slower than the in-memory SQLite databases).
const PG_SEEDS: u64 = 5;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// The same engine on PostgreSQL (a fresh database per seed): a few seeds, the same checks, all at
/// once (a seed spends most of its time waiting for its database's commits, not computing).
#[test]
fn fixed_seeds_run_clean_on_postgres() {
    quiet_simulated_crashes();
    let options = Options { store: payoutd_sim::SimStore::Postgres, ..Options::default() };
    let mut payouts = 0;
    run_seeds(1..PG_SEEDS + 1, &options, PG_SEEDS as usize, |report| {
        assert!(
            report.violations.is_empty(),
            "seed {} on PostgreSQL: {:?}\nreplay: scripts/sim --store postgres --start {} --seeds 1 --trace",
            report.seed,
            report.violations,
            report.seed
        );
        payouts += report.payouts;
    })
    .unwrap();
    assert!(payouts > 20 * PG_SEEDS as usize, "{payouts} payouts");
}

#[test]
fn the_same_seed_replays_the_same_schedule_of_actions() {
    quiet_simulated_crashes();
    let rt = runtime();
    let trace = |seed| rt.block_on(run_seed(seed, &Options::default())).unwrap().trace;
    for seed in [1, 11] {
        let (a, b) = (trace(seed), trace(seed));
        let schedule =
            |t: &[String]| t.iter().filter(|l| l.starts_with("step ")).cloned().collect::<Vec<_>>();
        assert!(schedule(&a).len() > 100);
        assert_eq!(schedule(&a), schedule(&b), "seed {seed}");
        // Up to the first action that runs workers concurrently (whose interleaving is the threads'),
        // everything replays, the payouts' ids too: the provider's faults are hashed from them.
        let until_a_race = |t: &[String]| {
            t.iter()
                .take_while(|l| !l.contains("both workers") && !l.contains("racing"))
                .cloned()
                .collect::<Vec<_>>()
        };
        let (a, b) = (until_a_race(&a), until_a_race(&b));
        assert!(
            a.iter().any(|l| l.contains(" -> po_")),
            "seed {seed} creates a payout before a race"
        );
        assert_eq!(a, b, "seed {seed}");
    }
}
