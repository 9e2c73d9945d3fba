//! `GET /v1/statements` over HTTP on both stores: a merchant's period opens where the last closed and closes at its balances, as JSON and as CSV; bad requests get a problem.

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::{Api, DEST_A, USDC, payout, problem};
use payoutd_testkit::TestDb;

/// Far past any test's clock: the period that reaches now.
const LATER_MS: i64 = 9_999_999_999_999;

async fn statement(api: &Api, m: &crate::support::Merchant, from: i64, to: i64) -> Value {
    let response = api.get(m, &format!("/v1/statements?asset={USDC}&from={from}&to={to}")).await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// A deposit in the first period, a payout's hold in the second: the second opens at the first's
/// closing balances, lists the hold's two entries with the balances after each, and closes where
/// `/v1/balances` stands; another merchant's statement holds none of it.
async fn a_merchant_s_periods_chain_and_the_last_closes_at_its_balances(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("statements", 31).await;
    assert_eq!(api.deposit(&m, "1000", "fund-statements").await.status(), StatusCode::CREATED);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let split = now_ms(); // the API's clock is the system's
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let created = api.post_payout(&m, payout("statement-0001", "300", DEST_A)).await;
    assert_eq!(created.status(), StatusCode::CREATED);

    let first = statement(&api, &m, 0, split).await;
    assert_eq!(first["object"], "statement");
    assert_eq!(first["opening"], serde_json::json!({"available": "0", "held": "0"}));
    let kinds: Vec<&str> =
        first["entries"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["deposit"]);
    assert_eq!(first["closing"], serde_json::json!({"available": "1000", "held": "0"}));

    let second = statement(&api, &m, split, LATER_MS).await;
    assert_eq!(second["opening"], first["closing"], "a period opens where the last closed");
    let entries = second["entries"].as_array().unwrap();
    let changes: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["account"].as_str().unwrap(), e["change"].as_str().unwrap()))
        .collect();
    assert!(changes.contains(&("available", "-300")) && changes.contains(&("held", "300")));
    let (available, held) = api.balance(&m).await;
    assert_eq!(second["closing"], serde_json::json!({"available": available, "held": held}));
    assert_eq!(entries.last().unwrap()["after"], second["closing"]);

    let other = api.merchant("someone-else", 32).await;
    let theirs = statement(&api, &other, 0, LATER_MS).await;
    assert!(theirs["entries"].as_array().unwrap().is_empty(), "{theirs}");
}

/// The same period as CSV: its content type, the header, an opening row, a row per entry and a
/// closing row, the numbers as JSON gives them.
async fn a_statement_is_served_as_csv_when_asked(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("statements-csv", 33).await;
    assert_eq!(api.deposit(&m, "700", "fund-statements-csv").await.status(), StatusCode::CREATED);
    let response = api
        .http
        .get(format!("{}/v1/statements?asset={USDC}&from=1970-01-01&to={LATER_MS}", api.base))
        .bearer_auth(&m.key)
        .header("accept", "text/csv")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/csv; charset=utf-8");
    let text = response.text().await.unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows[0], payoutd_engine::statement_text::STATEMENT_CSV_HEADER);
    assert!(rows[1].starts_with("opening,1970-01-01T00:00:00.000Z,0,"), "{}", rows[1]);
    assert!(rows[2].starts_with("entry,") && rows[2].contains(",deposit,dep_"), "{}", rows[2]);
    assert!(rows[2].ends_with(",available,700,700,0"), "{}", rows[2]);
    assert!(rows[3].starts_with("closing,") && rows[3].ends_with(",700,0"), "{}", rows[3]);
    assert_eq!(rows.len(), 4);
}

/// Each bad request gets a problem naming what is wrong.
async fn a_bad_statement_request_gets_a_problem(db: TestDb) {
    let api = Api::start(db).await;
    let m = api.merchant("statements-bad", 34).await;
    for query in [
        "from=0&to=1".to_owned(),
        format!("asset=evm:1/NOPE&from=0&to={LATER_MS}"),
        format!("asset={USDC}&from=yesterday&to={LATER_MS}"),
    ] {
        let response = api.get(&m, &format!("/v1/statements?{query}")).await;
        assert_eq!(problem(response).await, (StatusCode::BAD_REQUEST, "invalid-request".into()));
    }
    for query in
        [format!("asset={USDC}&from=2026-12-02&to=2026-12-01"), format!("asset={USDC}&from=5&to=5")]
    {
        let response = api.get(&m, &format!("/v1/statements?{query}")).await;
        let expected = (StatusCode::UNPROCESSABLE_ENTITY, "empty-period".into());
        assert_eq!(problem(response).await, expected, "{query}");
    }
    let anonymous = api
        .http
        .get(format!("{}/v1/statements?asset={USDC}&from=0&to=1", api.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

payoutd_testkit::both_stores!(
    a_merchant_s_periods_chain_and_the_last_closes_at_its_balances,
    a_statement_is_served_as_csv_when_asked,
    a_bad_statement_request_gets_a_problem,
);
