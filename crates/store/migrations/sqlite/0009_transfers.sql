-- payoutd: internal transfers between merchants' available balances, keyed like payouts.
CREATE TABLE transfers (
    id                      TEXT PRIMARY KEY,
    merchant_id             TEXT NOT NULL REFERENCES merchants (id),
    idempotency_key         TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 64),
    fingerprint             TEXT NOT NULL,
    destination_merchant_id TEXT NOT NULL REFERENCES merchants (id),
    asset                   TEXT NOT NULL,
    amount                  TEXT NOT NULL CHECK (length(amount) = 78 AND amount NOT GLOB '*[^0-9]*' AND amount > '000000000000000000000000000000000000000000000000000000000000000000000000000000'),
    created_at_ms           BIGINT NOT NULL,
    UNIQUE (merchant_id, idempotency_key),
    CHECK (merchant_id <> destination_merchant_id)
);
