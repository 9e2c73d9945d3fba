//! Intake's abuse limits over real HTTP, on both stores: minimums, network fees, own wallets, and rates per merchant and per key.

use payoutd_domain::{
    Amount, Asset, AssetRegistry, Destination, EvmAddress, Metadata, PayoutKey, PayoutRequest,
};
use payoutd_engine::{Engine, IntakeError};
use payoutd_testkit::TestDb;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Api, DEST_A, DEST_B, USDC, payout, problem};

/// New payouts per merchant per minute in the intake-rate test.
const RATE_PER_MINUTE: u32 = 3;
/// New payouts per merchant per hour in the hourly test.
const PER_HOUR: u32 = 3;
/// The minimum payout one test configures for USDC.
const MIN_USDC_BASE_UNITS: u128 = 1_000;
/// The network fee one test configures for USDC.
const FEE_USDC_BASE_UNITS: u128 = 25;

/// A payout to one of the deployment's own hot wallets is refused at intake with its own problem,
/// and reserves nothing. (Before, it was accepted: the merchant charged for units that only moved
/// between the platform's own wallets.)
async fn a_payout_to_an_own_hot_wallet_is_refused_and_reserves_nothing(db: TestDb) {
    let own = Destination::Evm(EvmAddress::parse(DEST_B).unwrap());
    let api = Api::start_with(db, AssetRegistry::local_development(), |engine| {
        engine.with_own_wallets(vec![own])
    })
    .await;
    let m = api.merchant("own-wallet", 7).await;
    assert_eq!(api.deposit(&m, "100", "deposit-own-0001").await.status(), StatusCode::CREATED);
    let (status, slug) =
        problem(api.post_payout(&m, payout("withdrawal-own-1", "40", DEST_B)).await).await;
    assert_eq!(
        (status, slug.as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "destination-is-hot-wallet")
    );
    let balances: Value = api.get(&m, "/v1/balances").await.json().await.unwrap();
    assert!(balances.to_string().contains("\"available\":\"100\""), "nothing reserved: {balances}");
    assert_eq!(
        api.post_payout(&m, payout("withdrawal-own-2", "40", DEST_A)).await.status(),
        StatusCode::CREATED,
        "another address is paid"
    );
}

/// An asset's minimum payout: below it, 422 `amount-below-minimum` with nothing reserved, in a
/// single payout and in a batch line alike; at it, accepted. (Before, any positive amount was
/// accepted: a merchant holding 1 USDC could send thousands of 1-unit payouts, each costing the
/// platform a network fee.)
async fn a_payout_below_the_assets_minimum_is_refused_and_reserves_nothing(db: TestDb) {
    let assets = usdc_as(|usdc| usdc.with_min_amount(Amount::from_u128(MIN_USDC_BASE_UNITS)));
    let api = Api::start_with(db, assets, |engine| engine).await;
    let m = api.merchant("minimum", 8).await;
    assert_eq!(
        api.deposit(&m, "100000", "deposit-minimum-0001").await.status(),
        StatusCode::CREATED
    );
    let below = (MIN_USDC_BASE_UNITS - 1).to_string();
    let (status, slug) =
        problem(api.post_payout(&m, payout("withdrawal-min-1", &below, DEST_A)).await).await;
    assert_eq!((status, slug.as_str()), (StatusCode::UNPROCESSABLE_ENTITY, "amount-below-minimum"));
    let batch = json!({"payouts": [
        {"external_id": "line-below-0001", "asset": USDC, "amount": below, "destination": DEST_A},
        {"external_id": "line-at-0001", "asset": USDC, "amount": MIN_USDC_BASE_UNITS.to_string(), "destination": DEST_B}]});
    let post = api
        .http
        .post(format!("{}/v1/payout_batches", api.base))
        .bearer_auth(&m.key)
        .header("Idempotency-Key", "batch-minimum-0001");
    let batch: Value = post.json(&batch).send().await.unwrap().json().await.unwrap();
    assert!(
        batch.to_string().contains("minimum payout"),
        "the batch line below the minimum names why: {batch}"
    );
    let balances: Value = api.get(&m, "/v1/balances").await.json().await.unwrap();
    let available = 100_000 - MIN_USDC_BASE_UNITS;
    assert!(
        balances.to_string().contains(&format!("\"available\":\"{available}\"")),
        "only the line at the minimum reserved: {balances}"
    );
    assert_eq!(
        api.post_payout(&m, payout("withdrawal-min-2", &MIN_USDC_BASE_UNITS.to_string(), DEST_A))
            .await
            .status(),
        StatusCode::CREATED
    );
}

