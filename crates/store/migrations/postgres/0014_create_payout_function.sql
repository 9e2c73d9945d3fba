-- payoutd: a new payout in one round trip, its re-check under the key's lock (SPEC intake layer 2).
-- The function takes the (merchant, key) advisory lock, then, in a statement of its own (a VOLATILE
-- function reads a fresh snapshot per statement, so every commit made before the lock was granted is
-- seen), draws available -> held if and only if no payout has the key yet and the funds cover it, and
-- only then inserts the payout, its payout.created event, its hold journal and the journal's entries.
-- Called outside an explicit transaction, the call commits as it returns: the balance row is locked
-- only while the server runs it, never across a round trip to the client. Returns the ledger entries
-- written: 2 when created, 0 when the key exists or the funds are short (nothing written).
CREATE FUNCTION payoutd_create_payout(
    lock_key bigint, p_id text, p_merchant text, p_key text, p_fingerprint text, p_asset text, p_amount numeric,
    p_destination text, p_metadata text, p_status text, p_version bigint, p_created_at_ms bigint, p_updated_at_ms bigint,
    e_id text, e_type text, e_payload text, j_id text, j_kind text, e_accounts text[], e_directions smallint[], e_amounts text[]
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    written bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    WITH b AS (UPDATE balances SET available = available - p_amount, held = held + p_amount
               WHERE merchant_id = p_merchant AND asset = p_asset AND available >= p_amount
               AND NOT EXISTS (SELECT 1 FROM payouts WHERE merchant_id = p_merchant AND idempotency_key = p_key) RETURNING 1),
         p AS (INSERT INTO payouts (id, merchant_id, idempotency_key, fingerprint, asset, amount, destination, metadata, status,
                                    version, created_at_ms, updated_at_ms)
               SELECT p_id, p_merchant, p_key, p_fingerprint, p_asset, p_amount, p_destination, p_metadata, p_status,
                      p_version, p_created_at_ms, p_updated_at_ms
               WHERE EXISTS (SELECT 1 FROM b) RETURNING id),
         ev AS (INSERT INTO events (id, type, entity_id, merchant_id, payload, created_at_ms)
                SELECT e_id, e_type, p.id, p_merchant, e_payload, p_created_at_ms FROM p),
         j AS (INSERT INTO journals (id, kind, asset, reference, created_at_ms)
               SELECT j_id, j_kind, p_asset, p.id, p_created_at_ms FROM p RETURNING id)
    INSERT INTO ledger_entries (journal_id, account, asset, direction, amount)
    SELECT j.id, e.account, p_asset, e.direction, e.amount::numeric
    FROM j, unnest(e_accounts, e_directions, e_amounts) AS e(account, direction, amount);
    GET DIAGNOSTICS written = ROW_COUNT;
    RETURN written;
END
$$;
