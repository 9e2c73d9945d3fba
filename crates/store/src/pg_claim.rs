//! The approved and requested queues on PostgreSQL, merchants taking turns (the signing claim, the other rails' reads, the policy pass): the turns read as far as the limit reaches, then those rows by key, locked or not.
//!
//! Public so that a test can run them and count what PostgreSQL reads: it must not grow with the queue.

/// Signing sessions (of all wallets and workers) a claim makes room for: it ranks this many times
/// its limit, so each racing session finds turns the others have not locked. A session beyond
/// them may find fewer this pass, and takes the rest in its next.
pub const CLAIM_RACING_SESSIONS_MAX: i64 = 8;

/// The window a claim ranks first, in times its limit: its own turns and one racing session's
/// (two wallets). Ranking costs a lookup per id, so the wide window is read only when the narrow
/// one held fewer free turns than the limit and the queue goes on.
pub const CLAIM_WINDOW_FIRST: i64 = 2;

/// The first `$2` approved payouts in turn order (a payout's turn is its rank among its merchant's
/// approved payouts of the assets `$1`, oldest first; turn, then age), as ids in that order: the
/// order of `fair_select!`, read without ranking the whole queue. The waiting (merchant, asset)
/// pairs are found by skipping through `payouts_approved_turns`, one index probe each (every pair,
/// whatever its asset, so the skip never walks another asset's rows), and each pair of the assets
/// gives at most its first `$2` ids, one short range of the index: no merchant can need more to fill
/// `$2` places. The rows read are at most `$2` per waiting pair, however long the queue.
pub const RANK_APPROVED_SQL: &str = "\
WITH RECURSIVE pairs(merchant_id, asset) AS ( \
  (SELECT merchant_id, asset FROM payouts WHERE status = 'approved' ORDER BY merchant_id, asset LIMIT 1) \
  UNION ALL \
  SELECT later.merchant_id, later.asset FROM pairs CROSS JOIN LATERAL ( \
    SELECT merchant_id, asset FROM payouts \
    WHERE status = 'approved' AND (merchant_id, asset) > (pairs.merchant_id, pairs.asset) \
    ORDER BY merchant_id, asset LIMIT 1) AS later \
) \
SELECT id FROM ( \
  SELECT firsts.id, row_number() OVER (PARTITION BY pairs.merchant_id ORDER BY firsts.id) AS turn \
  FROM pairs CROSS JOIN LATERAL ( \
    SELECT id FROM payouts \
    WHERE status = 'approved' AND merchant_id = pairs.merchant_id AND asset = pairs.asset \
    ORDER BY id LIMIT $2) AS firsts \
  WHERE pairs.asset = ANY($1) \
) AS ranked WHERE turn <= $2 ORDER BY turn, id LIMIT $2";

/// The payouts of the ranked ids `$1` that pass `$filter`, in their order (a read, no lock). One
/// lookup by key per id, in turn: the `LIMIT 1` keeps the lateral lookup a subquery PostgreSQL
/// cannot flatten into a join, whose plan on a table it believes small hashes the whole queue (the
/// rows-read test caught that plan).
macro_rules! read_ranked_sql {
    ($filter:literal) => {
        concat!(
            "SELECT ",
            crate::shared_reads::payout_columns!("p."),
            " FROM unnest($1::text[]) WITH ORDINALITY AS queue(id, turn) \
             CROSS JOIN LATERAL (SELECT * FROM payouts WHERE payouts.id = queue.id LIMIT 1) AS p \
             WHERE ",
            $filter,
            " ORDER BY queue.turn"
        )
    };
}

/// The first `$3` of the ranked ids `$1` still approved in one of the assets `$2`, in their order.
pub const READ_RANKED_SQL: &str =
    concat!(read_ranked_sql!("p.status = 'approved' AND p.asset = ANY($2)"), " LIMIT $3");

/// The first `$1` requested payouts in turn order (a payout's turn is its rank among its
/// merchant's requested payouts, oldest first; turn, then age), as ids in that order: the order of
/// `fair_select!` over `status = 'requested'`, read without ranking the whole queue (the policy
/// pass reads it every pass, and a 100,000-line batch waits there). The waiting merchants are found
/// by skipping through `payouts_requested_turns` (migration 0026), one index probe each, and each
/// gives at most its first `$1` ids: the rows read are at most `$1` per waiting merchant.
pub const RANK_REQUESTED_SQL: &str = "\
WITH RECURSIVE merchants(merchant_id) AS ( \
  (SELECT merchant_id FROM payouts WHERE status = 'requested' ORDER BY merchant_id LIMIT 1) \
  UNION ALL \
  SELECT later.merchant_id FROM merchants CROSS JOIN LATERAL ( \
    SELECT merchant_id FROM payouts \
    WHERE status = 'requested' AND merchant_id > merchants.merchant_id \
    ORDER BY merchant_id LIMIT 1) AS later \
) \
SELECT id FROM ( \
  SELECT firsts.id, row_number() OVER (PARTITION BY merchants.merchant_id ORDER BY firsts.id) AS turn \
  FROM merchants CROSS JOIN LATERAL ( \
    SELECT id FROM payouts WHERE status = 'requested' AND merchant_id = merchants.merchant_id \
    ORDER BY id LIMIT $1) AS firsts \
) AS ranked ORDER BY turn, id LIMIT $1";

/// The ranked ids `$1` still requested, in their order.
pub const READ_REQUESTED_SQL: &str = read_ranked_sql!("p.status = 'requested'");

/// Locks up to `$3` of the ranked ids `$1` still approved in one of the assets `$2`, in their
/// order, skipping rows another session holds (`payoutd_lock_in_turn`, migration 0025: one lookup
/// by key per id, so the lock reads no more rows than it was given, whatever the planner believes
/// of the table). The lock re-checks the row: a payout another session committed as moved on since
/// the ranking read it is not claimed again.
pub const LOCK_RANKED_SQL: &str = concat!(
    "SELECT ",
    crate::shared_reads::payout_columns!("p."),
    " FROM payoutd_lock_in_turn($1, $2, $3) WITH ORDINALITY AS p ORDER BY p.ordinality"
);
