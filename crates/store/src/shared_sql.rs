//! The statements and transaction bodies both stores run as written: one SQL text, one row mapping;
//! only the connection type differs.

use payoutd_domain::Payout;

// Statements both stores run as written. Placeholders are numbered in the order they first appear:
// PostgreSQL reads `$n` as position n, SQLite numbers `$n` parameters by first appearance, so the
// same text binds the same values on both.

pub(crate) const INSERT_MERCHANT: &str =
    "INSERT INTO merchants (id, name, created_at_ms) VALUES ($1, $2, $3)";
/// The merchant an unrevoked key belongs to.
pub(crate) const MERCHANT_BY_KEY_HASH: &str =
    "SELECT merchant_id FROM api_keys WHERE key_hash = $1 AND revoked_at_ms IS NULL";
/// A merchant's API key; its id is derived from its hash (`ApiKeyHash::id`).
pub(crate) const INSERT_API_KEY: &str = "INSERT INTO api_keys (key_hash, merchant_id, created_at_ms, id) VALUES ($1, $2, $3, 'key_' || substr($1, 1, 32))";
pub(crate) const REVOKE_API_KEY: &str =
    "UPDATE api_keys SET revoked_at_ms = $1 WHERE id = $2 AND revoked_at_ms IS NULL";
pub(crate) const SELECT_API_KEYS: &str = "SELECT id, merchant_id, created_at_ms, revoked_at_ms FROM api_keys WHERE merchant_id = $1 ORDER BY created_at_ms, id";

/// A batch, unless the merchant already has one with this key.
pub(crate) const INSERT_BATCH: &str = "INSERT INTO payout_batches (id, merchant_id, batch_key, line_count, created_at_ms) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (merchant_id, batch_key) DO NOTHING";
pub(crate) const BATCH_BY_KEY: &str =
    "SELECT id FROM payout_batches WHERE merchant_id = $1 AND batch_key = $2";
/// A line, or on a resubmission its new error (NULL once the line has its payout).
pub(crate) const UPSERT_BATCH_LINE: &str = "INSERT INTO payout_batch_lines (batch_id, line_no, external_id, error) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (batch_id, line_no) DO UPDATE SET error = excluded.error";
/// A batch's lines by their payout's status (`not_created` for a line without one).
pub(crate) const BATCH_COUNTS: &str = "SELECT coalesce(p.status, 'not_created') AS status, count(*) AS n FROM payout_batch_lines l \
     LEFT JOIN payouts p ON p.merchant_id = $1 AND p.idempotency_key = l.external_id WHERE l.batch_id = $2 \
     GROUP BY coalesce(p.status, 'not_created') ORDER BY 1";
pub(crate) const BATCH_HEAD: &str =
    "SELECT id, created_at_ms FROM payout_batches WHERE id = $1 AND merchant_id = $2";

/// Every payout per status: a read of the whole table (the simulator, benches, the dashboard's totals).
pub(crate) const PAYOUTS_BY_STATUS: &str =
    "SELECT status, count(*) AS n FROM payouts GROUP BY status";
/// Payouts per status that is not final, read through `payouts_by_status` (status, id): its cost
/// follows the backlog, not the history, so `/metrics` can read it on every refresh.
pub(crate) const LIVE_PAYOUTS_BY_STATUS: &str = "SELECT status, count(*) AS n FROM payouts \
     WHERE status IN ('requested', 'held_for_review', 'approved', 'processing', 'needs_attention') GROUP BY status";

/// One row of a count per status.
pub(crate) fn status_count<R: sqlx::Row>(
    r: &R,
) -> Result<(payoutd_domain::PayoutStatus, u64), payoutd_engine::StoreError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let status: String = r.try_get("status").map_err(crate::classify)?;
    let n: i64 = r.try_get("n").map_err(crate::classify)?;
    let status = payoutd_domain::PayoutStatus::parse(&status)
        .map_err(|e| payoutd_engine::StoreError::Corrupt(e.to_string()))?;
    Ok((status, n as u64))
}

pub(crate) const OPEN_INCIDENTS_BY_KIND: &str =
    "SELECT kind, count(*) AS n FROM incidents WHERE status = 'open' GROUP BY kind ORDER BY kind";

