//! `payoutd statement` on both stores: a merchant's statement for a period as CSV, its opening balances made of what came before, its closing balances what the balances say; bad input gets a message and a failing exit code.

use std::process::Output;

use crate::support::payoutd;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::{
    Amount, AssetCode, AssetRegistry, DepositKey, Destination, EvmAddress, MerchantId, Metadata,
    PayoutId, PayoutKey, PayoutRequest,
};
use payoutd_engine::{Clock, Engine};
use payoutd_testkit::{TestDb, both_stores};

const USDC: &str = "evm:31337/USDC";
/// 2026-12-01T00:00:00Z.
const DAY_ONE_MS: i64 = 1_796_083_200_000;
const DAY_MS: i64 = 86_400_000;
const HOUR_MS: i64 = 3_600_000;

struct SetClock(AtomicI64);

impl Clock for SetClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The CSV's rows as (row kind, fields), the header checked.
fn rows(out: &Output) -> Vec<Vec<String>> {
    assert!(out.status.success(), "payoutd failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("row,at,at_ms,journal_id,"), "{text}");
    lines.map(|l| l.split(',').map(str::to_owned).collect()).collect()
}

/// (available, held) of a balances row (opening, closing) or of an entry's after-balances.
fn balances(row: &[String]) -> (&str, &str) {
    (row[8].as_str(), row[9].as_str())
}

/// The books the statements read. Day 1: 1,000 deposited. Day 2: 500 deposited, a payout of 300
/// held. Day 4: 50 deposited. The engine, the merchant and the payout.
async fn four_days_of_books(db: &TestDb) -> (Engine, MerchantId, PayoutId) {
    let clock = Arc::new(SetClock(AtomicI64::new(DAY_ONE_MS + HOUR_MS)));
    let engine = Engine::new(db.store(), clock.clone(), AssetRegistry::local_development());
    let (merchant, _) = engine.create_merchant("statements", [7; 32]).await.unwrap();
    let usdc = AssetCode::parse(USDC).unwrap().0;
    let deposit = async |key: &str, amount: u128| {
        let key = DepositKey::parse(key).unwrap();
        engine.deposit(&merchant, &usdc, Amount::from_u128(amount), key).await.unwrap();
    };
    deposit("day-1", 1_000).await;
    clock.0.store(DAY_ONE_MS + DAY_MS + HOUR_MS, Ordering::SeqCst);
    deposit("day-2", 500).await;
    let to = EvmAddress::parse("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed").unwrap();
    let key = PayoutKey::parse("statement-payout").unwrap();
    let amount = Amount::from_u128(300);
    let request =
        PayoutRequest::new(key, usdc.clone(), amount, Destination::Evm(to), Metadata::empty());
    let payout = engine.create_payout(&merchant, request).await.unwrap().0;
    clock.0.store(DAY_ONE_MS + 3 * DAY_MS, Ordering::SeqCst);
    deposit("day-4", 50).await;
    (engine, merchant, payout.id)
}

/// The statement of day 2 opens with day 1's balances, lists day 2's three entries with the
/// balances after each, and closes where they end; the statement of the week closes where the
/// balances stand. (Before, no statement existed: finance read the balances alone.)
async fn a_statement_opens_with_what_came_before_and_closes_where_the_balances_stand(db: TestDb) {
    let (engine, merchant, payout) = four_days_of_books(&db).await;
    let base = ["statement", "--merchant", merchant.as_str(), "--asset", USDC];
    let day_two = [&base[..], &["--from", "2026-12-02", "--to", "2026-12-03"]].concat();
    let day_two = rows(&payoutd(&db, &day_two));
    assert_eq!(day_two.len(), 5, "opening, three entries, closing: {day_two:?}");
    assert_eq!((day_two[0][0].as_str(), balances(&day_two[0])), ("opening", ("1000", "0")));
    assert_eq!(day_two[0][1], "2026-12-02T00:00:00.000Z");
    let entries: Vec<(&str, &str, &str, &str)> = day_two[1..4]
        .iter()
        .map(|r| (r[4].as_str(), r[5].as_str(), r[6].as_str(), r[7].as_str()))
        .collect();
    assert_eq!((entries[0].0, entries[0].2, entries[0].3), ("deposit", "available", "500"));
    assert!(entries.contains(&("hold", payout.as_str(), "available", "-300")), "{entries:?}");
    assert!(entries.contains(&("hold", payout.as_str(), "held", "300")), "{entries:?}");
    assert_eq!(balances(&day_two[3]), ("1200", "300"), "the balances after the last entry");
    assert_eq!((day_two[4][0].as_str(), balances(&day_two[4])), ("closing", ("1200", "300")));

    let week = [&base[..], &["--from", "2026-12-01", "--to", "2026-12-08"]].concat();
    let week = rows(&payoutd(&db, &week));
    let closing = week.last().unwrap();
    let now = engine.balances(&merchant).await.unwrap();
    let (available, held) = (now[0].available.to_string(), now[0].held.to_string());
    assert_eq!(balances(closing), (available.as_str(), held.as_str()), "where the balances stand");
    assert_eq!(balances(closing), ("1250", "300"));
    assert_eq!(balances(&week[0]), ("0", "0"));
}

/// A period that ends before it starts, a day that is none, a merchant that does not exist: a
/// message on stderr, exit code 1, nothing printed on stdout.
async fn a_bad_statement_request_gets_a_message_and_exit_code_1(db: TestDb) {
    let (_, merchant, _) = four_days_of_books(&db).await;
    let nobody = "mer_00000000000000000000000000000000";
    for (who, from, to, says) in [
        (merchant.as_str(), "2026-12-03", "2026-12-02", "before it starts"),
        (merchant.as_str(), "2026-13-01", "2026-12-02", "--from"),
        (merchant.as_str(), "yesterday", "2026-12-02", "--from"),
        (merchant.as_str(), "2026-12-01", "soon", "--to"),
        (nobody, "2026-12-01", "2026-12-02", "no merchant"),
    ] {
        let args = ["statement", "--merchant", who, "--asset", USDC, "--from", from, "--to", to];
        let out = payoutd(&db, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

both_stores!(
    a_statement_opens_with_what_came_before_and_closes_where_the_balances_stand,
    a_bad_statement_request_gets_a_message_and_exit_code_1,
);
