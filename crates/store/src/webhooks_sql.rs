//! The webhook store's statements, one text for both databases (the few that differ are named for their database): endpoints and secrets, the outbox's fan-out, leased deliveries and their tries, batch completion, the events API and redispatch.

// `IS NOT DISTINCT FROM $n` compares an owner column with a bound merchant id or NULL (the operator).
pub(super) const COUNT_ENDPOINTS: &str = "SELECT count(*) FROM webhook_endpoints WHERE merchant_id IS NOT DISTINCT FROM $1 AND deleted_at_ms IS NULL";
pub(super) const INSERT_ENDPOINT: &str = "INSERT INTO webhook_endpoints (id, merchant_id, url, event_types, created_at_ms) VALUES ($1, $2, $3, $4, $5)";
pub(super) const INSERT_SECRET: &str =
    "INSERT INTO webhook_secrets (endpoint_id, secret, created_at_ms) VALUES ($1, $2, $3)";
pub(super) const SELECT_ENDPOINTS: &str = "SELECT id, merchant_id, url, event_types, created_at_ms FROM webhook_endpoints \
     WHERE merchant_id IS NOT DISTINCT FROM $1 AND deleted_at_ms IS NULL ORDER BY created_at_ms, id";
pub(super) const DELETE_ENDPOINT: &str = "UPDATE webhook_endpoints SET deleted_at_ms = $1 \
     WHERE id = $2 AND merchant_id IS NOT DISTINCT FROM $3 AND deleted_at_ms IS NULL";
pub(super) const ABANDON_ENDPOINT_DELIVERIES: &str = "UPDATE webhook_deliveries SET state = 'abandoned', leased_until_ms = NULL, \
     lease_token = NULL WHERE endpoint_id = $1 AND state = 'pending'";
pub(super) const ENDPOINT_EXISTS: &str = "SELECT count(*) FROM webhook_endpoints \
     WHERE id = $1 AND merchant_id IS NOT DISTINCT FROM $2 AND deleted_at_ms IS NULL";
pub(super) const EXPIRE_CURRENT_SECRET: &str = "UPDATE webhook_secrets SET expires_at_ms = $1 WHERE endpoint_id = $2 AND expires_at_ms IS NULL";

/// Takes a batch of events not yet fanned out and names it with a token; the store appends how the
/// batch is chosen (`take_events!`).
macro_rules! take_events {
    ($lock:literal) => {
        concat!(
            "UPDATE events SET fanned_out_at_ms = $1, fanout_token = $2 WHERE fanned_out_at_ms IS NULL \
             AND seq IN (SELECT seq FROM events WHERE fanned_out_at_ms IS NULL ORDER BY seq LIMIT $3",
            $lock,
            ")"
        )
    };
}
/// On PostgreSQL, dispatchers in several processes fan out at once: each locks its batch in `seq`
/// order and skips rows another holds, so two take disjoint batches instead of waiting on each
/// other's row locks (and deadlocking when they lock the same rows in different orders).
pub(super) const TAKE_EVENTS_PG: &str = take_events!(" FOR UPDATE SKIP LOCKED");
/// On SQLite one writer at a time takes its batch.
pub(super) const TAKE_EVENTS_SQLITE: &str = take_events!("");
/// One delivery per event of the batch and endpoint that wants it: a merchant's endpoint takes the
/// merchant's events but incidents, an operator endpoint the operator events (`EventType::is_operator_event`),
/// either one only events written after it was created, and only the types it names (if any).
pub(super) const INSERT_FANNED_OUT: &str = "INSERT INTO webhook_deliveries \
     (event_id, endpoint_id, state, round, tries_in_round, next_try_at_ms, created_at_ms) \
     SELECT e.id, w.id, 'pending', 1, 0, $1, $1 FROM events e JOIN webhook_endpoints w \
     ON w.deleted_at_ms IS NULL AND w.created_at_ms <= e.created_at_ms \
     AND ((w.merchant_id IS NOT NULL AND w.merchant_id = e.merchant_id AND e.type NOT IN ('incident.opened', 'incident.resolved')) \
          OR (w.merchant_id IS NULL AND e.type IN ('incident.opened', 'incident.resolved'))) \
     AND (w.event_types = '' OR (' ' || w.event_types || ' ') LIKE ('% ' || e.type || ' %')) \
     WHERE e.fanout_token = $2 ON CONFLICT DO NOTHING";