/// The development assets with USDC as `change` leaves it.
fn usdc_as(change: impl Fn(Asset) -> Asset) -> AssetRegistry {
    let assets = AssetRegistry::local_development()
        .iter()
        .map(|a| if a.code.as_str() == USDC { change(a.clone()) } else { a.clone() })
        .collect();
    AssetRegistry::new(assets).unwrap()
}

/// An asset's network fee is charged at intake as a `fee` journal beside the hold, shown on the
/// payout, counted in what the balance must cover, and refunded with the hold when the payout is
/// canceled; the books stay balanced. (Before, no fee could be charged: the platform paid every
/// payout's gas and rent, whatever its size.)
async fn an_assets_network_fee_is_charged_at_intake_and_refunded_with_the_hold(db: TestDb) {
    let api = Api::start_with(
        db,
        usdc_as(|usdc| usdc.with_network_fee(Amount::from_u128(FEE_USDC_BASE_UNITS))),
        |engine| engine,
    )
    .await;
    let m = api.merchant("fees", 12).await;
    assert_eq!(api.deposit(&m, "1000", "deposit-fees-0001").await.status(), StatusCode::CREATED);
    let first = api.post_payout(&m, payout("withdrawal-fee-1", "500", DEST_A)).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["network_fee"], FEE_USDC_BASE_UNITS.to_string(), "{first}");
    assert_eq!(
        api.balance(&m).await,
        ("475".to_owned(), "500".to_owned()),
        "the fee is charged, not held"
    );
    // 476 + 25 > 475: short by the fee alone.
    let (status, slug) =
        problem(api.post_payout(&m, payout("withdrawal-fee-2", "476", DEST_A)).await).await;
    assert_eq!((status, slug.as_str()), (StatusCode::UNPROCESSABLE_ENTITY, "insufficient-funds"));
    assert_eq!(
        api.balance(&m).await,
        ("475".to_owned(), "500".to_owned()),
        "a refusal charges nothing"
    );
    assert_eq!(
        api.post_payout(&m, payout("withdrawal-fee-3", "450", DEST_A)).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(api.balance(&m).await, ("0".to_owned(), "950".to_owned()));
    let cancel = format!("{}/v1/payouts/{}/cancel", api.base, first["id"].as_str().unwrap());
    for _ in 0..2 {
        assert!(
            api.http.post(&cancel).bearer_auth(&m.key).send().await.unwrap().status().is_success()
        );
    }
    assert_eq!(
        api.balance(&m).await,
        ("525".to_owned(), "450".to_owned()),
        "hold and fee refunded once"
    );
    let audit = api.db.store().audit_ledger().await.unwrap();
    assert!(audit.is_clean(), "{audit:?}");
}

/// A merchant that created its minute's worth of new payouts gets 429 `rate-limited` with a
/// `Retry-After`, and nothing reserved; replays of its payouts still answer, and another merchant
/// is not held up. (Before, intake had no limit per merchant.)
async fn a_merchant_past_its_intake_rate_gets_429_and_others_do_not(db: TestDb) {
    let api = Api::start_with(db, AssetRegistry::local_development(), |engine| {
        engine.with_intake_rate(RATE_PER_MINUTE)
    })
    .await;
    let (m, other) = (api.merchant("flood", 10).await, api.merchant("calm", 11).await);
    for who in [&m, &other] {
        assert_eq!(
            api.deposit(who, "100000", &format!("deposit-{}-0001", who.id)).await.status(),
            StatusCode::CREATED
        );
    }
    for i in 0..RATE_PER_MINUTE {
        assert_eq!(
            api.post_payout(&m, payout(&format!("withdrawal-rate-{i}"), "10", DEST_A))
                .await
                .status(),
            StatusCode::CREATED
        );
    }
    let refused = api.post_payout(&m, payout("withdrawal-rate-over", "10", DEST_A)).await;
    let retry_after: u64 = refused
        .headers()
        .get("retry-after")
        .expect("Retry-After")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(problem(refused).await, (StatusCode::TOO_MANY_REQUESTS, "rate-limited".to_owned()));
    assert_eq!(
        api.post_payout(&m, payout("withdrawal-rate-0", "10", DEST_A)).await.status(),
        StatusCode::OK,
        "a replay is not a new payout"
    );
    assert_eq!(
        api.post_payout(&other, payout("withdrawal-calm-1", "10", DEST_A)).await.status(),
        StatusCode::CREATED
    );
    let balances: Value = api.get(&m, "/v1/balances").await.json().await.unwrap();
    let available = 100_000 - 10 * u128::from(RATE_PER_MINUTE);
    assert!(
        balances.to_string().contains(&format!("\"available\":\"{available}\"")),
        "the refused payout reserved nothing: {balances}"
    );
}