/// A payout's conditional transition (I5): applied only at the expected state and version.
pub(crate) const TRANSITION_PAYOUT: &str = concat!(
    "UPDATE payouts SET status = $5, version = version + 1, updated_at_ms = $6 \
     WHERE id = $1 AND merchant_id = $2 AND status = $3 AND version = $4 RETURNING ",
    crate::shared_reads::payout_columns!("")
);

/// A conditional payout transition (I5) with its journals and event on `$conn`, inside the
/// caller's transaction, through `$statement` (`TRANSITION_PAYOUT`; SQLite's simulator build may
/// pass its defective twin). Evaluates to `Result<TransitionOutcome, StoreError>`.
macro_rules! apply_transition_with {
    ($conn:expr, $t:expr, $statement:expr) => {{
        let (conn, t) = ($conn, $t);
        assert!(t.from.can_become(t.to), "transition {} -> {} is not in the table", t.from, t.to);
        let row = sqlx::query($statement)
            .bind(t.payout_id.as_str())
            .bind(t.merchant_id.as_str())
            .bind(t.from.as_str())
            .bind(t.from_version)
            .bind(t.to.as_str())
            .bind(t.at_ms)
            .fetch_optional(&mut *conn)
            .await
            .map_err(crate::classify)?;
        let Some(row) = row else {
            return Ok(TransitionOutcome::Stale);
        };
        let payout = payout_row(&row)?;
        for journal in &t.journals {
            if let Err(JournalRefusal::Insufficient) =
                apply_journal(&mut *conn, journal, t.at_ms).await?
            {
                // A release or settle larger than what is held means the ledger is already wrong.
                return Err(StoreError::Invariant(format!(
                    "{} journal exceeds the held balance",
                    journal.kind.as_str()
                )));
            }
        }
        insert_event(conn, &t.event).await?;
        Ok(TransitionOutcome::Applied(payout))
    }};
}
pub(crate) use apply_transition_with;

/// Whether a merchant exists (the destination of a transfer).
/// Whether a cap check's review event exists (a person approved the payout after a review).
macro_rules! reviewed_in {
    ($conn:expr, $caps:expr) => {
        sqlx::query_scalar::<_, i32>("SELECT 1 FROM events WHERE id = $1")
            .bind($caps.review_event.as_str())
            .fetch_optional($conn)
            .await
            .map_err(classify)?
            .is_some()
    };
}
pub(crate) use reviewed_in;

/// The open incidents, oldest first, as `rows::IncidentRow` reads them.
pub(crate) const OPEN_INCIDENTS: &str = "SELECT id, kind, payout_id, attempt_id, detail, resolution, created_at_ms FROM incidents \
     WHERE status = 'open' ORDER BY created_at_ms, id LIMIT $1";
pub(crate) const EVENT_EXISTS: &str = "SELECT 1 FROM events WHERE id = $1";

pub(crate) const MERCHANT_EXISTS: &str = "SELECT count(*) FROM merchants WHERE id = $1";

/// One outbox event; `insert_event_on!` binds it.
pub(crate) const INSERT_EVENT: &str = "INSERT INTO events (id, type, entity_id, merchant_id, payload, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6)";

/// Writes `$event` (a `NewEvent`) on the connection `$conn` of either store.
macro_rules! insert_event_on {
    ($conn:expr, $event:expr) => {{
        let event = $event;
        sqlx::query($crate::shared_sql::INSERT_EVENT)
            .bind(event.id.as_str())
            .bind(event.event_type.as_str())
            .bind(&event.entity_id)
            .bind(event.merchant_id.as_ref().map(|m| m.as_str()))
            .bind(&event.payload_json)
            .bind(event.at_ms)
            .execute($conn)
            .await
            .map_err(classify)?;
        Ok(())
    }};
}
pub(crate) use insert_event_on;

