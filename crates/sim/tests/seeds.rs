//! Five hundred fixed seeds through faults, crashes, reorgs and races, on every CPU at once.
//!
//! A test binary of its own: its runners keep every CPU busy, and cargo runs test binaries one
//! after another, so the PostgreSQL seeds and the other simulator tests do not starve beside it.

use payoutd_sim::parallel::{default_jobs, run_seeds};
use payoutd_sim::{Options, quiet_simulated_crashes};

/// Seeds in CI: about three minutes of a debug build on two CPUs; `scripts/sim --seeds N` runs more.
const CI_SEEDS: u64 = 500;

#[test]
fn fixed_seeds_run_clean_through_faults_crashes_reorgs_and_races() {
    quiet_simulated_crashes();
    let (mut payouts, mut faults, mut crashes, mut transfers, mut next_attempts) = (0, 0, 0, 0, 0);
    let (mut solana_transfers, mut solana_next_attempts, mut durable_payouts) = (0, 0, 0);
    let (mut provider_payouts, mut provider_paid, mut provider_next_attempts, mut provider_routed) =
        (0, 0, 0, 0);
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
        solana_transfers += report.solana_transfers;
        solana_next_attempts += report.solana_attempts_after_death;
        durable_payouts += report.durable_payouts;
        provider_payouts += report.provider_payouts;
        provider_paid += report.provider_paid;
        provider_next_attempts += report.provider_attempts_after_death;
        provider_routed += report.provider_routed;
    })
    .unwrap();
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    // The run must actually have exercised the pipeline under faults, or a clean result means nothing.
    assert!(payouts > 20 * CI_SEEDS as usize, "{payouts} payouts");
    assert!(faults > 10 * CI_SEEDS, "{faults} faults");
    assert!(crashes > CI_SEEDS / 2, "{crashes} crashes");
    assert!(transfers > 15 * CI_SEEDS as usize, "{transfers} transfers");
    assert!(
        next_attempts > CI_SEEDS / 2,
        "{next_attempts} attempts after a proven death: the path must be exercised"
    );
    // The Solana cluster too: payouts land there, and attempts expire and are followed by the next.
    assert!(solana_transfers > 3 * CI_SEEDS as usize, "{solana_transfers} Solana transfers");
    assert!(
        solana_next_attempts > CI_SEEDS / 4,
        "{solana_next_attempts} Solana attempts after an expiry proven dead"
    );
    assert!(
        durable_payouts > CI_SEEDS as usize / 2,
        "{durable_payouts} Solana payouts paid against the durable nonce"
    );
    // And the provider: payouts paid through it, and attempts after a proven death (a failed
    // transfer, or nothing found twice past the key window).
    assert!(
        provider_paid > 3 * CI_SEEDS as usize,
        "{provider_paid} of {provider_payouts} provider payouts paid"
    );
    assert!(
        provider_next_attempts > CI_SEEDS / 4,
        "{provider_next_attempts} provider attempts after a proven death"
    );
    // And routing: payouts whose attempt at the first provider was proven dead, paid by the next.
    assert!(
        provider_routed > CI_SEEDS as usize,
        "{provider_routed} provider payouts paid by the route's next provider"
    );
}
