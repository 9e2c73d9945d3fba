//! One contract suite for both stores: every test runs on a fresh PostgreSQL database and a fresh SQLite file.

use std::sync::Arc;

use payoutd_domain::{
    Amount, AssetCode, AssetRegistry, DepositKey, Destination, EventType, EvmAddress, MerchantId,
    Metadata, PayoutKey, PayoutRequest, PayoutStatus,
};
use payoutd_engine::store::{
    LIST_LIMIT_MAX, NewEvent, PayoutQuery, PayoutTransition, TransitionOutcome,
};
use payoutd_engine::{Engine, IntakeError, Replay, SystemClock};
use payoutd_testkit::TestDb;

const DEST_A: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
const DEST_B: &str = "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359";
const U256_MAX: &str =
    "115792089237316195423570985008687907853269984665640564039457584007913129639935";

fn usdc() -> AssetCode {
    AssetCode::parse("evm:31337/USDC").unwrap().0
}

fn request(key: &str, amount: u128, dest: &str) -> PayoutRequest {
    PayoutRequest::new(
        PayoutKey::parse(key).unwrap(),
        usdc(),
        Amount::from_u128(amount),
        Destination::Evm(EvmAddress::parse(dest).unwrap()),
        Metadata::empty(),
    )
}

async fn setup(db: &TestDb) -> (Engine, MerchantId) {
    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
    let (merchant, _key) = engine.create_merchant("acme", [1u8; 32]).await.unwrap();
    (engine, merchant)
}

async fn fund(engine: &Engine, merchant: &MerchantId, amount: u128) {
    let key = DepositKey::parse(&format!("fund-{}", uuid::Uuid::new_v4().simple())).unwrap();
    engine.deposit(merchant, &usdc(), Amount::from_u128(amount), key).await.unwrap();
}

async fn balance(engine: &Engine, merchant: &MerchantId) -> (Amount, Amount) {
    let b = engine.balances(merchant).await.unwrap();
    b.iter().find(|b| b.asset == usdc()).map(|b| (b.available, b.held)).unwrap_or_default()
}

async fn assert_ledger_clean(engine: &Engine) {
    let audit = engine.store().audit_ledger().await.unwrap();
    assert!(audit.is_clean(), "ledger audit failed: {audit:?}");
}

async fn same_key_64_concurrent_creates_converge_on_one_payout(db: TestDb) {
    let (engine, m) = setup(&db).await;
    fund(&engine, &m, 1_000).await;
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (engine, m) = (engine.clone(), m.clone());
            tokio::spawn(async move {
                engine.create_payout(&m, request("order-000001", 10, DEST_A)).await.unwrap()
            })
        })
        .collect();
    let results = futures::future::join_all(tasks).await;
    let ids: std::collections::BTreeSet<_> =
        results.iter().map(|r| r.as_ref().unwrap().0.id.clone()).collect();
    let created = results.iter().filter(|r| r.as_ref().unwrap().1 == Replay::Created).count();
    assert_eq!(ids.len(), 1, "all 64 requests return the same payout");
    assert_eq!(created, 1, "exactly one request created it");
    assert_eq!(
        balance(&engine, &m).await,
        (Amount::from_u128(990), Amount::from_u128(10)),
        "exactly one hold"
    );
    assert_eq!(
        engine.store().count_events(&m, EventType::PayoutCreated).await.unwrap(),
        1,
        "exactly one outbox event"
    );
    assert_eq!(db.scalar_raw("SELECT count(*) FROM payouts").await, 1);
    assert_ledger_clean(&engine).await;
}

async fn key_reused_with_other_parameters_is_refused_and_changes_nothing(db: TestDb) {
    let (engine, m) = setup(&db).await;
    fund(&engine, &m, 1_000).await;
    let (first, _) = engine.create_payout(&m, request("order-000002", 10, DEST_A)).await.unwrap();
    for other in [request("order-000002", 11, DEST_A), request("order-000002", 10, DEST_B)] {
        assert!(matches!(engine.create_payout(&m, other).await, Err(IntakeError::KeyReused)));
    }
    // The same destination in lower case is the same request: a replay, not a reuse.
    let (again, replay) = engine
        .create_payout(&m, request("order-000002", 10, &DEST_A.to_lowercase()))
        .await
        .unwrap();
    assert_eq!((again.id, replay), (first.id, Replay::Replayed));
    assert_eq!(balance(&engine, &m).await, (Amount::from_u128(990), Amount::from_u128(10)));
    assert_eq!(db.scalar_raw("SELECT count(*) FROM payouts").await, 1);
}