/// A durable-nonce value another attempt already holds inserts nothing (`attempts_durable_nonce_value`):
/// the caller reads zero rows and creates nothing.
pub(crate) const INSERT_SIGNED_ATTEMPT: &str = "INSERT INTO attempts (id, payout_id, attempt_no, status, rail, hot_wallet_id, nonce, \
     provider, provider_key, provider_ref, last_valid_block_height, nonce_account, nonce_value, signed_at_block_height, \
     last_sent_at_ms, created_at_ms, updated_at_ms, provider_creates_for_ms) \
     VALUES ($1, $2, $3, 'signed', $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 0, $14, $15, $16) \
     ON CONFLICT (nonce_account, nonce_value) WHERE nonce_value IS NOT NULL DO NOTHING";

/// Binds an attempt to `INSERT_SIGNED_ATTEMPT`: its ids, number, slot columns and times.
macro_rules! bind_new_attempt {
    ($query:expr, $attempt:expr, $attempt_no:expr) => {{
        let attempt = $attempt;
        let slot = $crate::rows::SlotColumns::of(&attempt.slot)?;
        $query
            .bind(attempt.id.as_str())
            .bind(attempt.payout_id.as_str())
            .bind($attempt_no)
            .bind(slot.rail)
            .bind(slot.hot_wallet_id)
            .bind(slot.nonce)
            .bind(slot.provider)
            .bind(slot.provider_key)
            .bind(slot.provider_ref)
            .bind(slot.last_valid_block_height)
            .bind(slot.nonce_account)
            .bind(slot.nonce_value)
            .bind(slot.signed_at_block_height)
            .bind(attempt.created_at_ms)
            .bind(attempt.updated_at_ms)
            .bind(slot.provider_creates_for_ms)
    }};
}
pub(crate) use bind_new_attempt;
pub(crate) const CLEAR_NEXT_ATTEMPT: &str = "UPDATE payouts SET next_attempt_no = NULL, version = version + 1, updated_at_ms = $1 \
     WHERE id = $2 AND status = 'processing' AND version = $3 AND next_attempt_no = $4";
pub(crate) const SET_NEXT_ATTEMPT: &str = "UPDATE payouts SET next_attempt_no = $1 WHERE id = $2";
pub(crate) const SETTLE_ATTEMPT: &str = "UPDATE attempts SET status = $1, evidence = $2, death_proof = coalesce($3, death_proof), \
     updated_at_ms = $4, mined_block = $5, mined_hash = $6 WHERE id = $7 AND status = $8 AND payout_id = $9";
pub(crate) const RECORD_SENT: &str =
    "UPDATE attempts SET last_sent_at_ms = $1 WHERE id = $2 AND status IN ('signed', 'broadcast')";
pub(crate) const RECORD_MINED: &str = "UPDATE attempts SET mined_block = $1, mined_hash = $2 WHERE id = $3 AND status IN ('signed', 'broadcast') \
     AND EXISTS (SELECT 1 FROM attempt_transactions t WHERE t.attempt_id = $3 AND t.tx_hash = $2)";
pub(crate) const CLEAR_MINED: &str = "UPDATE attempts SET mined_block = NULL, mined_hash = NULL WHERE id = $1 AND status IN ('signed', 'broadcast')";

/// The payout update of a death that awaits the next attempt; the store appends its payout columns.
macro_rules! await_next_attempt_returning {
    () => {
        "UPDATE payouts SET next_attempt_no = $1, version = version + 1, updated_at_ms = $2 \
         WHERE id = $3 AND status = 'processing' AND version = $4 AND next_attempt_no IS NULL RETURNING "
    };
}
pub(crate) use await_next_attempt_returning;

/// Attempt n+1 of a payout awaiting it, inside a signing session's open transaction `$tx`: the same
/// statements on both databases, only the connection type differs.
macro_rules! write_next_attempt {
    ($tx:expr, $payout:expr, $attempt:expr) => {{
        let (payout, attempt) = ($payout, $attempt);
        let attempt_no = $crate::rows::attempt_no(attempt)?;
        if !$crate::shared_sql::insert_new_attempt!($tx, attempt, attempt_no) {
            return Err(StoreError::Invariant(format!(
                "attempt {} holds a durable nonce value already taken",
                attempt.id
            )));
        }
        if $crate::shared_sql::clear_next_attempt!($tx, payout, attempt, attempt_no) != 1 {
            return Err(StoreError::Invariant(format!(
                "payout {} does not await attempt {} at version {}",
                payout.id, attempt.attempt_no, payout.version
            )));
        }
    }};
}
pub(crate) use write_next_attempt;

