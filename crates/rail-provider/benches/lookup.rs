//! Lookup benchmark: a lookup by reference in an account paying 100,000 transfers a day, on
//! Coinbase's, Circle's and Bridge's simulators over HTTP: the pages and time of the lookup a proof of death
//! reads (the attempt's window), beside the lookup of everything since the attempt it replaced.

use std::time::Instant;

use payoutd_domain::Secret;
use payoutd_provider_sim::{
    CIRCLE_SIM_ENTITY_SECRET_HEX, CIRCLE_SIM_USDC_TOKEN_ID, ProviderKind, ProviderSim, SimOptions,
};
use payoutd_rail_provider::api::CreatedWithin;
use payoutd_rail_provider::{
    BridgeApi, BridgeConfig, CircleApi, CircleConfig, CoinbaseApi, CoinbaseConfig, ProviderApi,
    ProviderRailConfig,
};

const DAY_MS: u64 = 86_400_000;
/// The account's transfers a day, one every 864 ms.
const TRANSFERS_PER_DAY: u64 = 100_000;
const HOUR_MS: u64 = 3_600_000;
const COINBASE_ACCOUNT: &str = "account_af2937b0-9846-4fe7-bfe9-ccc22d935114";
const CIRCLE_WALLET: &str = "0f9c0a52-2e84-4c0c-9f0e-4a6c0b6f1b10";
const BRIDGE_CUSTOMER: &str = "cust_bench";
/// The pages a lookup may read (the adapters' own limits, written here to print beside them).
const COINBASE_LOOKUP_PAGES_MAX: usize = 50;
const CIRCLE_LOOKUP_PAGES_MAX: usize = 100;
const BRIDGE_LOOKUP_PAGES_MAX: usize = 60;

fn api_of(kind: ProviderKind, sim: &ProviderSim) -> Box<dyn ProviderApi> {
    let (base_url, api_key) = (sim.base_url(), Secret::new(sim.api_key()));
    match kind {
        ProviderKind::Coinbase => Box::new(
            CoinbaseApi::new(CoinbaseConfig {
                base_url,
                api_key_id: sim.api_key_id(),
                api_key,
                account_id: COINBASE_ACCOUNT.into(),
                source_asset: "usdc".into(),
                network: "base".into(),
                target_asset: "usdc".into(),
                decimals: 6,
                request_timeout_ms: 10_000,
                travel_rule: None,
            })
            .expect("a Coinbase adapter"),
        ),
        ProviderKind::Bridge => Box::new(
            BridgeApi::new(BridgeConfig {
                base_url,
                api_key,
                customer_id: BRIDGE_CUSTOMER.into(),
                bridge_wallet_id: "bw_bench".into(),
                payment_rail: "ethereum".into(),
                source_currency: "usdb".into(),
                currency: "usdc".into(),
                initiation: None,
                decimals: 6,
                request_timeout_ms: 10_000,
            })
            .expect("a Bridge adapter"),
        ),
        _ => Box::new(
            CircleApi::new(CircleConfig {
                base_url,
                api_key,
                entity_secret: Secret::new(CIRCLE_SIM_ENTITY_SECRET_HEX.into()),
                wallet_id: CIRCLE_WALLET.into(),
                token_id: CIRCLE_SIM_USDC_TOKEN_ID.into(),
                fee_level: "MEDIUM".into(),
                decimals: 6,
                gas: None,
                request_timeout_ms: 10_000,
            })
            .expect("a Circle adapter"),
        ),
    }
}

/// The list requests the simulator answered so far.
fn list_reads(sim: &ProviderSim) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "GET")
        .filter(|r| r.path.contains("/transfers?") || r.path.contains("/transactions?"))
        .count()
}

/// One lookup of a reference no transfer carries: whether it proved absence, its pages and time.
async fn look(sim: &ProviderSim, api: &dyn ProviderApi, created: CreatedWithin) -> String {
    let before = list_reads(sim);
    let started = Instant::now();
    let found = api.find_by_reference("absent-reference", b"{}", created).await;
    let ms = started.elapsed().as_millis();
    let pages = list_reads(sim) - before;
    match found {
        Ok(found) => format!("{pages} pages, {ms} ms, absent proven ({} found)", found.len()),
        Err(e) => format!("{pages} pages, {ms} ms, proves nothing: {e}"),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rail = ProviderRailConfig::default();
    for (kind, pages_max) in [
        (ProviderKind::Coinbase, COINBASE_LOOKUP_PAGES_MAX),
        (ProviderKind::Circle, CIRCLE_LOOKUP_PAGES_MAX),
        (ProviderKind::Bridge, BRIDGE_LOOKUP_PAGES_MAX),
    ] {
        let options = SimOptions { objects_max: 200_000, ..SimOptions::default() };
        let sim = ProviderSim::start_with(kind, options).await;
        let now = sim.now_ms();
        // The attempt began a day and an hour ago, as its proof of death is read; the account has
        // paid 100,000 transfers a day since an hour before it.
        let began = now - DAY_MS - HOUR_MS;
        let (first, spacing) = (began - HOUR_MS, DAY_MS / TRANSFERS_PER_DAY);
        let count = usize::try_from((now - first) / spacing).expect("a count");
        let account = match kind {
            ProviderKind::Coinbase => COINBASE_ACCOUNT,
            ProviderKind::Bridge => BRIDGE_CUSTOMER,
            _ => CIRCLE_WALLET,
        };
        assert!(sim.seed_history(account, count, first, spacing), "{kind} history");
        let api = api_of(kind, &sim);
        let began_ms = i64::try_from(began).expect("a time");
        let window = rail.lookup_window(began_ms, rail.creates_until_ms());
        let in_window = (window.until_ms - window.from_ms + 20 * 60 * 1_000) / 864;
        println!(
            "lookup: {kind}: {count} transfers ({TRANSFERS_PER_DAY} a day), the attempt began {} h ago",
            (now - began) / HOUR_MS
        );
        println!(
            "lookup: {kind}: the attempt's window ({} min with the adapter's clock skew, about {in_window} transfers): {} (limit {pages_max} pages)",
            (window.until_ms - window.from_ms) / 60_000 + 20,
            look(&sim, api.as_ref(), window).await
        );
        let since = CreatedWithin { from_ms: began_ms, until_ms: i64::try_from(now).unwrap() };
        println!(
            "lookup: {kind}: everything since the attempt (the lookup before): {}",
            look(&sim, api.as_ref(), since).await
        );
    }
}