async fn racing_withdrawals_of_full_balance_one_wins_never_negative(db: TestDb) {
    let (engine, m) = setup(&db).await;
    fund(&engine, &m, 500).await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (engine, m) = (engine.clone(), m.clone());
            tokio::spawn(async move {
                engine.create_payout(&m, request(&format!("withdraw-{i:04}"), 500, DEST_A)).await
            })
        })
        .collect();
    let results = futures::future::join_all(tasks).await;
    let ok = results.iter().filter(|r| r.as_ref().unwrap().is_ok()).count();
    let refused = results
        .iter()
        .filter(|r| matches!(r.as_ref().unwrap(), Err(IntakeError::InsufficientFunds)))
        .count();
    assert_eq!((ok, refused), (1, 15));
    assert_eq!(balance(&engine, &m).await, (Amount::ZERO, Amount::from_u128(500)));
    assert_eq!(db.scalar_raw("SELECT count(*) FROM payouts").await, 1);
    assert_ledger_clean(&engine).await;
}

async fn insufficient_funds_writes_nothing_and_same_key_succeeds_after_deposit(db: TestDb) {
    let (engine, m) = setup(&db).await;
    fund(&engine, &m, 5).await;
    let journals_before = db.scalar_raw("SELECT count(*) FROM journals").await;
    assert!(matches!(
        engine.create_payout(&m, request("order-000003", 10, DEST_A)).await,
        Err(IntakeError::InsufficientFunds)
    ));
    assert_eq!(db.scalar_raw("SELECT count(*) FROM payouts").await, 0);
    assert_eq!(
        db.scalar_raw("SELECT count(*) FROM journals").await,
        journals_before,
        "no hold journal"
    );
    assert_eq!(balance(&engine, &m).await, (Amount::from_u128(5), Amount::ZERO));
    fund(&engine, &m, 5).await;
    let (_, replay) = engine.create_payout(&m, request("order-000003", 10, DEST_A)).await.unwrap();
    assert_eq!(replay, Replay::Created);
    assert_eq!(balance(&engine, &m).await, (Amount::ZERO, Amount::from_u128(10)));
}

async fn merchants_are_isolated(db: TestDb) {
    let (engine, a) = setup(&db).await;
    let (b, _) = engine.create_merchant("globex", [2u8; 32]).await.unwrap();
    fund(&engine, &a, 100).await;
    fund(&engine, &b, 100).await;
    let (pa, _) = engine.create_payout(&a, request("shared-key-1", 10, DEST_A)).await.unwrap();
    let (pb, rb) = engine.create_payout(&b, request("shared-key-1", 20, DEST_B)).await.unwrap();
    assert_ne!(pa.id, pb.id);
    assert_eq!(rb, Replay::Created, "merchant B's key does not collide with A's");
    assert!(matches!(engine.payout(&a, &pb.id).await, Err(IntakeError::NotFound)));
    assert!(matches!(engine.payout(&b, &pa.id).await, Err(IntakeError::NotFound)));
    assert!(matches!(engine.cancel_payout(&a, &pb.id).await, Err(IntakeError::NotFound)));
    let query = PayoutQuery {
        key: Some(PayoutKey::parse("shared-key-1").unwrap()),
        limit: 10,
        ..Default::default()
    };
    let listed = engine.list_payouts(&a, query).await.unwrap().payouts;
    assert_eq!(listed.iter().map(|p| &p.id).collect::<Vec<_>>(), vec![&pa.id]);
    assert_eq!(balance(&engine, &a).await, (Amount::from_u128(90), Amount::from_u128(10)));
    assert_eq!(balance(&engine, &b).await, (Amount::from_u128(80), Amount::from_u128(20)));
}