/// One settlement inside an open transaction `$tx`, the same on both databases; evaluates to its
/// outcome and commits nothing (a stale one leaves writes the caller must roll back).
/// `$await_sql` is `await_next_attempt_returning!()` with the store's payout columns.
macro_rules! apply_settlement {
    ($tx:ident, $s:expr, $await_sql:expr) => {
        'apply: {
            let s = $s;
            let (mined_block, mined_hash) = $crate::rows::mined_columns(s)?;
            let updated = sqlx::query($crate::shared_sql::SETTLE_ATTEMPT)
                .bind(s.attempt_to.as_str())
                .bind(&s.evidence)
                .bind((s.attempt_to == AttemptStatus::Dead).then_some(&s.evidence))
                .bind(s.payout.at_ms())
                .bind(mined_block)
                .bind(mined_hash)
                .bind(s.attempt_id.as_str())
                .bind(s.attempt_from.as_str())
                .bind(s.payout.payout_id().as_str())
                .execute(&mut *$tx)
                .await
                .map_err(classify)?;
            if updated.rows_affected() == 0 {
                break 'apply TransitionOutcome::Stale;
            }
            let applied = match &s.payout {
                PayoutEffect::Transition(t) => apply_transition(&mut $tx, t).await?,
                PayoutEffect::AwaitNextAttempt(next) => {
                    let row = sqlx::query($await_sql)
                        .bind(
                            i32::try_from(next.next_attempt_no)
                                .map_err(|e| StoreError::Invariant(format!("attempt_no: {e}")))?,
                        )
                        .bind(next.at_ms)
                        .bind(next.payout_id.as_str())
                        .bind(next.from_version)
                        .fetch_optional(&mut *$tx)
                        .await
                        .map_err(classify)?;
                    match row {
                        Some(row) => TransitionOutcome::Applied(payout_row(&row)?),
                        None => TransitionOutcome::Stale,
                    }
                }
            };
            if let TransitionOutcome::Applied(_) = &applied
                && let Some(incident) = &s.incident
            {
                insert_incident(&mut $tx, incident, None).await?;
            }
            applied
        }
    };
}
pub(crate) use apply_settlement;

/// `settle_attempt` inside an open transaction `$tx`: committed when it applies, rolled back when stale.
macro_rules! settle_in {
    ($tx:ident, $s:expr, $await_sql:expr) => {{
        let outcome = $crate::shared_sql::apply_settlement!($tx, $s, $await_sql);
        if let TransitionOutcome::Applied(_) = &outcome {
            $tx.commit().await.map_err(classify)?;
        }
        Ok(outcome)
    }};
}
pub(crate) use settle_in;

/// `settle_attempts` inside an open transaction `$tx`: each settlement behind its own savepoint
/// (a stale one is rolled back alone), one commit for all.
macro_rules! settle_many_in {
    ($tx:ident, $settlements:expr, $await_sql:expr) => {{
        let mut outcomes = Vec::with_capacity($settlements.len());
        for s in $settlements {
            $crate::rows::assert_settlement(s)?;
            outcomes.push($crate::shared_sql::settle_one_of_many!($tx, s, $await_sql));
        }
        $tx.commit().await.map_err(classify)?;
        Ok(outcomes)
    }};
}
pub(crate) use settle_many_in;

/// One settlement among many in an open transaction `$tx`, behind its own savepoint: a stale one
/// leaves nothing, an applied one stays for the caller's commit.
macro_rules! settle_one_of_many {
    ($tx:ident, $s:expr, $await_sql:expr) => {{
        sqlx::query("SAVEPOINT settlement").execute(&mut *$tx).await.map_err(classify)?;
        let outcome = $crate::shared_sql::apply_settlement!($tx, $s, $await_sql);
        let end = if let TransitionOutcome::Applied(_) = &outcome {
            "RELEASE SAVEPOINT settlement"
        } else {
            "ROLLBACK TO SAVEPOINT settlement"
        };
        sqlx::query(end).execute(&mut *$tx).await.map_err(classify)?;
        outcome
    }};
}
pub(crate) use settle_one_of_many;

