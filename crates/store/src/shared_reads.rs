//! The reads of payouts and transfers both stores run as written: the payout's column list, the
//! lookups by key and id, the merchant's listing and the merchants-take-turns queue read.

/// A payout's columns as `rows::payout_row` maps them, `$p` the table's prefix: one text for both
/// databases, money read as text (PostgreSQL's NUMERIC, SQLite's padded TEXT).
macro_rules! payout_columns {
    ($p:literal) => {
        concat!(
            $p,
            "id, ",
            $p,
            "merchant_id, ",
            $p,
            "idempotency_key, ",
            $p,
            "fingerprint, ",
            $p,
            "asset, CAST(",
            $p,
            "amount AS TEXT) AS amount, CAST(",
            $p,
            "network_fee AS TEXT) AS network_fee, ",
            $p,
            "destination, ",
            $p,
            "metadata, ",
            $p,
            "status, ",
            $p,
            "version, ",
            $p,
            "created_at_ms, ",
            $p,
            "updated_at_ms"
        )
    };
}
pub(crate) use payout_columns;

/// Prefixed so they can sit next to the payout's columns in one joined row.
macro_rules! attempt_columns {
    () => {
        "a.id AS a_id, a.payout_id AS a_payout_id, a.attempt_no AS a_attempt_no, a.status AS a_status, \
         a.rail AS a_rail, a.hot_wallet_id AS a_hot_wallet_id, a.nonce AS a_nonce, a.provider AS a_provider, \
         a.provider_key AS a_provider_key, a.provider_ref AS a_provider_ref, \
         a.provider_key_spent_at_ms AS a_provider_key_spent_at_ms, \
         a.provider_creates_for_ms AS a_provider_creates_for_ms, \
         a.last_valid_block_height AS a_last_valid_block_height, a.nonce_account AS a_nonce_account, a.nonce_value AS a_nonce_value, \
         a.signed_at_block_height AS a_signed_at_block_height, a.mined_block AS a_mined_block, \
         a.mined_hash AS a_mined_hash, a.last_sent_at_ms AS a_last_sent_at_ms, a.created_at_ms AS a_created_at_ms, \
         a.updated_at_ms AS a_updated_at_ms"
    };
}
pub(crate) use attempt_columns;

/// A payout by its merchant and key, and by its merchant and id.
pub(crate) const SELECT_PAYOUT_BY_KEY: &str = concat!(
    "SELECT ",
    payout_columns!(""),
    " FROM payouts WHERE merchant_id = $1 AND idempotency_key = $2"
);
/// The merchant of a live API key (by its hash, `$1`) and that merchant's payout under `$2`: a
/// replay's two reads in one round trip. The payout's columns are NULL when there is none.
pub(crate) const SELECT_KEY_MERCHANT_AND_PAYOUT: &str = concat!(
    "SELECT k.merchant_id AS key_merchant_id, ",
    payout_columns!("p."),
    " FROM api_keys k LEFT JOIN payouts p ON p.merchant_id = k.merchant_id AND p.idempotency_key = $2 \
     WHERE k.key_hash = $1 AND k.revoked_at_ms IS NULL"
);
pub(crate) const SELECT_PAYOUT_BY_ID: &str =
    concat!("SELECT ", payout_columns!(""), " FROM payouts WHERE merchant_id = $1 AND id = $2");
/// A payout by its id alone (the workers' read: no merchant scope).
pub(crate) const SELECT_PAYOUT_BY_ID_ALONE: &str =
    concat!("SELECT ", payout_columns!(""), " FROM payouts WHERE id = $1");

/// A transfer by its sender and key, and by its id as either side sees it.
macro_rules! transfer_columns {
    () => {
        "id, merchant_id, idempotency_key, fingerprint, destination_merchant_id, asset, CAST(amount AS TEXT) AS amount, created_at_ms"
    };
}
pub(crate) const SELECT_TRANSFER_BY_KEY: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE merchant_id = $1 AND idempotency_key = $2"
);
pub(crate) const SELECT_TRANSFER_BY_ID: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE id = $1 AND (merchant_id = $2 OR destination_merchant_id = $2)"
);
/// A merchant's deposit under one key.
pub(crate) const SELECT_DEPOSIT_BY_KEY: &str = "SELECT id, merchant_id, idempotency_key, asset, CAST(amount AS TEXT) AS amount, \
     created_at_ms FROM deposits WHERE merchant_id = $1 AND idempotency_key = $2";
