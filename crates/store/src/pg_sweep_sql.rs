//! The PostgreSQL sweep's reads over live attempts: each wallet's line head read by an index range scan, the lines taking turns.

/// One line's head for the sweep: its first `$limit` live attempts (lowest nonce first, then least
/// recently checked) among payouts not waiting for a person, and separately among those that are;
/// each an index range scan that stops at `$limit` (migration 0015), so a sweep reads O(lines x
/// limit) rows however many attempts are live. `$line` picks the line, `$filter` narrows further.
macro_rules! line_head {
    ($line:literal, $filter:expr, $limit:literal) => {
        concat!(
            $crate::pg_sweep_sql::line_head!(@part "false", "<>", $line, $filter, $limit),
            " UNION ALL ",
            $crate::pg_sweep_sql::line_head!(@part "true", "=", $line, $filter, $limit)
        )
    };
    (@part $attention:literal, $op:literal, $line:literal, $filter:expr, $limit:literal) => {
        concat!(
            "(SELECT a.id, a.hot_wallet_id, ", $attention, " AS attention, a.nonce, a.last_checked_at_ms FROM attempts a \
             JOIN payouts p ON p.id = a.payout_id WHERE ", $line, " AND a.status IN ('signed', 'broadcast')", $filter,
            " AND p.status ", $op, " 'needs_attention' ORDER BY a.nonce, a.last_checked_at_ms, a.id LIMIT ", $limit, ")"
        )
    };
}

/// The sweep's order over live attempts (the same as SQLite's window over all of them): each
/// wallet's line in turn (the k-th attempt of every wallet before the (k+1)-th of any, so a stuck
/// wallet or a chain whose node is down cannot fill the sweep's limit), inside a line lowest nonce
/// first (the head blocks the rest), attempts of payouts waiting for a person last, then least
/// recently checked. Only each line's first `$limit` can be in the answer, so only those are read;
/// attempts without a wallet (provider rails) form one line of their own.
macro_rules! live_lines_from {
    ($filter:expr, $limit:literal) => {
        concat!(
            " FROM (SELECT h.id AS line_id, row_number() OVER (PARTITION BY h.hot_wallet_id \
             ORDER BY h.attention, h.nonce, h.last_checked_at_ms, h.id) AS place FROM (\
             SELECT l.* FROM (SELECT DISTINCT hot_wallet_id FROM attempts \
             WHERE status IN ('signed', 'broadcast') AND hot_wallet_id IS NOT NULL) w CROSS JOIN LATERAL (",
            $crate::pg_sweep_sql::line_head!("a.hot_wallet_id = w.hot_wallet_id", $filter, $limit),
            ") l UNION ALL ",
            $crate::pg_sweep_sql::line_head!("a.hot_wallet_id IS NULL", $filter, $limit),
            ") h) AS line JOIN attempts a ON a.id = line.line_id JOIN payouts p ON p.id = a.payout_id \
             ORDER BY line.place, a.hot_wallet_id, a.id "
        )
    };
}
pub(crate) use {line_head, live_lines_from};
