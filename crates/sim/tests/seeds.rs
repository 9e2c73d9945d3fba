//! Five hundred fixed seeds through faults, crashes, reorgs and races, on every CPU at once.
//!
//! A test binary of its own: its runners keep every CPU busy, and cargo runs test binaries one
//! after another, so the PostgreSQL seeds and the other simulator tests do not starve beside it.

use payoutd_engine::clock::CLOCK_SKEW_MAX_MS;
use payoutd_sim::parallel::{default_jobs, run_seeds};
use payoutd_sim::{Options, Totals, quiet_simulated_crashes};

/// Seeds in CI: about three minutes of a debug build on two CPUs; `scripts/sim --seeds N` runs more.
const CI_SEEDS: u64 = 500;

#[test]
fn fixed_seeds_run_clean_through_faults_crashes_reorgs_and_races() {
    quiet_simulated_crashes();
    let mut t = Totals::default();
    let mut violations = Vec::new();
    run_seeds(1..CI_SEEDS + 1, &Options::default(), default_jobs(), |report| {
        if !report.violations.is_empty() {
            violations.push(format!(
                "seed {} violated the promise: {:?}\nreplay: scripts/sim --start {} --seeds 1 --trace",
                report.seed, report.violations, report.seed
            ));
        }
        t.add(&report);
    })
    .unwrap();
    println!("{}", t.line());
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    let seeds = CI_SEEDS as usize;
    // The run must actually have exercised the pipeline under faults, or a clean result means nothing.
    assert!(t.payouts > 20 * seeds, "{} payouts", t.payouts);
    assert!(t.faults > 10 * CI_SEEDS, "{} faults", t.faults);
    // A crash is armed on a worker's pass and counted where it is reached: a signing pass also
    // stops while a line's records are behind its chain or its pending nonce cannot be read, so
    // fewer are reached than passes armed (242 in 500 seeds on 2026-12-07).
    assert!(t.crashes > CI_SEEDS * 2 / 5, "{} crashes", t.crashes);
    assert!(t.transfers > 15 * seeds, "{} transfers", t.transfers);
    assert!(
        t.attempts_after_death > CI_SEEDS / 2,
        "{} attempts after a proven death: the path must be exercised",
        t.attempts_after_death
    );
    // The Solana cluster too: payouts land there, and attempts expire and are followed by the next.
    assert!(t.solana_transfers > 3 * seeds, "{} Solana transfers", t.solana_transfers);
    assert!(
        t.solana_attempts_after_death > CI_SEEDS / 4,
        "{} Solana attempts after an expiry proven dead",
        t.solana_attempts_after_death
    );
    assert!(
        t.durable_payouts > seeds / 2,
        "{} Solana payouts paid against the durable nonce",
        t.durable_payouts
    );
    // And the provider: payouts paid through it, and attempts after a proven death (a failed
    // transfer, or nothing found twice past the key window).
    assert!(
        t.provider_paid > 3 * seeds,
        "{} of {} provider payouts paid",
        t.provider_paid,
        t.provider_payouts
    );
    assert!(
        t.provider_attempts_after_death > CI_SEEDS / 4,
        "{} provider attempts after a proven death",
        t.provider_attempts_after_death
    );
    // And routing: payouts whose attempt at the first provider was proven dead, paid by the next,
    // and Solana payouts whose attempt on the cluster was proven dead, paid by a provider.
    assert!(
        t.provider_routed > seeds,
        "{} provider payouts paid by the route's next provider",
        t.provider_routed
    );
    assert!(
        t.routed_from_chain > seeds / 10,
        "{} Solana payouts paid by the provider after the cluster",
        t.routed_from_chain
    );
    // Production's world: reads from nodes behind, clocks off the database's beyond the bound,
    // providers that make two transfers behind one reference and transfers that move less.
    assert!(t.lagging_reads > 10 * CI_SEEDS, "{} reads from a node behind", t.lagging_reads);
    assert!(
        t.clock_skew_ms_max > CLOCK_SKEW_MAX_MS,
        "clocks at most {} ms off the database's",
        t.clock_skew_ms_max
    );
    assert!(t.double_transfers > seeds / 10, "{} creates made twice", t.double_transfers);
    assert!(t.short_transfers > seeds / 20, "{} transfers that moved less", t.short_transfers);
}