/// The newest transfers, for the operator.
pub(crate) const RECENT_TRANSFERS: &str = "SELECT id, merchant_id, destination_merchant_id, asset, CAST(amount AS TEXT) AS amount, \
     created_at_ms FROM transfers ORDER BY created_at_ms DESC, id DESC LIMIT $1";

/// A merchant's payouts, newest first, filtered by key and status, before a cursor (each filter off
/// when its value is NULL; the CASTs give PostgreSQL the parameters' type).
pub(crate) const LIST_PAYOUTS: &str = concat!(
    "SELECT ",
    payout_columns!(""),
    " FROM payouts WHERE merchant_id = $1 AND (CAST($2 AS TEXT) IS NULL OR idempotency_key = $2) \
     AND (CAST($3 AS TEXT) IS NULL OR status = $3) AND (CAST($4 AS TEXT) IS NULL OR id < $4) ORDER BY id DESC LIMIT $5"
);

/// A merchant's transfer under one key, or `None`, read on either database's connection
/// (`$conn`: `&mut *tx` or a pooled connection) within an async function returning `StoreError`.
macro_rules! transfer_by_key {
    ($conn:expr, $merchant:expr, $key:expr) => {{
        let row = sqlx::query($crate::shared_reads::SELECT_TRANSFER_BY_KEY)
            .bind($merchant.as_str())
            .bind($key)
            .fetch_optional($conn)
            .await
            .map_err($crate::classify)?;
        row.map(|row| $crate::rows::transfer_row!(&row)).transpose()
    }};
}
pub(crate) use transfer_by_key;

/// A merchant's payout under one key, or `None`, read on either database's connection (`$conn`:
/// `&mut *tx` or a pooled connection) within an async function returning `StoreError`.
macro_rules! payout_by_key {
    ($conn:expr, $merchant:expr, $key:expr) => {{
        let row = sqlx::query($crate::shared_reads::SELECT_PAYOUT_BY_KEY)
            .bind($merchant.as_str())
            .bind($key.as_str())
            .fetch_optional($conn)
            .await
            .map_err($crate::classify)?;
        row.as_ref().map($crate::rows::payout_row).transpose()
    }};
}
pub(crate) use payout_by_key;

/// The payouts of a queue (`$filter` over `payouts`), merchants taking turns: a payout's turn is
/// its rank among its merchant's payouts in the queue (oldest first), and the queue is read by
/// turn, then age, up to `$limit` rows. One merchant's 10,000-line batch then takes one place per
/// round, not the first 10,000. Only the first `$limit` turns can be read, so the ranking stops
/// there (PostgreSQL's run condition): the whole queue is still read and ordered for the ranking,
/// but only the ranked rows are joined and sorted by turn (43 ms against 13 for 256 of 20,000
/// approved payouts, `EXPLAIN ANALYZE`).
///
/// PostgreSQL reads the approved queue (the signing claim, the approved payouts of the other rails)
/// in the same order without ranking the whole queue, and locks apart from the ranking (`pg_claim`).
macro_rules! fair_select {
    ($filter:expr, $limit:literal) => {
        concat!(
            "SELECT ",
            $crate::shared_reads::payout_columns!("p."),
            " FROM payouts p JOIN (SELECT id, row_number() OVER (PARTITION BY merchant_id ORDER BY id) AS turn FROM payouts WHERE ",
            $filter,
            ") AS queue ON queue.id = p.id WHERE queue.turn <= ",
            $limit,
            " ORDER BY queue.turn, p.id LIMIT ",
            $limit
        )
    };
}
pub(crate) use fair_select;
