//! The rows PostgreSQL reads for a signing claim and the policy's read do not grow with the queue behind them.

use super::*;

/// The rows a PostgreSQL signing claim reads (the turns, then the lock), and the approved read of
/// the rails without signing sessions (the turns, then the rows), do not grow with the approved
/// queue: the same claim and read over a queue twenty-one times longer stay within the bound their
/// limit sets.
/// Ranking the whole queue at every signing session made a 20,000-payout drain's claims cost grow
/// with the square of its backlog; the approved read joined its ids to `payouts` in a plan that
/// hashed the whole queue (56 rows read of the short queue, 853 of the long one).
async fn a_claims_reads_do_not_grow_with_the_approved_queue(db: TestDb) {
    const CLAIM_MAX: u32 = 4;
    const COPIES: i64 = 20;
    let w = World::new(db).await;
    for payout in queue_of_two_merchants(&w).await {
        w.approve(payout).await;
    }
    let pool = sqlx::PgPool::connect(w.db.url()).await.unwrap();
    let short = claim_rows_read(&pool, CLAIM_MAX).await;
    let short_read = approved_read_rows_read(&pool, CLAIM_MAX).await;
    copy_the_queue(&pool, "approved", COPIES).await;
    let long = claim_rows_read(&pool, CLAIM_MAX).await;
    let long_read = approved_read_rows_read(&pool, CLAIM_MAX).await;
    // What the claim may read, whatever the queue's length: one probe per waiting (merchant,
    // asset) pair and one past the last, each USDC pair's first turns (the ranked candidates), and
    // the lock's lookups by key (an entry of the row's earlier version counted too).
    let candidates = i64::from(CLAIM_MAX) * payoutd_store::pg_claim::CLAIM_WINDOW_FIRST;
    let (usdc_pairs, pairs) = (2, 3);
    let bound = usdc_pairs * candidates + (pairs + 1) + 2 * i64::from(CLAIM_MAX);
    assert_reads_within("the claim", short, long, bound);
    // The approved read of the rails without signing sessions (Solana, providers): the ranking
    // with the limit itself as the window, then the rows by key.
    let read_bound = usdc_pairs * i64::from(CLAIM_MAX) + (pairs + 1) + 2 * i64::from(CLAIM_MAX);
    assert_reads_within("the approved read", short_read, long_read, read_bound);
    // And the claim still serves merchants in turn: each merchant's first payout comes first.
    // Three wallets' sessions racing: the third finds every turn of its first window held by the
    // other two and reads the wide one.
    let mut sessions = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for address in [WALLET_1, WALLET_2, WALLET_3] {
        let wallet = w.wallet(address).await;
        let mut s = session(&w.lines, &wallet.id).await;
        let claimed = s.claim_approved(&[usdc()], CLAIM_MAX).await.unwrap();
        assert_eq!(claimed.len(), CLAIM_MAX as usize, "{address} claims a full batch");
        let merchants: std::collections::HashSet<_> =
            claimed[..2].iter().map(|p| p.merchant_id.clone()).collect();
        assert_eq!(merchants.len(), 2, "both merchants take turns in each claim: {claimed:?}");
        for p in &claimed {
            assert!(seen.insert(p.id.clone()), "{} claimed by two racing sessions", p.id);
        }
        sessions.push(s);
    }
}

/// The rows the policy pass's read of requested payouts takes on PostgreSQL do not grow with the
/// requested queue: the same read over a queue twenty-one times longer stays within the bound its
/// limit sets, and merchants still take turns.
/// Ranking the whole requested queue at every pass took 65-190 ms a pass of 256 over 100,000
/// requested payouts (a payroll batch waiting for the policy), growing with the queue.
async fn the_policy_reads_do_not_grow_with_the_requested_queue(db: TestDb) {
    const READ_MAX: u32 = 4;
    const COPIES: i64 = 20;
    let w = World::new(db).await;
    queue_of_two_merchants(&w).await;
    let pool = sqlx::PgPool::connect(w.db.url()).await.unwrap();
    let short = requested_rows_read(&w, &pool, READ_MAX).await;
    copy_the_queue(&pool, "requested", COPIES).await;
    let long = requested_rows_read(&w, &pool, READ_MAX).await;
    // One probe per waiting merchant and one past the last, each merchant's first turns, and the
    // lookups by key of those read (an entry of the row's earlier version counted too).
    let merchants = 2;
    let bound = merchants * i64::from(READ_MAX) + (merchants + 1) + 2 * i64::from(READ_MAX);
    assert_reads_within("the policy's read", short, long, bound);
}

/// The rows PostgreSQL reads from `payouts` for one read of `limit` requested payouts, its
/// statements run as the store runs them (the ranking, then the rows), in one transaction whose
/// own counters are read before and after; and the store's own read of them, merchants in turn.
async fn requested_rows_read(w: &World, pool: &sqlx::PgPool, limit: u32) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let before = payouts_rows_read(&mut tx).await;
    let queue: Vec<String> = sqlx::query_scalar(payoutd_store::pg_claim::RANK_REQUESTED_SQL)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let rows = sqlx::query(payoutd_store::pg_claim::READ_REQUESTED_SQL)
        .bind(&queue)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(rows.len(), limit as usize, "a full batch of {limit}");
    let after = payouts_rows_read(&mut tx).await;
    tx.rollback().await.unwrap();
    let read = w.store.requested_in_turn(limit).await.unwrap();
    let merchants: std::collections::HashSet<_> =
        read[..2].iter().map(|p| p.merchant_id.clone()).collect();
    assert_eq!(merchants.len(), 2, "both merchants take turns: {read:?}");
    after - before
}