/// Requests are counted per API key: past its burst (twice the per-second rate) a key gets 429
/// `rate-limited` with `Retry-After`, while another merchant's key and the operator's are untouched;
/// requests without a key count against the client's address. (Before, only new payouts were
/// limited: a key could read `/v1/payouts` or `/v1/balances` as fast as the database answered.)
async fn requests_past_a_keys_rate_are_429_and_other_keys_are_untouched(db: TestDb) {
    let rate = payoutd_api::request_rate::RequestRate { per_second: 1 };
    let api = Api::start_with_state(db, |mut state| {
        state.request_rate = rate;
        state
    })
    .await;
    let (busy, calm) =
        (api.merchant("busy-reader", 21).await, api.merchant("calm-reader", 22).await);
    for _ in 0..2 {
        assert_eq!(api.get(&busy, "/v1/balances").await.status(), StatusCode::OK);
    }
    let refused = api.get(&busy, "/v1/balances").await;
    let retry_after = refused.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    assert!(
        retry_after.is_some_and(|s| s.parse::<u64>().is_ok_and(|s| s >= 1)),
        "Retry-After in seconds"
    );
    let (status, slug) = problem(refused).await;
    assert_eq!((status, slug.as_str()), (StatusCode::TOO_MANY_REQUESTS, "rate-limited"));
    assert_eq!(
        api.get(&calm, "/v1/balances").await.status(),
        StatusCode::OK,
        "another key has its own count"
    );
    let anonymous = || api.http.get(format!("{}/v1/balances", api.base)).send();
    assert_eq!(anonymous().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        anonymous().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS,
        "no key: counted per address"
    );
}

/// Keys that do not authenticate are counted per client address: past a burst, the address gets
/// 429 `rate-limited` with `Retry-After` before any key is looked up, whatever it presents next,
/// the operator's endpoints included; a merchant's key refused at an operator endpoint is a 401 but
/// no guess, and a key of ours passes from any address. (Before, each new key had a request-rate
/// bucket of its own: keys, the operator's included, could be guessed as fast as the server
/// answered, each guess a key lookup.)
async fn guessed_keys_are_refused_per_address_past_a_burst(db: TestDb) {
    let api = Api::start_with_state(db, |mut state| {
        state.trusted_proxies = std::sync::Arc::new(vec![std::net::IpAddr::from([127, 0, 0, 1])]);
        state
    })
    .await;
    let ours = api.merchant("guessed-at", 31).await;
    let from = |address: &'static str, key: String, path: &'static str| {
        let request = api.http.get(format!("{}{path}", api.base));
        request.header("x-forwarded-for", address).bearer_auth(key).send()
    };
    let burst = payoutd_api::failed_auth::FAILED_AUTHS_BURST;
    for _ in 0..burst + 5 {
        let refused = from("198.51.100.1", ours.key.clone(), "/v1/incidents").await.unwrap();
        assert_eq!(
            refused.status(),
            StatusCode::UNAUTHORIZED,
            "a merchant's key, not the operator's"
        );
    }
    for guess in 0..burst {
        let key = format!("pk_guess_{guess:04}");
        let refused = from("198.51.100.2", key, "/v1/balances").await.unwrap();
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    }
    let blocked = from("198.51.100.2", "pk_guess_next".into(), "/v1/balances").await.unwrap();
    assert!(blocked.headers().get("retry-after").is_some(), "Retry-After");
    assert_eq!(problem(blocked).await, (StatusCode::TOO_MANY_REQUESTS, "rate-limited".to_owned()));
    let operator_guess = from("198.51.100.2", "op_guess".into(), "/v1/incidents").await.unwrap();
    assert_eq!(operator_guess.status(), StatusCode::TOO_MANY_REQUESTS, "the operator's key too");
    let ours_there = from("198.51.100.2", ours.key.clone(), "/v1/balances").await.unwrap();
    assert_eq!(ours_there.status(), StatusCode::OK, "a key of ours passes from a blocked address");
    let elsewhere =
        from("198.51.100.3", "pk_guess_elsewhere".into(), "/v1/balances").await.unwrap();
    assert_eq!(elsewhere.status(), StatusCode::UNAUTHORIZED, "another address has its own count");
}

/// Half past an hour, on both processes' clock: a fixed instant, so the test never straddles an
/// hour's turn and `Retry-After` is known exactly.
const HALF_PAST_MS: i64 = 1_796_639_400_000;

/// A clock stopped at one instant.
struct StoppedAt(i64);

impl payoutd_engine::Clock for StoppedAt {
    fn now_ms(&self) -> i64 {
        self.0
    }
}