/// `retry_payout` inside an open transaction `$tx` (committed here on success).
macro_rules! retry_in {
    ($tx:ident, $transition:expr, $next_attempt_no:expr) => {{
        let (transition, next_attempt_no) = ($transition, $next_attempt_no);
        assert_eq!(
            (transition.from, transition.to),
            (PayoutStatus::NeedsAttention, PayoutStatus::Processing),
            "a retry moves needs_attention -> processing"
        );
        assert!(next_attempt_no >= 2, "a retry follows an attempt");
        let TransitionOutcome::Applied(payout) = apply_transition(&mut $tx, transition).await?
        else {
            return Ok(TransitionOutcome::Stale);
        };
        let updated = sqlx::query($crate::shared_sql::SET_NEXT_ATTEMPT)
            .bind(
                i32::try_from(next_attempt_no)
                    .map_err(|e| StoreError::Invariant(format!("attempt_no: {e}")))?,
            )
            .bind(transition.payout_id.as_str())
            .execute(&mut *$tx)
            .await
            .map_err(classify)?;
        if updated.rows_affected() != 1 {
            return Err(StoreError::Invariant(format!(
                "payout {} vanished during its retry",
                transition.payout_id
            )));
        }
        $tx.commit().await.map_err(classify)?;
        Ok(TransitionOutcome::Applied(payout))
    }};
}
pub(crate) use retry_in;

/// The first replay of a saved error for a live provider attempt's key; a later one changes nothing.
pub(crate) const RECORD_KEY_SPENT: &str = "UPDATE attempts SET provider_key_spent_at_ms = $1 WHERE id = $2 \
     AND rail = 'provider' AND status IN ('signed', 'broadcast') AND provider_key_spent_at_ms IS NULL";

pub(crate) const RECORD_REFERENCE: &str = "UPDATE attempts SET provider_ref = $1 WHERE id = $2 AND rail = 'provider' \
     AND status IN ('signed', 'broadcast') AND (provider_ref IS NULL OR provider_ref = $1)";

/// A signing wallet without a nonce line (its counter stays 0): registered once, kept as it is.
pub(crate) const SIGNING_WALLET: &str = "SELECT id FROM hot_wallets WHERE id = $1";
pub(crate) const ENSURE_SIGNING_WALLET: &str = "INSERT INTO hot_wallets (id, chain, address, next_nonce) VALUES ($1, $2, $3, 0) ON CONFLICT (id) DO NOTHING";

/// The id of a rail's signing wallet: its chain and address.
pub(crate) fn signing_wallet_id(chain: &str, address: &str) -> String {
    format!("hw_{chain}_{address}")
}

/// An attempt and its one transaction, inside an open transaction `$tx`; evaluates to whether it
/// was written (not when another attempt holds its durable-nonce value: then nothing is).
macro_rules! insert_new_attempt {
    ($tx:expr, $attempt:expr, $attempt_no:expr) => {{
        let attempt = $attempt;
        let inserted = $crate::shared_sql::bind_new_attempt!(
            sqlx::query($crate::shared_sql::INSERT_SIGNED_ATTEMPT),
            attempt,
            $attempt_no
        )
        .execute(&mut *$tx)
        .await
        .map_err(classify)?
        .rows_affected()
            == 1;
        if inserted {
            insert_attempt_tx(&mut $tx, &attempt.id, &attempt.txs[0]).await?;
        }
        inserted
    }};
}
pub(crate) use insert_new_attempt;

/// Clears a payout's wait for attempt `$attempt_no` (conditional on its version), inside an open
/// transaction `$tx`; evaluates to the rows it moved (0 or 1).
macro_rules! clear_next_attempt {
    ($tx:expr, $payout:expr, $attempt:expr, $attempt_no:expr) => {
        sqlx::query($crate::shared_sql::CLEAR_NEXT_ATTEMPT)
            .bind($attempt.created_at_ms)
            .bind($payout.id.as_str())
            .bind($payout.version)
            .bind($attempt_no)
            .execute(&mut *$tx)
            .await
            .map_err(classify)?
            .rows_affected()
    };
}
pub(crate) use clear_next_attempt;

