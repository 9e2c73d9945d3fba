-- payoutd: a network fee per payout, and new payouts per merchant per hour counted across processes.
-- The fee is charged to the merchant at intake beside the hold (a `fee` journal: available ->
-- platform:fees-charged) and refunded with the hold when the payout ends without paying. The intake
-- function draws amount + fee under the same conditional update, writes every journal it is given
-- (the hold, then the fee when there is one), and counts the payout in its merchant's clock hour
-- only while that hour is under the limit. Otherwise as 0014.
ALTER TABLE payouts ADD COLUMN network_fee NUMERIC(78, 0) NOT NULL DEFAULT 0 CHECK (network_fee >= 0);

-- One row per merchant and clock hour that had new payouts: the count the hourly limit reads.
CREATE TABLE merchant_intake_hours (
    merchant_id TEXT NOT NULL REFERENCES merchants (id),
    hour_ms     BIGINT NOT NULL,
    payouts     BIGINT NOT NULL CHECK (payouts >= 0),
    PRIMARY KEY (merchant_id, hour_ms)
);

DROP FUNCTION payoutd_create_payout(bigint, text, text, text, text, text, numeric, text, text, text, bigint, bigint, bigint,
    text, text, text, text, text, text[], smallint[], text[]);

-- Journals arrive as parallel arrays (j_ids, j_kinds); each entry names its journal by position
-- (e_journals, 1-based). Returns the ledger entries written: 2 per posting when created, 0 when the
-- key exists or the funds are short, -1 when the merchant's hour is full (nothing written).
CREATE FUNCTION payoutd_create_payout(
    lock_key bigint, p_id text, p_merchant text, p_key text, p_fingerprint text, p_asset text, p_amount numeric,
    p_network_fee numeric, p_destination text, p_metadata text, p_status text, p_version bigint, p_created_at_ms bigint,
    p_updated_at_ms bigint, p_hour_ms bigint, p_payouts_per_hour bigint, e_id text, e_type text, e_payload text, j_ids text[], j_kinds text[], e_journals int[],
    e_accounts text[], e_directions smallint[], e_amounts text[]
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    written bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    IF EXISTS (SELECT 1 FROM payouts WHERE merchant_id = p_merchant AND idempotency_key = p_key) THEN
        RETURN 0;
    END IF;
    -- The hour's row lock serialises the merchant's concurrent intakes here, so the count is exact.
    INSERT INTO merchant_intake_hours AS h (merchant_id, hour_ms, payouts) VALUES (p_merchant, p_hour_ms, 1)
        ON CONFLICT (merchant_id, hour_ms) DO UPDATE SET payouts = h.payouts + 1 WHERE h.payouts < p_payouts_per_hour;
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written = 0 THEN
        RETURN -1;
    END IF;
    WITH b AS (UPDATE balances SET available = available - p_amount - p_network_fee, held = held + p_amount
               WHERE merchant_id = p_merchant AND asset = p_asset AND available >= p_amount + p_network_fee
               AND NOT EXISTS (SELECT 1 FROM payouts WHERE merchant_id = p_merchant AND idempotency_key = p_key) RETURNING 1),
         p AS (INSERT INTO payouts (id, merchant_id, idempotency_key, fingerprint, asset, amount, network_fee, destination,
                                    metadata, status, version, created_at_ms, updated_at_ms)
               SELECT p_id, p_merchant, p_key, p_fingerprint, p_asset, p_amount, p_network_fee, p_destination, p_metadata,
                      p_status, p_version, p_created_at_ms, p_updated_at_ms
               WHERE EXISTS (SELECT 1 FROM b) RETURNING id),
         ev AS (INSERT INTO events (id, type, entity_id, merchant_id, payload, created_at_ms)
                SELECT e_id, e_type, p.id, p_merchant, e_payload, p_created_at_ms FROM p),
         j AS (INSERT INTO journals (id, kind, asset, reference, created_at_ms)
               SELECT jj.id, jj.kind, p_asset, p.id, p_created_at_ms FROM p, unnest(j_ids, j_kinds) AS jj(id, kind) RETURNING id)
    INSERT INTO ledger_entries (journal_id, account, asset, direction, amount)
    SELECT j_ids[e.journal], e.account, p_asset, e.direction, e.amount::numeric
    FROM unnest(e_journals, e_accounts, e_directions, e_amounts) AS e(journal, account, direction, amount)
    WHERE EXISTS (SELECT 1 FROM j);
    GET DIAGNOSTICS written = ROW_COUNT;
    IF written = 0 THEN
        -- Nothing was created (funds short, or a key taken since the look above): not counted.
        UPDATE merchant_intake_hours SET payouts = payouts - 1 WHERE merchant_id = p_merchant AND hour_ms = p_hour_ms;
    END IF;
    RETURN written;
END
$$;
