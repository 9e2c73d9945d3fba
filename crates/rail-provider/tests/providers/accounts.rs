//! Reading a provider account: an account far behind, lookups narrowed by reference and destination, busy accounts; Coinbase's travel rule and its keys.

use super::*;

/// Someone with the API key makes more transfers than one reconciliation pass can read (CDP lists
/// in no promised order, so a pass reads the whole time range or proves nothing about it): the
/// passes still move the cursor forward over the time ranges they read whole, every transfer
/// made by hand opens its incident, and payoutd's own transfer none.
pub(super) async fn a_coinbase_account_far_behind_is_still_reconciled(db: TestDb) {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let api =
        coinbase_api(&sim).with_list_limits(CDP_TRANSFERS_PER_PAGE_SMALL, CDP_PAGES_PER_CALL_SMALL);
    let w = world_on(db, ProviderKind::Coinbase, sim, Arc::new(api)).await;
    w.pipeline.tick().await.unwrap(); // reconciliation starts here
    let id = w.request("provider-0012", 1_000_000).await;
    let by_hand = coinbase_api(&w.sim);
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    for n in 0..CDP_BY_HAND_COUNT {
        let body = by_hand.request_for(&payout, &format!("by-hand-{n:04}")).unwrap();
        by_hand.create(&uuid::Uuid::new_v4().to_string(), &body).await.unwrap();
        w.advance(CDP_BY_HAND_APART_MS as i64);
    }
    w.run_until(&id, PayoutStatus::Paid).await;
    let unmatched = async || {
        w.store
            .open_incidents(100)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::UnmatchedTransfer)
            .collect::<Vec<_>>()
    };
    let cursor = async || {
        w.store
            .rail_cursor(&format!("provider:coinbase/{CDP_ACCOUNT}"))
            .await
            .unwrap()
            .expect("reconciliation started")
    };
    let mut cursors = vec![cursor().await];
    // Caught up: incidents for all, and the cursor reads from the present again (`<ms>|<id>`).
    for _ in 0..ROUNDS_MAX {
        if unmatched().await.len() >= CDP_BY_HAND_COUNT
            && cursors.last().unwrap().split('|').count() == 2
        {
            break;
        }
        w.pipeline.tick().await.unwrap();
        cursors.push(cursor().await);
    }
    assert_eq!(cursors.last().unwrap().split('|').count(), 2, "the cursor caught up: {cursors:?}");
    // The passes caught up through time windows (`<ms>|<id>|<span ms>|<horizon ms>`), not one read.
    assert!(
        cursors.iter().any(|c| c.split('|').count() == 4),
        "no pass read a window: {cursors:?}"
    );
    let incidents = unmatched().await;
    for n in 0..CDP_BY_HAND_COUNT {
        let reference = format!("by-hand-{n:04}");
        assert_eq!(
            incidents.iter().filter(|i| i.detail.contains(&reference)).count(),
            1,
            "one incident for {reference}: {incidents:?}"
        );
    }
    assert_eq!(
        w.store.open_incidents(100).await.unwrap().len(),
        CDP_BY_HAND_COUNT,
        "payoutd's own transfer is reconciled"
    );
}

/// The create's answer is lost; then the account makes more transfers to other addresses than one
/// lookup reads (4 here, 2,000 with CDP's own limits). The lookup by our reference asks CDP only for
/// transfers to the payout's destination (`targetAddress`), so it reads them whole and finds the
/// transfer. (Before, it listed every transfer of the account since the attempt and gave up past
/// its pages: an account making more than 2,000 transfers a day could never prove an attempt
/// dead, nor find its transfer this way.)
pub(super) async fn a_coinbase_lookup_by_reference_reads_only_the_destinations_transfers(
    db: TestDb,
) {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let api: Arc<dyn ProviderApi> = Arc::new(
        coinbase_api(&sim).with_list_limits(CDP_TRANSFERS_PER_PAGE_SMALL, CDP_PAGES_PER_CALL_SMALL),
    );
    let w = world_on(db, ProviderKind::Coinbase, sim, api.clone()).await;
    let id = w.request("provider-0043", 1_000_000).await;
    found_past_a_busy_account(&w, api, &id, CDP_BY_HAND_COUNT).await;
    let lookups: Vec<_> = w
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/platform/v2/transfers?"))
        .filter(|r| r.path.contains("targetAddress="))
        .collect();
    assert!(!lookups.is_empty(), "the lookup names the destination");
}