/// `what` read `short` rows of the test's queue and `long` of the same queue 21 times longer:
/// both within `bound`, whatever the queue's length.
fn assert_reads_within(what: &str, short: i64, long: i64, bound: i64) {
    assert!(
        short > 0 && short <= bound,
        "{what} reads {short} rows of a short queue (at most {bound})"
    );
    assert!(
        long <= bound,
        "{what} over 21 times the queue reads {long} rows (at most {bound}; {short} over the queue)"
    );
}

/// Payouts of two merchants, two assets, in the test's queue (created, requested): 40 and 35 USDC
/// of the two merchants, 3 ETH of the first.
async fn queue_of_two_merchants(w: &World) -> Vec<Payout> {
    let (other, _) = w.engine.create_merchant("globex", [2u8; 32]).await.unwrap();
    w.fund(&w.m, &usdc(), 1_000).await;
    w.fund(&w.m, &eth(), 1_000).await;
    w.fund(&other, &usdc(), 1_000).await;
    let mut created = Vec::new();
    for (merchant, asset, count) in [(&w.m, usdc(), 40), (&other, usdc(), 35), (&w.m, eth(), 3)] {
        for _ in 0..count {
            created.push(w.create(merchant, &asset, 1, DEST_A).await);
        }
    }
    created
}

/// The queue of payouts in `status` made `copies` + 1 times longer without the engine: only its
/// length matters to what a read of it takes.
async fn copy_the_queue(pool: &sqlx::PgPool, status: &str, copies: i64) {
    sqlx::query(
        "INSERT INTO payouts (id, merchant_id, idempotency_key, fingerprint, asset, amount, destination, \
         metadata, status, version, created_at_ms, updated_at_ms) \
         SELECT 'po_' || md5(id || '-' || copy), merchant_id, idempotency_key || '-' || copy, fingerprint, asset, amount, \
         destination, metadata, status, version, created_at_ms, updated_at_ms \
         FROM payouts, generate_series(1, $2) AS copy WHERE status = $1",
    )
    .bind(status)
    .bind(copies)
    .execute(pool)
    .await
    .unwrap();
}

/// The rows PostgreSQL reads from `payouts` (its heap and every index of it) for one signing
/// claim of `limit` USDC payouts: the ranking with the claim's first window, then the lock.
async fn claim_rows_read(pool: &sqlx::PgPool, limit: u32) -> i64 {
    let window = i64::from(limit) * payoutd_store::pg_claim::CLAIM_WINDOW_FIRST;
    ranked_rows_read(pool, window, payoutd_store::pg_claim::LOCK_RANKED_SQL, limit).await
}

/// The rows PostgreSQL reads from `payouts` for one approved read of `limit` USDC payouts, as
/// `approved_in` reads them: the ranking with the limit as its window, then the rows.
async fn approved_read_rows_read(pool: &sqlx::PgPool, limit: u32) -> i64 {
    ranked_rows_read(pool, i64::from(limit), payoutd_store::pg_claim::READ_RANKED_SQL, limit).await
}

/// The rows read by the ranking of `window` turns and then `rows_sql` over the ranked ids, run as
/// the store runs them, in one transaction whose own counters are read before and after; the
/// second statement must return a full batch of `limit`.
async fn ranked_rows_read(
    pool: &sqlx::PgPool,
    window: i64,
    rows_sql: &'static str,
    limit: u32,
) -> i64 {
    let assets = vec![usdc().as_str().to_owned()];
    let mut tx = pool.begin().await.unwrap();
    let before = payouts_rows_read(&mut tx).await;
    let queue: Vec<String> = sqlx::query_scalar(payoutd_store::pg_claim::RANK_APPROVED_SQL)
        .bind(&assets)
        .bind(window)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    let rows = sqlx::query(rows_sql)
        .bind(&queue)
        .bind(&assets)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(rows.len(), limit as usize, "a full batch of {limit}");
    let after = payouts_rows_read(&mut tx).await;
    tx.rollback().await.unwrap();
    after - before
}

/// The rows this transaction has read from `payouts`: its heap and every index of it.
async fn payouts_rows_read(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>) -> i64 {
    sqlx::query_scalar(
        "SELECT (pg_stat_get_xact_tuples_returned('payouts'::regclass) \
         + (SELECT sum(pg_stat_get_xact_tuples_returned(indexrelid)) FROM pg_index \
            WHERE indrelid = 'payouts'::regclass))::BIGINT",
    )
    .fetch_one(&mut **tx)
    .await
    .unwrap()
}

/// PostgreSQL only: what a statement reads is PostgreSQL's own count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_policy_reads_do_not_grow_with_the_requested_queue_on_postgres() {
    the_policy_reads_do_not_grow_with_the_requested_queue(
        payoutd_testkit::db::fresh_postgres().await,
    )
    .await;
}

/// PostgreSQL only: what a statement reads is PostgreSQL's own count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claims_reads_do_not_grow_with_the_approved_queue_on_postgres() {
    a_claims_reads_do_not_grow_with_the_approved_queue(payoutd_testkit::db::fresh_postgres().await)
        .await;
}