/// New payouts per merchant per clock hour are counted in the store, so two API processes (two
/// engines over one database) share one count even when a merchant's requests race through both:
/// of twice the hour's worth sent at once, half through each, exactly the hour's worth are made;
/// the rest get 429 `rate-limited` with a `Retry-After` of the seconds to the next hour (or
/// `RateLimited` in the other process), and reserve nothing; replays still answer and another
/// merchant is untouched. Both processes read a clock stopped at half past an hour. (Before, the
/// requests went one after another on the system clock, so neither the race nor the hour's end
/// was tested, and a run across an hour's turn could fail.)
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_merchants_hourly_limit_holds_across_processes(db: TestDb) {
    let clock = || std::sync::Arc::new(StoppedAt(HALF_PAST_MS));
    let engine = Engine::new(db.store(), clock(), AssetRegistry::local_development())
        .with_payouts_per_hour(PER_HOUR);
    let other_process = Engine::new(db.store(), clock(), AssetRegistry::local_development())
        .with_payouts_per_hour(PER_HOUR);
    let api = Api::serve(db, engine, |state| state).await;
    let (m, calm) = (api.merchant("hourly", 13).await, api.merchant("hourly-calm", 14).await);
    for who in [&m, &calm] {
        assert_eq!(
            api.deposit(who, "100000", &format!("deposit-{}-0001", who.id)).await.status(),
            StatusCode::CREATED
        );
    }
    let usdc = AssetRegistry::local_development().get(USDC).unwrap().code.clone();
    let destination = Destination::Evm(EvmAddress::parse(DEST_A).unwrap());
    let request = |key: &str| {
        PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            usdc.clone(),
            Amount::from_u128(10),
            destination,
            Metadata::empty(),
        )
    };
    let (api_ref, m_ref) = (&api, &m);
    let over_http = (0..PER_HOUR).map(|i| async move {
        let (api, m) = (api_ref, m_ref);
        let key = format!("withdrawal-hour-http-{i}");
        let answer = api.post_payout(m, payout(&key, "10", DEST_A)).await;
        let retry_after =
            answer.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        (key, answer.status(), retry_after)
    });
    let other = &other_process;
    let in_process = (0..PER_HOUR).map(|i| {
        let key = format!("withdrawal-hour-elsewhere-{i}");
        let request = request(&key);
        async move { (key, other.create_payout(&m_ref.id, request).await) }
    });
    let (over_http, in_process) =
        tokio::join!(futures::future::join_all(over_http), futures::future::join_all(in_process));
    let mut made = Vec::new();
    for (key, status, retry_after) in &over_http {
        match *status {
            StatusCode::CREATED => made.push(key.clone()),
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(retry_after.as_deref(), Some("1800"), "the seconds to the next hour");
            }
            other => panic!("{key}: {other}"),
        }
    }
    for (key, outcome) in &in_process {
        match outcome {
            Ok(_) => made.push(key.clone()),
            Err(IntakeError::RateLimited { retry_after_ms }) => {
                assert_eq!(*retry_after_ms, 1_800_000, "the time to the next hour");
            }
            Err(e) => panic!("{key}: {e:?}"),
        }
    }
    assert_eq!(made.len(), PER_HOUR as usize, "exactly the hour's worth, whichever won: {made:?}");
    let replayed = made.iter().find(|k| k.contains("-http-"));
    if let Some(key) = replayed {
        let again = api.post_payout(&m, payout(key, "10", DEST_A)).await.status();
        assert_eq!(again, StatusCode::OK, "a replay is not a new payout");
    }
    let refused = api.post_payout(&m, payout("withdrawal-hour-over", "10", DEST_A)).await;
    assert_eq!(problem(refused).await, (StatusCode::TOO_MANY_REQUESTS, "rate-limited".to_owned()));
    assert_eq!(
        api.post_payout(&calm, payout("withdrawal-calm-hour", "10", DEST_A)).await.status(),
        StatusCode::CREATED
    );
    let available = 100_000 - 10 * u128::from(PER_HOUR);
    assert_eq!(
        api.balance(&m).await.0,
        available.to_string(),
        "the refused payouts reserved nothing"
    );
}

payoutd_testkit::both_stores!(
    requests_past_a_keys_rate_are_429_and_other_keys_are_untouched,
    guessed_keys_are_refused_per_address_past_a_burst,
    a_merchant_past_its_intake_rate_gets_429_and_others_do_not,
    a_merchants_hourly_limit_holds_across_processes,
    a_payout_below_the_assets_minimum_is_refused_and_reserves_nothing,
    an_assets_network_fee_is_charged_at_intake_and_refunded_with_the_hold,
    a_payout_to_an_own_hot_wallet_is_refused_and_reserves_nothing,
);