async fn cancel_before_signing_releases_the_hold_exactly_once(db: TestDb) {
    let (engine, m) = setup(&db).await;
    fund(&engine, &m, 100).await;
    let (p, _) = engine.create_payout(&m, request("order-000004", 40, DEST_A)).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (engine, m, id) = (engine.clone(), m.clone(), p.id.clone());
            tokio::spawn(async move { engine.cancel_payout(&m, &id).await.unwrap() })
        })
        .collect();
    let results = futures::future::join_all(tasks).await;
    assert_eq!(results.iter().filter(|r| r.as_ref().unwrap().1 == Replay::Created).count(), 1);
    assert!(results.iter().all(|r| r.as_ref().unwrap().0.status == PayoutStatus::Canceled));
    assert_eq!(balance(&engine, &m).await, (Amount::from_u128(100), Amount::ZERO));
    assert_eq!(engine.store().count_events(&m, EventType::PayoutCanceled).await.unwrap(), 1);
    assert_eq!(db.scalar_raw("SELECT count(*) FROM journals WHERE kind = 'release'").await, 1);
    assert_ledger_clean(&engine).await;
}

async fn cancel_is_refused_once_processing(db: TestDb) {
    let (engine, m) = setup(&db).await;
    fund(&engine, &m, 100).await;
    let (p, _) = engine.create_payout(&m, request("order-000005", 40, DEST_A)).await.unwrap();
    db.exec_raw(&format!("UPDATE payouts SET status = 'processing' WHERE id = '{}'", p.id))
        .await
        .unwrap();
    assert!(matches!(
        engine.cancel_payout(&m, &p.id).await,
        Err(IntakeError::NotCancelable(PayoutStatus::Processing))
    ));
    assert_eq!(
        balance(&engine, &m).await,
        (Amount::from_u128(60), Amount::from_u128(40)),
        "the hold stands"
    );
}