/// As for Coinbase: with Circle answering two transactions a page, a lookup reads 80 at most; the
/// wallet makes more transfers to other addresses than that after ours, whose answer was lost. The
/// lookup asks only for transactions to the payout's destination (`destinationAddress`) and finds
/// ours. (Before, it read every transaction of the wallet since the attempt and gave up.)
pub(super) async fn a_circle_lookup_by_reference_reads_only_the_destinations_transfers(db: TestDb) {
    let w = world(db, ProviderKind::Circle).await;
    w.sim.set_circle_page_cap(2);
    let api = api_of(ProviderKind::Circle, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let id = w.request("provider-0044", 1_000_000).await;
    found_past_a_busy_account(&w, api, &id, CIRCLE_BUSY_COUNT).await;
}

/// A provider may keep an address in another case than the one payoutd sent (neither Coinbase
/// nor Circle documents how its address filter compares): a lookup narrowed by the destination
/// that finds nothing reads the account's whole listing before anything is taken as absent. Here
/// the stored request names the destination in upper case, the transfer was made with it in
/// lower case. (Before this rule, the narrowed lookup alone answered: no transfer, on which a
/// proof of death could rest.)
pub(super) async fn a_narrowed_lookup_that_finds_nothing_is_no_absence(
    db: TestDb,
    kind: ProviderKind,
) {
    let w = world(db, kind).await;
    let api = api_of(kind, &w.sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let id = w.request("provider-0055", 1_000_000).await;
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    let since_ms = w.clock.now_ms();
    let sent = api.request_for(&payout, "ours-0055").unwrap();
    api.create(&uuid::Uuid::new_v4().to_string(), &sent).await.unwrap();
    let text = String::from_utf8(sent).unwrap();
    let address = format!("{}", destination_of(kind));
    let upper = format!("0x{}", address.trim_start_matches("0x").to_uppercase());
    assert!(text.contains(&address), "the request names {address}: {text}");
    let stored = text.replace(&address, &upper).into_bytes();
    let found = api
        .find_by_reference("ours-0055", &stored, crate::support::created_from(since_ms))
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "found in the whole listing");
}

/// The account first makes `busy` transfers to another address, then payout `id`'s create makes
/// its transfer and the answer is lost: the attempt's status, read by one lookup by our reference,
/// must read its answer whole and find the transfer.
pub(super) async fn found_past_a_busy_account(
    w: &World,
    api: Arc<dyn ProviderApi>,
    id: &PayoutId,
    busy: usize,
) {
    let payout = w.store.payout_by_id(id).await.unwrap().unwrap();
    let mut elsewhere = payout.clone();
    elsewhere.destination = Destination::Evm(EvmAddress::parse(BUSY_ELSEWHERE).unwrap());
    for n in 0..busy {
        let body = api.request_for(&elsewhere, &format!("busy-{n:04}")).unwrap();
        api.create(&uuid::Uuid::new_v4().to_string(), &body).await.unwrap();
    }
    w.sim.fault_next_create(Fault::DelayAfterCreate(DELAY_PAST_TIMEOUT_MS));
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.sim.created(), busy + 1, "ours made too; its answer lost");
    let attempt = w.store.attempts_of(id).await.unwrap().remove(0);
    let rail = ProviderRail::new(api, w.clock.clone(), ProviderRailConfig::default());
    let status = rail.status(&attempt, &payout).await.expect("one lookup reads its answer whole");
    assert!(matches!(status, StandaloneStatus::Landed { .. }), "{status:?}");
}

/// The Coinbase adapter for `sim`, as `support::api_of` configures it, before any limit is changed.
pub(super) fn coinbase_api(sim: &ProviderSim) -> CoinbaseApi {
    CoinbaseApi::new(coinbase_config(sim)).unwrap()
}

pub(super) fn coinbase_config(sim: &ProviderSim) -> CoinbaseConfig {
    CoinbaseConfig {
        base_url: sim.base_url(),
        api_key_id: sim.api_key_id(),
        api_key: payoutd_domain::Secret::new(sim.api_key()),
        account_id: CDP_ACCOUNT.into(),
        source_asset: "usdc".into(),
        network: "base".into(),
        target_asset: "usdc".into(),
        decimals: 6,
        request_timeout_ms: CLIENT_TIMEOUT_MS,
        travel_rule: None,
    }
}

/// 1,000 USDC in base units: the simulator's travel rule threshold, and the adapter's here.
pub(super) const TRAVEL_RULE_FROM_BASE_UNITS: u128 = 1_000_000_000;

/// A world whose Coinbase adapter sends travel rule data from `TRAVEL_RULE_FROM_BASE_UNITS`.
pub(super) async fn coinbase_world_with_travel_rule(db: TestDb) -> World {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let api = CoinbaseApi::new(CoinbaseConfig {
        travel_rule: Some(TravelRuleConfig {
            from_base_units: TRAVEL_RULE_FROM_BASE_UNITS,
            originator: serde_json::json!({"name": "Example Payouts Ltd", "address": {"line1": "1 Main St", "city": "Dublin", "countryCode": "IE"}}),
            is_intermediary: false,
        }),
        ..coinbase_config(&sim)
    })
    .unwrap();
    let w = world_on(db, ProviderKind::Coinbase, sim, Arc::new(api)).await;
    let more = Amount::from_u128(2 * TRAVEL_RULE_FROM_BASE_UNITS);
    w.engine
        .deposit(&w.merchant, &w.asset.code, more, DepositKey::parse("fund-travel-rule").unwrap())
        .await
        .unwrap();
    w
}