/// The payout's move that creating its first attempt makes: approved -> processing, with `event`.
pub(crate) fn to_processing(
    payout: &Payout,
    event: &payoutd_engine::store::NewEvent,
) -> payoutd_engine::store::PayoutTransition {
    payoutd_engine::store::PayoutTransition {
        payout_id: payout.id.clone(),
        merchant_id: payout.merchant_id.clone(),
        from: payoutd_domain::PayoutStatus::Approved,
        from_version: payout.version,
        to: payoutd_domain::PayoutStatus::Processing,
        journals: vec![],
        event: event.clone(),
        at_ms: event.at_ms,
    }
}

/// `create_first_attempt` inside an open transaction `$tx` (committed here when it applies): the
/// payout moves first, so a worker that lost the race finds it moved and writes nothing.
macro_rules! create_first_attempt_in {
    ($tx:ident, $payout:expr, $attempt:expr, $event:expr) => {{
        let (payout, attempt, event) = ($payout, $attempt, $event);
        assert_eq!(attempt.attempt_no, 1, "the first attempt");
        let to_processing = $crate::shared_sql::to_processing(payout, event);
        if let TransitionOutcome::Stale = apply_transition(&mut $tx, &to_processing).await? {
            return Ok(false);
        }
        if !$crate::shared_sql::insert_new_attempt!(
            $tx,
            attempt,
            $crate::rows::attempt_no(attempt)?
        ) {
            return Ok(false); // its durable nonce value is another attempt's: rolled back on drop
        }
        $tx.commit().await.map_err(classify)?;
        Ok(true)
    }};
}
pub(crate) use create_first_attempt_in;

/// `create_next_attempt` inside an open transaction `$tx` (committed here when it applies).
macro_rules! create_next_attempt_in {
    ($tx:ident, $payout:expr, $attempt:expr) => {{
        let (payout, attempt) = ($payout, $attempt);
        let attempt_no = $crate::rows::attempt_no(attempt)?;
        if $crate::shared_sql::clear_next_attempt!($tx, payout, attempt, attempt_no) != 1 {
            return Ok(false);
        }
        if !$crate::shared_sql::insert_new_attempt!($tx, attempt, attempt_no) {
            return Ok(false); // its durable nonce value is another attempt's: rolled back on drop
        }
        $tx.commit().await.map_err(classify)?;
        Ok(true)
    }};
}
pub(crate) use create_next_attempt_in;

/// Live attempts with their payouts from joined `$rows` (the store's `attempt_row` and `payout_row`
/// mappings), their transactions read on `$conn`: the same on both databases.
macro_rules! attempts_with_payouts {
    ($conn:expr, $rows:expr) => {{
        let rows = $rows;
        let attempts = rows.iter().map(attempt_row).collect::<Result<Vec<_>, _>>()?;
        let payouts = rows.iter().map(payout_row).collect::<Result<Vec<_>, _>>()?;
        let ids: Vec<String> = attempts.iter().map(|a| a.id.clone()).collect();
        let txs = txs_of(&mut $conn, &ids).await?;
        $crate::rows::assemble_attempts(attempts, txs)?.into_iter().zip(payouts).collect::<Vec<_>>()
    }};
}
pub(crate) use attempts_with_payouts;

