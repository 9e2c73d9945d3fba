-- payoutd: payout batches. Each line is a payout keyed by its external_id (the payouts table's
-- idempotency key, same uniqueness), so a line's payout is found by (merchant, external_id).
CREATE TABLE payout_batches (
    id            TEXT PRIMARY KEY,
    merchant_id   TEXT NOT NULL REFERENCES merchants (id),
    -- The Idempotency-Key, or a digest of the batch's external ids: a resubmitted batch is the same batch.
    batch_key     TEXT NOT NULL,
    line_count    BIGINT NOT NULL CHECK (line_count >= 1),
    created_at_ms BIGINT NOT NULL,
    -- Set with the batch.completed event, once every line's payout is final.
    completed_at_ms BIGINT,
    UNIQUE (merchant_id, batch_key)
);
CREATE INDEX payout_batches_open ON payout_batches (created_at_ms) WHERE completed_at_ms IS NULL;

CREATE TABLE payout_batch_lines (
    batch_id    TEXT NOT NULL REFERENCES payout_batches (id),
    line_no     BIGINT NOT NULL CHECK (line_no >= 1),
    external_id TEXT NOT NULL,
    -- Why the line has no payout (insufficient funds, key reused); NULL once it has one.
    error       TEXT,
    PRIMARY KEY (batch_id, line_no),
    UNIQUE (batch_id, external_id)
);
