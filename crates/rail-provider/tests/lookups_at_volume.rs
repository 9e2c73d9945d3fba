//! Lookups by reference in an account paying 100,000 transfers a day, against the simulators over HTTP: a window a day old is read where it lies, not from the newest transfer back.

use payoutd_domain::Secret;
use payoutd_provider_sim::{ProviderKind, ProviderSim, SimOptions};
use payoutd_rail_provider::api::CreatedWithin;
use payoutd_rail_provider::{BridgeApi, ProviderApi};

const DAY_MS: u64 = 86_400_000;
const HOUR_MS: u64 = 3_600_000;
/// One transfer every 864 ms: 100,000 a day.
const SPACING_MS: u64 = 864;
/// The window an attempt's lookup reads: half an hour (its resend horizon, margins and skews).
const WINDOW_MS: u64 = 30 * 60 * 1_000;
/// Far fewer pages than the day since the window holds (1,000 of 100).
const PAGES_READ_MAX: usize = 60;

/// The list requests the simulator answered so far.
fn list_reads(sim: &ProviderSim) -> usize {
    sim.requests().iter().filter(|r| r.method == "GET" && r.path.contains("/transfers?")).count()
}

/// A Bridge customer paying 100,000 transfers a day, and an attempt whose window closed a day ago:
/// the lookup starts at a transfer made just after the window (found with `updated_before_ms`)
/// and reads back past its start only, so it finds the transfer in it and proves another
/// reference absent. (Before, it read from the newest transfer, gave up after 20 pages, and at
/// this volume no attempt older than about 20 minutes could be proven dead.)
#[tokio::test]
async fn a_bridge_lookup_of_a_day_old_window_reads_the_window_not_the_day_since() {
    let options = SimOptions { objects_max: 200_000, ..SimOptions::default() };
    let sim = ProviderSim::start_with(ProviderKind::Bridge, options).await;
    let now = sim.now_ms();
    let first = now - DAY_MS - 2 * HOUR_MS;
    let count = usize::try_from((now - first) / SPACING_MS).unwrap();
    assert!(sim.seed_history(crate::support::BRIDGE_CUSTOMER, count, first, SPACING_MS));
    let config =
        crate::support::bridge_config(sim.base_url(), Secret::new(sim.api_key()), false, 10_000);
    let api = BridgeApi::new(config).unwrap();
    let began = first + HOUR_MS;
    let window = CreatedWithin {
        from_ms: i64::try_from(began).unwrap(),
        until_ms: i64::try_from(began + WINDOW_MS).unwrap(),
    };
    // A transfer made ten minutes into the window.
    let ours = format!("elsewhere-{}", (began + 10 * 60 * 1_000 - first) / SPACING_MS);

    let before = list_reads(&sim);
    let found = api.find_by_reference(&ours, b"{}", window).await.expect("the window is read");
    assert_eq!(found.len(), 1, "{ours} is found");
    assert_eq!(found[0].reference.as_deref(), Some(ours.as_str()));
    let absent = api.find_by_reference("nobody", b"{}", window).await.expect("absence is proven");
    assert!(absent.is_empty());
    let pages = list_reads(&sim) - before;
    assert!(pages <= 2 * PAGES_READ_MAX, "{pages} pages for two lookups");
}