/// A deposit's intake, in a transaction (`$tx`) its store holds the deposit's key in (PostgreSQL's
/// advisory lock, SQLite's single writer): a replay answers the stored deposit, an unknown merchant
/// nothing; else the row, the credit and its event, committed. `$amount` is the amount's
/// placeholder as the store keeps amounts (`$5::numeric` or `$5`), `$amount_text` its text.
macro_rules! record_deposit_in {
    ($tx:ident, $new:expr, $amount:literal, $amount_text:expr) => {{
        let d = &$new.deposit;
        let existing = sqlx::query($crate::shared_reads::SELECT_DEPOSIT_BY_KEY)
            .bind(d.merchant_id.as_str())
            .bind(d.key.as_str())
            .fetch_optional(&mut *$tx)
            .await
            .map_err($crate::classify)?;
        if let Some(row) = existing {
            return Ok(DepositOutcome::Existing($crate::rows::deposit_row(&row)?.into_domain()?));
        }
        let known: i64 = sqlx::query_scalar($crate::shared_sql::MERCHANT_EXISTS)
            .bind(d.merchant_id.as_str())
            .fetch_one(&mut *$tx)
            .await
            .map_err($crate::classify)?;
        if known == 0 {
            return Ok(DepositOutcome::UnknownMerchant);
        }
        sqlx::query(concat!(
            "INSERT INTO deposits (id, merchant_id, idempotency_key, asset, amount, created_at_ms) \
             VALUES ($1, $2, $3, $4, ",
            $amount,
            ", $6)"
        ))
        .bind(d.id.as_str())
        .bind(d.merchant_id.as_str())
        .bind(d.key.as_str())
        .bind(d.asset.as_str())
        .bind($amount_text(&d.amount))
        .bind(d.created_at_ms)
        .execute(&mut *$tx)
        .await
        .map_err($crate::classify)?;
        if let Err(JournalRefusal::Insufficient) =
            apply_journal(&mut $tx, &$new.journal, d.created_at_ms).await?
        {
            unreachable!("a deposit only credits");
        }
        insert_event(&mut $tx, &$new.event).await?;
        $tx.commit().await.map_err($crate::classify)?;
        Ok(DepositOutcome::Created(d.clone()))
    }};
}
pub(crate) use record_deposit_in;

/// An internal transfer's intake up to its row, in a transaction (`$tx`) its store holds the
/// transfer's key in: a replay answers the stored transfer, an unknown destination or a balance
/// short of the amount refuses (returning from the caller); else the conditional debit and credit,
/// and the insert of the row, whose own result is the caller's (PostgreSQL's race on the key).
/// `$amount`/`$amount_text` as in `record_deposit_in!`.
macro_rules! insert_transfer_in {
    ($tx:ident, $new:expr, $amount:literal, $amount_text:expr) => {{
        let t = &$new.transfer;
        if let Some(existing) =
            $crate::shared_reads::transfer_by_key!(&mut *$tx, &t.merchant_id, t.key.as_str())?
        {
            return Ok(TransferOutcome::Existing(existing));
        }
        let known: i64 = sqlx::query_scalar($crate::shared_sql::MERCHANT_EXISTS)
            .bind(t.destination.as_str())
            .fetch_one(&mut *$tx)
            .await
            .map_err($crate::classify)?;
        if known == 0 {
            return Ok(TransferOutcome::UnknownDestination);
        }
        if let Err(JournalRefusal::Insufficient) =
            apply_journal(&mut $tx, &$new.journal, t.created_at_ms).await?
        {
            return Ok(TransferOutcome::InsufficientFunds);
        }
        sqlx::query(concat!(
            "INSERT INTO transfers (id, merchant_id, idempotency_key, fingerprint, \
             destination_merchant_id, asset, amount, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, ",
            $amount,
            ", $8)"
        ))
        .bind(t.id.as_str())
        .bind(t.merchant_id.as_str())
        .bind(t.key.as_str())
        .bind(t.fingerprint.as_str())
        .bind(t.destination.as_str())
        .bind(t.asset.as_str())
        .bind($amount_text(&t.amount))
        .bind(t.created_at_ms)
        .execute(&mut *$tx)
        .await
    }};
}
pub(crate) use insert_transfer_in;

#[cfg(test)]
mod tests {
    use payoutd_domain::PayoutStatus;

    /// A status added to the table is counted live exactly when it is not final.
    #[test]
    fn the_live_count_lists_every_status_that_is_not_final() {
        for status in PayoutStatus::ALL {
            let listed = super::LIVE_PAYOUTS_BY_STATUS.contains(&format!("'{}'", status.as_str()));
            assert_eq!(listed, !status.is_terminal(), "{status}");
        }
    }
}