pub(super) const CLEAR_FANOUT_TOKEN: &str =
    "UPDATE events SET fanout_token = NULL WHERE fanout_token = $1";

/// Endpoints with a due delivery, the longest waiting first, each with its owner: the dispatcher
/// shares its slots between owners by it.
pub(super) const DUE_ENDPOINTS: &str = "SELECT d.endpoint_id, w.merchant_id, MIN(d.next_try_at_ms) AS due_at_ms \
     FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id \
     WHERE d.state = 'pending' AND d.next_try_at_ms <= $1 AND (d.leased_until_ms IS NULL OR d.leased_until_ms <= $1) \
     GROUP BY d.endpoint_id, w.merchant_id ORDER BY due_at_ms, d.endpoint_id LIMIT $2";
pub(super) const LEASE_DELIVERIES: &str = "UPDATE webhook_deliveries SET leased_until_ms = $1, lease_token = $2 \
     WHERE endpoint_id = $3 AND state = 'pending' AND next_try_at_ms <= $4 AND (leased_until_ms IS NULL OR leased_until_ms <= $4) \
     AND event_id IN (SELECT event_id FROM webhook_deliveries WHERE endpoint_id = $3 AND state = 'pending' \
         AND next_try_at_ms <= $4 AND (leased_until_ms IS NULL OR leased_until_ms <= $4) ORDER BY next_try_at_ms LIMIT $5) \
     RETURNING event_id, round, tries_in_round";
pub(super) const ENDPOINT_URL: &str =
    "SELECT url FROM webhook_endpoints WHERE id = $1 AND deleted_at_ms IS NULL";
pub(super) const SIGNING_SECRETS: &str = "SELECT secret FROM webhook_secrets WHERE endpoint_id = $1 \
     AND (expires_at_ms IS NULL OR expires_at_ms > $2) ORDER BY created_at_ms DESC";
pub(super) const SELECT_EVENT: &str =
    "SELECT id, type, entity_id, merchant_id, payload, created_at_ms FROM events WHERE id = $1";
pub(super) const INSERT_TRY: &str = "INSERT INTO webhook_delivery_tries \
     (event_id, endpoint_id, round, try_no, at_ms, status_code, error, latency_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
pub(super) const SCHEDULE_AFTER_TRY: &str = "UPDATE webhook_deliveries SET state = $1, round = $2, tries_in_round = $3, \
     next_try_at_ms = $4, delivered_at_ms = $5, leased_until_ms = NULL, lease_token = NULL \
     WHERE event_id = $6 AND endpoint_id = $7 AND lease_token = $8";
/// Batches not completed whose every line is written (a batch is opened before its lines, chunk by
/// chunk) and whose every line's payout is final (a line without a payout counts as done).
pub(super) const COMPLETABLE_BATCHES: &str = "SELECT b.id, b.merchant_id FROM payout_batches b WHERE b.completed_at_ms IS NULL \
     AND (SELECT count(*) FROM payout_batch_lines c WHERE c.batch_id = b.id) >= b.line_count \
     AND NOT EXISTS (SELECT 1 FROM payout_batch_lines l JOIN payouts p ON p.merchant_id = b.merchant_id \
         AND p.idempotency_key = l.external_id WHERE l.batch_id = b.id AND p.status NOT IN ('paid', 'failed', 'canceled', 'rejected')) \
     ORDER BY b.created_at_ms LIMIT $1";