/// A Coinbase payout at the travel rule threshold carries CDP's `travelRule` object: the
/// configured originator and the beneficiary the merchant gave in the payout's metadata; CDP
/// (the simulator, strict as its specification) takes it and the payout is paid once; a smaller
/// payout carries none. (Before, no travel rule data was ever sent: CDP answered
/// `travel_rules_field_missing` and every such payout failed.)
pub(super) async fn a_coinbase_payout_at_the_travel_rule_threshold_carries_its_parties(db: TestDb) {
    let w = coinbase_world_with_travel_rule(db).await;
    let beneficiary = serde_json::json!({"travel_rule": {"beneficiary": {"name": "Ada Lovelace", "walletType": "self_custody",
        "address": {"line1": "12 St James's Sq", "city": "London", "countryCode": "GB"}}}});
    let metadata = Metadata::from_canonical_json(beneficiary.to_string()).unwrap();
    let request = PayoutRequest::new(
        PayoutKey::parse("provider-0050").unwrap(),
        w.asset.code.clone(),
        Amount::from_u128(TRAVEL_RULE_FROM_BASE_UNITS),
        destination_of(w.kind),
        metadata,
    );
    let id = w.engine.create_payout(&w.merchant, request).await.unwrap().0.id;
    let small = w.request("provider-0051", 2_000_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    w.run_until(&small, PayoutStatus::Paid).await;
    let bodies: Vec<serde_json::Value> = w
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    let large_amount =
        |b: &&serde_json::Value| b["amount"].as_str().is_some_and(|a| a.starts_with("1000"));
    let rule = bodies
        .iter()
        .find(large_amount)
        .map(|b| b["travelRule"].clone())
        .expect("the large payout was sent");
    assert_eq!(rule["originator"]["name"], "Example Payouts Ltd");
    assert_eq!(rule["beneficiary"]["name"], "Ada Lovelace");
    assert_eq!(rule["beneficiary"]["walletType"], "self_custody");
    let small_bodies: Vec<&serde_json::Value> = bodies
        .iter()
        .filter(|b| b["amount"].as_str().is_some_and(|a| a.starts_with('2')))
        .collect();
    assert!(
        !small_bodies.is_empty() && small_bodies.iter().all(|b| b.get("travelRule").is_none()),
        "below the threshold none is sent: {small_bodies:?}"
    );
    assert_eq!(w.sim.created(), 2);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A CDP API key of the EC P-256 kind, in the SEC1 form the CDP portal shows, signs ES256 tokens
/// the simulator (which checks them as CDP's SDKs make them, `aud` optional) accepts: a payout is
/// paid once. (Before, the simulator took EdDSA tokens only, so the ES256 path was never run
/// against a server.)
pub(super) async fn a_coinbase_payout_signed_with_an_es256_key_is_paid_once(db: TestDb) {
    let sim = ProviderSim::start(ProviderKind::Coinbase).await;
    let (api_key_id, secret) = sim.coinbase_ec_api_key();
    let api = CoinbaseApi::new(CoinbaseConfig {
        api_key_id,
        api_key: payoutd_domain::Secret::new(secret),
        ..coinbase_config(&sim)
    })
    .unwrap();
    let w = world_on(db, ProviderKind::Coinbase, sim, Arc::new(api)).await;
    let id = w.request("provider-0053", 3_000_000).await;
    w.run_until(&id, PayoutStatus::Paid).await;
    // Every call of CDP's needs a valid token: a refused one is a 401 and nothing would be paid.
    w.assert_paid_once(&id).await;
}

/// A payout that needs travel rule data and has no beneficiary in its metadata is refused before
/// any call (nothing can have been created): it fails with its hold released and a reason that
/// names what is missing.
pub(super) async fn a_coinbase_payout_needing_the_travel_rule_without_a_beneficiary_fails_before_any_call(
    db: TestDb,
) {
    let w = coinbase_world_with_travel_rule(db).await;
    let id = w.request("provider-0052", TRAVEL_RULE_FROM_BASE_UNITS + 1).await;
    w.run_until(&id, PayoutStatus::Failed).await;
    assert_eq!(
        w.sim.requests().into_iter().filter(|r| r.method == "POST").count(),
        0,
        "no create was sent"
    );
    assert_eq!(w.held().await, Amount::ZERO, "the hold is released");
    assert!(w.store.attempts_of(&id).await.unwrap().is_empty(), "nothing was prepared to send");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}
