//! Webhook fan-out by dispatchers in several processes on one PostgreSQL: each takes a batch no other holds.

use std::sync::Arc;
use std::time::Duration;

use payoutd_domain::{Amount, AssetCode, AssetRegistry, DepositKey};
use payoutd_engine::{Clock, Engine, SystemClock};
use sqlx::Connection;

/// Deposits made, each one event to fan out.
const EVENTS: u32 = 5;
/// Long enough for any take that does not wait on a lock; a take that waits never ends on its own.
const TAKE_TIMEOUT_S: u64 = 10;

/// A dispatcher fans out past the events another dispatcher's open transaction holds instead of
/// waiting for it, and the held ones are taken once they are released, none twice. (Before, the
/// take waited on the other transaction's row locks, and two takes that locked the same rows in
/// different orders deadlocked: this test timed out.)
#[tokio::test]
async fn a_dispatcher_fans_out_past_the_events_another_holds() {
    let db = payoutd_testkit::db::fresh_postgres().await;
    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
    let (merchant, _) = engine.create_merchant("fan-out", [5; 32]).await.unwrap();
    let usdc = AssetCode::parse("evm:31337/USDC").unwrap().0;
    for i in 0..EVENTS {
        let key = DepositKey::parse(&format!("deposit-fan-out-{i}")).unwrap();
        engine.deposit(&merchant, &usdc, Amount::from_u128(5), key).await.unwrap();
    }
    let waiting = db.scalar_raw("SELECT count(*) FROM events WHERE fanned_out_at_ms IS NULL").await;
    assert!(waiting >= i64::from(EVENTS), "{waiting}");
    let mut other = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let mut held = other.begin().await.unwrap();
    sqlx::query(
        "SELECT seq FROM events WHERE fanned_out_at_ms IS NULL ORDER BY seq LIMIT 1 FOR UPDATE",
    )
    .fetch_one(&mut *held)
    .await
    .unwrap();
    let now = SystemClock.now_ms();
    let webhooks = db.webhooks();
    let take = webhooks.fan_out(100, now);
    let taken = tokio::time::timeout(Duration::from_secs(TAKE_TIMEOUT_S), take)
        .await
        .expect("the take waited on rows another holds")
        .unwrap();
    assert_eq!(i64::from(taken), waiting - 1, "every event but the held one");
    held.rollback().await.unwrap();
    assert_eq!(db.webhooks().fan_out(100, now).await.unwrap(), 1, "the released one, once");
    assert_eq!(db.webhooks().fan_out(100, now).await.unwrap(), 0);
}