async fn conditional_transition_applies_once_under_race(db: TestDb) {
    let (engine, m) = setup(&db).await;
    fund(&engine, &m, 100).await;
    let (p, _) = engine.create_payout(&m, request("order-000006", 40, DEST_A)).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, p) = (engine.store().clone(), p.clone());
            tokio::spawn(async move {
                let mut after = p.clone();
                after.status = PayoutStatus::Approved;
                store
                    .transition_payout(&PayoutTransition {
                        payout_id: p.id.clone(),
                        merchant_id: p.merchant_id.clone(),
                        from: PayoutStatus::Requested,
                        from_version: p.version,
                        to: PayoutStatus::Approved,
                        journals: vec![],
                        event: NewEvent::for_payout(EventType::PayoutApproved, &after, 0),
                        at_ms: 0,
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    let results = futures::future::join_all(tasks).await;
    let applied = results
        .iter()
        .filter(|r| matches!(r.as_ref().unwrap(), TransitionOutcome::Applied(_)))
        .count();
    assert_eq!(applied, 1, "I5: exactly one of eight racing transitions applies");
    let now = engine.payout(&m, &p.id).await.unwrap();
    assert_eq!((now.status, now.version), (PayoutStatus::Approved, 2));
}

async fn deposits_are_idempotent_per_merchant_key(db: TestDb) {
    let (engine, m) = setup(&db).await;
    let key = DepositKey::parse("wire-2026-11-30-1").unwrap();
    let (d1, r1) = engine.deposit(&m, &usdc(), Amount::from_u128(70), key.clone()).await.unwrap();
    let (d2, r2) = engine.deposit(&m, &usdc(), Amount::from_u128(70), key.clone()).await.unwrap();
    assert_eq!((d1.id.clone(), r1, r2), (d2.id, Replay::Created, Replay::Replayed));
    assert!(matches!(
        engine.deposit(&m, &usdc(), Amount::from_u128(71), key).await,
        Err(IntakeError::KeyReused)
    ));
    assert_eq!(balance(&engine, &m).await, (Amount::from_u128(70), Amount::ZERO));
    let ghost = MerchantId::new();
    let k = DepositKey::parse("ghost-1").unwrap();
    assert!(matches!(
        engine.deposit(&ghost, &usdc(), Amount::from_u128(1), k).await,
        Err(IntakeError::UnknownMerchant)
    ));
}

async fn amounts_up_to_2_pow_256_minus_1_stay_exact(db: TestDb) {
    let (engine, m) = setup(&db).await;
    let max = Amount::parse(U256_MAX).unwrap();
    engine.deposit(&m, &usdc(), max, DepositKey::parse("max-1").unwrap()).await.unwrap();
    let big = Amount::parse(
        "115792089237316195423570985008687907853269984665640564039457584007913129639934",
    )
    .unwrap();
    let req = PayoutRequest::new(
        PayoutKey::parse("order-max-1").unwrap(),
        usdc(),
        big,
        Destination::Evm(EvmAddress::parse(DEST_A).unwrap()),
        Metadata::empty(),
    );
    let (p, _) = engine.create_payout(&m, req).await.unwrap();
    assert_eq!(engine.payout(&m, &p.id).await.unwrap().amount, big);
    assert_eq!(balance(&engine, &m).await, (Amount::from_u128(1), big));
    // A deposit that would take the available balance past 2^256-1 is refused and changes nothing.
    let overflow = engine.deposit(&m, &usdc(), max, DepositKey::parse("max-2").unwrap()).await;
    assert!(overflow.is_err(), "a balance above 2^256-1 cannot be stored");
    assert_eq!(balance(&engine, &m).await, (Amount::from_u128(1), big));
    assert_ledger_clean(&engine).await;
}

async fn listing_pages_newest_first_with_a_cursor(db: TestDb) {
    let (engine, m) = setup(&db).await;
    fund(&engine, &m, 1_000).await;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(
            engine
                .create_payout(&m, request(&format!("page-key-{i:03}"), 1, DEST_A))
                .await
                .unwrap()
                .0
                .id,
        );
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = engine
            .list_payouts(
                &m,
                PayoutQuery { before: before.clone(), limit: 3, ..Default::default() },
            )
            .await
            .unwrap();
        before = page.payouts.last().map(|p| p.id.clone());
        seen.extend(page.payouts.into_iter().map(|p| p.id));
        if !page.has_more {
            break;
        }
    }
    assert_eq!(seen, ids);
    let approved =
        PayoutQuery { status: Some(PayoutStatus::Approved), limit: 10, ..Default::default() };
    assert!(engine.list_payouts(&m, approved).await.unwrap().payouts.is_empty());
    // A page at the maximum size still says whether more exist.
    for i in 0..LIST_LIMIT_MAX {
        engine.create_payout(&m, request(&format!("page-max-{i:04}"), 1, DEST_A)).await.unwrap();
    }
    let full = engine
        .list_payouts(&m, PayoutQuery { limit: LIST_LIMIT_MAX, ..Default::default() })
        .await
        .unwrap();
    assert_eq!((full.payouts.len(), full.has_more), (LIST_LIMIT_MAX as usize, true));
}

async fn the_schema_refuses_illegal_states(db: TestDb) {
    let (engine, m) = setup(&db).await;
    fund(&engine, &m, 100).await;
    let (p, _) = engine.create_payout(&m, request("order-000007", 40, DEST_A)).await.unwrap();
    // The ledger is append-only.
    assert!(db.exec_raw("UPDATE ledger_entries SET account = 'x'").await.is_err());
    assert!(db.exec_raw("DELETE FROM journals").await.is_err());
    // Balances cannot go negative, even by hand.
    let negative = if db.is_postgres() {
        "UPDATE balances SET available = -1"
    } else {
        "UPDATE balances SET available = '-1'"
    };
    assert!(db.exec_raw(negative).await.is_err());
    assert!(db.exec_raw("UPDATE payouts SET status = 'teleported'").await.is_err());
    // I3: one live attempt per payout. Each EVM attempt owns its own (wallet, nonce) slot.
    db.exec_raw(&format!("INSERT INTO hot_wallets (id, chain, address, next_nonce) VALUES ('hw_test', 'evm:31337', '{DEST_B}', 0)"))
        .await
        .unwrap();
    let attempt = |id: &str, no: i32, status: &str| {
        format!(
            "INSERT INTO attempts (id, payout_id, attempt_no, status, rail, hot_wallet_id, nonce, created_at_ms, updated_at_ms) \
             VALUES ('{id}', '{}', {no}, '{status}', 'evm', 'hw_test', {no}, 0, 0)",
            p.id
        )
    };
    db.exec_raw(&attempt("att_1", 1, "signed")).await.unwrap();
    assert!(
        db.exec_raw(&attempt("att_2", 2, "created")).await.is_err(),
        "second live attempt refused"
    );
    assert!(
        db.exec_raw(&attempt("att_3", 3, "dead")).await.is_err(),
        "a dead attempt needs its proof"
    );
    db.exec_raw(
        "UPDATE attempts SET status = 'dead', death_proof = 'cancel confirmed' WHERE id = 'att_1'",
    )
    .await
    .unwrap();
    db.exec_raw(&attempt("att_2", 2, "created")).await.unwrap();
    let reused_nonce = format!(
        "INSERT INTO attempts (id, payout_id, attempt_no, status, rail, hot_wallet_id, nonce, death_proof, created_at_ms, updated_at_ms) \
         VALUES ('att_4', '{}', 4, 'dead', 'evm', 'hw_test', 2, 'x', 0, 0)",
        p.id
    );
    assert!(db.exec_raw(&reused_nonce).await.is_err(), "a wallet's nonce belongs to one attempt");
    if db.is_postgres() {
        let no_slot = format!(
            "INSERT INTO attempts (id, payout_id, attempt_no, status, rail, death_proof, created_at_ms, updated_at_ms) \
             VALUES ('att_5', '{}', 5, 'dead', 'evm', 'x', 0, 0)",
            p.id
        );
        assert!(db.exec_raw(&no_slot).await.is_err(), "an EVM attempt owns a (wallet, nonce) slot");
    }
    assert_eq!(balance(&engine, &m).await, (Amount::from_u128(60), Amount::from_u128(40)));
}

/// API keys: a found key is remembered for a while, a missing one never is (a key created right
/// after a failed attempt works at once), and only the key's own merchant is returned.
async fn api_keys_authenticate_their_merchant_and_misses_are_not_remembered(db: TestDb) {
    let (engine, acme) = setup(&db).await;
    let acme_key = payoutd_domain::ApiKey::from_random([1u8; 32]);
    assert_eq!(engine.authenticate(&acme_key).await.unwrap(), Some(acme.clone()));
    assert_eq!(
        engine.authenticate(&acme_key).await.unwrap(),
        Some(acme.clone()),
        "from the cache, the same answer"
    );
    let later = payoutd_domain::ApiKey::from_random([9u8; 32]);
    assert_eq!(engine.authenticate(&later).await.unwrap(), None);
    let (other, key) = engine.create_merchant("later", [9u8; 32]).await.unwrap();
    assert_eq!(key.expose(), later.expose());
    assert_eq!(
        engine.authenticate(&later).await.unwrap(),
        Some(other),
        "a miss was not remembered"
    );
    assert_eq!(
        engine.authenticate(&payoutd_domain::ApiKey::presented("pk_nope")).await.unwrap(),
        None
    );
}

/// Payout creation by a presented key reads the key's merchant and its payout under the request's
/// key in one lookup: a replay answers the key's own merchant's payout, never another merchant's
/// under the same key, and an unknown or revoked key creates and replays nothing.
async fn a_presented_key_creates_and_replays_only_its_own_merchants_payouts(db: TestDb) {
    use payoutd_domain::ApiKey;
    let (engine, acme) = setup(&db).await;
    let acme_key = ApiKey::from_random([1u8; 32]);
    let (globex, globex_key) = engine.create_merchant("globex", [2u8; 32]).await.unwrap();
    fund(&engine, &acme, 1_000).await;
    fund(&engine, &globex, 1_000).await;
    let (first, replay) = engine
        .create_payout_with_api_key(&acme_key, request("key-0001", 10, DEST_A))
        .await
        .unwrap();
    assert_eq!((replay, &first.merchant_id), (Replay::Created, &acme));
    let (again, replay) = engine
        .create_payout_with_api_key(&acme_key, request("key-0001", 10, DEST_A))
        .await
        .unwrap();
    assert_eq!((replay, &again.id), (Replay::Replayed, &first.id));
    let (theirs, replay) = engine
        .create_payout_with_api_key(&globex_key, request("key-0001", 10, DEST_A))
        .await
        .unwrap();
    assert_eq!((replay, &theirs.merchant_id), (Replay::Created, &globex), "one key, two merchants");
    assert_ne!(theirs.id, first.id);
    let store = engine.store();
    let found = store.merchant_and_payout_by_key(&acme_key.hash(), &first.key).await.unwrap();
    assert_eq!(found.map(|(m, p)| (m, p.map(|p| p.id))), Some((acme.clone(), Some(first.id))));
    let none = PayoutKey::parse("key-none").unwrap();
    let found = store.merchant_and_payout_by_key(&acme_key.hash(), &none).await.unwrap();
    assert_eq!(found.map(|(m, p)| (m, p.is_some())), Some((acme.clone(), false)));
    let unknown = ApiKey::presented("pk_nope");
    let refused =
        engine.create_payout_with_api_key(&unknown, request("key-0002", 10, DEST_A)).await;
    assert!(matches!(refused, Err(IntakeError::UnknownApiKey)), "{refused:?}");
    engine.revoke_api_key(&acme_key.hash().id()).await.unwrap();
    for key in ["key-0001", "key-0003"] {
        let refused = engine.create_payout_with_api_key(&acme_key, request(key, 10, DEST_A)).await;
        assert!(matches!(refused, Err(IntakeError::UnknownApiKey)), "revoked, {key}: {refused:?}");
    }
    assert_eq!(balance(&engine, &acme).await, (Amount::from_u128(990), Amount::from_u128(10)));
    assert_eq!(balance(&engine, &globex).await, (Amount::from_u128(990), Amount::from_u128(10)));
    assert_ledger_clean(&engine).await;
}

/// The server's clock, read in milliseconds: a worker whose own clock is an hour off reads the
/// database's time through it, and is out of step until its clock comes back.
async fn a_worker_s_clock_reads_the_database_s_time(db: TestDb) {
    use payoutd_engine::{Clock, DatabaseClock};
    let database_ms = db.time().database_now_ms().await.unwrap();
    let system_ms = SystemClock.now_ms();
    assert!((database_ms - system_ms).abs() < 5_000, "{database_ms} vs {system_ms}");
    struct HourAhead;
    impl Clock for HourAhead {
        fn now_ms(&self) -> i64 {
            SystemClock.now_ms() + 3_600_000
        }
    }
    let clock = DatabaseClock::new(Arc::new(HourAhead));
    assert!(!clock.in_step(), "nothing vouches for a clock never measured");
    let offset_ms = clock.measure(db.time().as_ref()).await.unwrap();
    assert!((offset_ms + 3_600_000).abs() < 5_000, "offset {offset_ms}");
    assert!((clock.now_ms() - SystemClock.now_ms()).abs() < 5_000, "the database's time");
    assert!(!clock.in_step());
    let in_step = DatabaseClock::new(Arc::new(SystemClock));
    in_step.measure(db.time().as_ref()).await.unwrap();
    assert!(in_step.in_step());
}

payoutd_testkit::both_stores!(
    a_worker_s_clock_reads_the_database_s_time,
    a_presented_key_creates_and_replays_only_its_own_merchants_payouts,
    api_keys_authenticate_their_merchant_and_misses_are_not_remembered,
    same_key_64_concurrent_creates_converge_on_one_payout,
    key_reused_with_other_parameters_is_refused_and_changes_nothing,
    racing_withdrawals_of_full_balance_one_wins_never_negative,
    insufficient_funds_writes_nothing_and_same_key_succeeds_after_deposit,
    merchants_are_isolated,
    cancel_before_signing_releases_the_hold_exactly_once,
    cancel_is_refused_once_processing,
    conditional_transition_applies_once_under_race,
    deposits_are_idempotent_per_merchant_key,
    amounts_up_to_2_pow_256_minus_1_stay_exact,
    listing_pages_newest_first_with_a_cursor,
    the_schema_refuses_illegal_states,
);

/// On SQLite, a payout the balance cannot cover is refused without waiting for the single writer:
/// with another connection holding the write lock, the refusal comes at once (a flood of them
/// does not queue behind everyone's writes). (Before, it took the lock first and waited.)
#[tokio::test]
async fn sqlite_refuses_an_uncoverable_payout_without_waiting_for_the_writer() {
    use sqlx::Connection;
    let db = payoutd_testkit::db::fresh_sqlite().await;
    let (engine, merchant) = setup(&db).await;
    fund(&engine, &merchant, 100).await;
    let mut writer = sqlx::SqliteConnection::connect(db.url()).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE").execute(&mut writer).await.unwrap();
    let refused = tokio::time::timeout(
        std::time::Duration::from_millis(REFUSED_WITHIN_MS),
        engine.create_payout(&merchant, request("uncoverable-0001", 101, DEST_A)),
    )
    .await;
    assert!(matches!(refused, Ok(Err(IntakeError::InsufficientFunds))), "{refused:?}");
    sqlx::query("ROLLBACK").execute(&mut writer).await.unwrap();
    let (payout, replay) =
        engine.create_payout(&merchant, request("coverable-0001", 100, DEST_A)).await.unwrap();
    assert_eq!(
        (payout.status, replay),
        (PayoutStatus::Requested, Replay::Created),
        "a payout it covers is still taken under the lock"
    );
}

/// Far below the store's 30 s busy timeout: a refusal that waited for the writer would miss it.
const REFUSED_WITHIN_MS: u64 = 2_000;

/// On PostgreSQL, a transaction whose `BEGIN` is cancelled in flight (a request timeout, a task
/// dropped mid-call) leaves no open transaction behind on the pooled connection: the next user of
/// that connection runs in a transaction of its own. (Before, with sqlx-postgres 0.9.0, the session
/// stayed inside the abandoned transaction: the next statements ran in it and held their row locks
/// for ever, which hung the simulator's PostgreSQL seeds.)
#[tokio::test]
async fn postgres_a_cancelled_begin_leaves_no_transaction_behind() {
    use sqlx::Connection;
    use sqlx::postgres::PgPoolOptions;
    use std::future::Future;
    let db = payoutd_testkit::db::fresh_postgres().await;
    let pool = PgPoolOptions::new().max_connections(1).connect(db.url()).await.unwrap();
    let mut watcher = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let waker = std::task::Waker::noop();
    // Poll a BEGIN until the server shows the session inside the transaction while the answer is
    // still unread: the window a cancellation falls into. A BEGIN that completes first (a poll read
    // the answer) is ended by its own drop and tried again.
    let mut begun = false;
    'tries: for _ in 0..BEGIN_TRIES_MAX {
        let mut begin = Box::pin(pool.begin());
        for _ in 0..WATCHES_PER_TRY_MAX {
            if begin.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_ready() {
                continue 'tries;
            }
            let sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'";
            if sqlx::query_scalar::<_, i64>(sql).fetch_one(&mut watcher).await.unwrap() > 0 {
                begun = true;
                drop(begin);
                break 'tries;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    assert!(begun, "no BEGIN was caught in flight");
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("CREATE TEMP TABLE probe (n INT)").execute(&mut *conn).await.unwrap();
    // Outside a transaction each statement commits: no transaction id is left assigned after it.
    let stale: Option<i64> = sqlx::query_scalar("SELECT txid_current_if_assigned()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(
        stale, None,
        "the statements ran inside the transaction a cancelled BEGIN left open"
    );
}

/// BEGINs tried until one is caught in flight, and looks at the server per try (10 ms apart).
const BEGIN_TRIES_MAX: usize = 20;
const WATCHES_PER_TRY_MAX: usize = 100;
