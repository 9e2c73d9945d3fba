//! The SQLite sweep's and caps' reads over attempts: the live attempts in the sweep's order (a window over all of them), and the amounts that may have left, summed in Rust.

/// The sweep's order over live attempts on SQLite, a window over all of them (PostgreSQL reads
/// each line's head instead, `live_lines_from!` in pg_sweep_sql.rs, in the same order): each
/// wallet's line in turn (the k-th attempt of every wallet before the (k+1)-th of any, so a stuck
/// wallet or a chain whose node is down cannot fill the sweep's limit), inside a line lowest nonce
/// first (the head blocks the rest), attempts of payouts waiting for a person last, then least
/// recently checked. `$filter` narrows the live attempts further; the window reads them all, so
/// `$limit` (the head PostgreSQL reads of each line) has nothing to stop here.
macro_rules! live_attempts_from {
    ($filter:expr, $limit:literal) => {
        concat!(
            " FROM (SELECT a.id AS line_id, ROW_NUMBER() OVER (PARTITION BY a.hot_wallet_id \
             ORDER BY (p.status = 'needs_attention'), a.nonce, a.last_checked_at_ms, a.id) AS place \
             FROM attempts a JOIN payouts p ON p.id = a.payout_id WHERE a.status IN ('signed', 'broadcast')",
            $filter,
            ") AS line JOIN attempts a ON a.id = line.line_id JOIN payouts p ON p.id = a.payout_id \
             ORDER BY line.place, a.hot_wallet_id, a.id "
        )
    };
}
pub(crate) use live_attempts_from;

/// Money that may have left: every attempt that was signed, except those proven never to land.
/// SQLite cannot add 256-bit text, so the amounts are summed in Rust.
pub(crate) const AMOUNTS_TO_DESTINATION: &str = "SELECT p.amount FROM attempts a JOIN payouts p ON p.id = a.payout_id \
     WHERE p.asset = ?1 AND p.destination = ?2 AND a.created_at_ms >= ?3 AND a.status <> 'dead'";
pub(crate) const AMOUNTS_OF_ASSET: &str = "SELECT p.amount FROM attempts a JOIN payouts p ON p.id = a.payout_id \
     WHERE p.asset = ?1 AND a.created_at_ms >= ?2 AND a.status <> 'dead'";
pub(crate) const AMOUNTS_OF_WALLET: &str = "SELECT p.amount FROM attempts a JOIN payouts p ON p.id = a.payout_id \
     WHERE a.hot_wallet_id = ?1 AND p.asset = ?2 AND a.created_at_ms >= ?3 AND a.status <> 'dead'";