/// Checked again in the transaction that marks it: a resubmission may have created a line's payout since.
pub(super) const COMPLETE_BATCH: &str = "UPDATE payout_batches SET completed_at_ms = $1 WHERE id = $2 AND completed_at_ms IS NULL \
     AND (SELECT count(*) FROM payout_batch_lines c WHERE c.batch_id = payout_batches.id) >= payout_batches.line_count \
     AND NOT EXISTS (SELECT 1 FROM payout_batch_lines l JOIN payouts p ON p.merchant_id = payout_batches.merchant_id \
         AND p.idempotency_key = l.external_id WHERE l.batch_id = payout_batches.id AND p.status NOT IN ('paid', 'failed', 'canceled', 'rejected'))";
pub(super) const BACKLOG: &str = "SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'";

// The events API, oldest first after a cursor. A merchant reads its own events but incidents, the operator every
// event. Fixed statements rather than `$n IS NULL OR ...`, so each one uses its index; `$visible` is
// the store's condition for an event a reader may page past (see the stores below).
macro_rules! events_after {
    ($filter:literal, $visible:literal, $limit:literal) => {
        concat!(
            "SELECT id, type, entity_id, merchant_id, payload, created_at_ms FROM events \
             WHERE seq > coalesce((SELECT seq FROM events WHERE id = $1), 0)",
            $filter,
            $visible,
            " ORDER BY seq LIMIT ",
            $limit
        )
    };
}
pub(super) const SELECT_DELIVERIES: &str = "SELECT d.event_id, d.endpoint_id, d.state, d.round, d.tries_in_round, d.next_try_at_ms, \
     d.delivered_at_ms FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id \
     WHERE d.event_id = $1 AND (CAST($2 AS TEXT) IS NULL OR w.merchant_id = $2) ORDER BY d.created_at_ms, d.endpoint_id";
pub(super) const SELECT_TRIES: &str = "SELECT round, try_no, at_ms, status_code, error, latency_ms FROM webhook_delivery_tries \
     WHERE event_id = $1 AND endpoint_id = $2 ORDER BY id DESC LIMIT $3";
/// The owner's matching endpoints that have no delivery of this event yet get one.
pub(super) const REDISPATCH_MISSING: &str = "INSERT INTO webhook_deliveries \
     (event_id, endpoint_id, state, round, tries_in_round, next_try_at_ms, created_at_ms) \
     SELECT e.id, w.id, 'pending', 1, 0, $1, $1 FROM events e JOIN webhook_endpoints w \
     ON w.deleted_at_ms IS NULL AND w.merchant_id IS NOT DISTINCT FROM $2 \
     AND ((w.merchant_id IS NOT NULL AND w.merchant_id = e.merchant_id AND e.type NOT IN ('incident.opened', 'incident.resolved')) \
          OR (w.merchant_id IS NULL AND e.type IN ('incident.opened', 'incident.resolved'))) \
     AND (w.event_types = '' OR (' ' || w.event_types || ' ') LIKE ('% ' || e.type || ' %')) \
     WHERE e.id = $3 ON CONFLICT DO NOTHING";
/// Every delivery of the event the owner can see (the operator: all) starts a new round now, unless
/// a try of it is in flight (its lease runs) or it was sent again by hand `$4` times already.
pub(super) const REDISPATCH_RESET: &str = "UPDATE webhook_deliveries SET state = 'pending', round = round + 1, tries_in_round = 0, \
     next_try_at_ms = $1, leased_until_ms = NULL, lease_token = NULL, redispatches = redispatches + 1 \
     WHERE event_id = $2 AND redispatches < $4 AND (leased_until_ms IS NULL OR leased_until_ms <= $1) AND endpoint_id IN \
     (SELECT id FROM webhook_endpoints WHERE deleted_at_ms IS NULL AND (CAST($3 AS TEXT) IS NULL OR merchant_id = $3))";
