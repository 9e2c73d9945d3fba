-- payoutd foundation schema (SQLite; money is 78-digit zero-padded TEXT, so text order is numeric order): the database refuses illegal states, not only the code.

CREATE TABLE merchants (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE api_keys (
    key_hash      TEXT PRIMARY KEY CHECK (length(key_hash) = 64),
    merchant_id   TEXT NOT NULL REFERENCES merchants (id),
    created_at_ms BIGINT NOT NULL,
    revoked_at_ms BIGINT
);
CREATE INDEX api_keys_merchant ON api_keys (merchant_id);

-- Per merchant and asset, in base units. Never negative (I2).
CREATE TABLE balances (
    merchant_id TEXT NOT NULL REFERENCES merchants (id),
    asset       TEXT NOT NULL,
    available TEXT NOT NULL CHECK (length(available) = 78 AND available NOT GLOB '*[^0-9]*'),
    held TEXT NOT NULL CHECK (length(held) = 78 AND held NOT GLOB '*[^0-9]*'),
    PRIMARY KEY (merchant_id, asset)
);

CREATE TABLE journals (
    id            TEXT PRIMARY KEY,
    kind          TEXT NOT NULL CHECK (kind IN ('deposit', 'hold', 'release', 'settle', 'transfer', 'fee')),
    asset         TEXT NOT NULL,
    reference     TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX journals_reference ON journals (reference);

-- direction -1 leaves the account, +1 arrives; sum(direction * amount) per journal is zero.
CREATE TABLE ledger_entries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    journal_id TEXT NOT NULL REFERENCES journals (id),
    account    TEXT NOT NULL,
    asset      TEXT NOT NULL,
    direction  INTEGER NOT NULL CHECK (direction IN (-1, 1)),
    amount TEXT NOT NULL CHECK (length(amount) = 78 AND amount NOT GLOB '*[^0-9]*')
);
CREATE INDEX ledger_entries_journal ON ledger_entries (journal_id);
CREATE INDEX ledger_entries_account ON ledger_entries (account, asset);


CREATE TABLE deposits (
    id              TEXT PRIMARY KEY,
    merchant_id     TEXT NOT NULL REFERENCES merchants (id),
    idempotency_key TEXT NOT NULL,
    asset           TEXT NOT NULL,
    amount TEXT NOT NULL CHECK (length(amount) = 78 AND amount NOT GLOB '*[^0-9]*'),
    created_at_ms   BIGINT NOT NULL,
    UNIQUE (merchant_id, idempotency_key)
);

-- The obligation. (merchant, idempotency key) is unique forever (I1).
CREATE TABLE payouts (
    id              TEXT PRIMARY KEY,
    merchant_id     TEXT NOT NULL REFERENCES merchants (id),
    idempotency_key TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    asset           TEXT NOT NULL,
    amount TEXT NOT NULL CHECK (length(amount) = 78 AND amount NOT GLOB '*[^0-9]*'),
    destination     TEXT NOT NULL,
    metadata        TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('requested', 'held_for_review', 'approved', 'processing', 'paid',
                                                     'rejected', 'canceled', 'failed', 'needs_attention')),
    version         BIGINT NOT NULL CHECK (version >= 1),
    created_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL,
    UNIQUE (merchant_id, idempotency_key)
);
CREATE INDEX payouts_merchant_listing ON payouts (merchant_id, id);
CREATE INDEX payouts_open_work ON payouts (status, id) WHERE status IN ('requested', 'approved', 'processing');

CREATE TABLE hot_wallets (
    id         TEXT PRIMARY KEY,
    chain      TEXT NOT NULL,
    address    TEXT NOT NULL,
    next_nonce BIGINT NOT NULL CHECK (next_nonce >= 0),
    UNIQUE (chain, address)
);

-- One try at satisfying a payout on one rail.
CREATE TABLE attempts (
    id                      TEXT PRIMARY KEY,
    payout_id               TEXT NOT NULL REFERENCES payouts (id),
    attempt_no              INTEGER NOT NULL CHECK (attempt_no >= 1),
    status                  TEXT NOT NULL CHECK (status IN ('created', 'signed', 'broadcast', 'confirmed', 'dead', 'reverted')),
    rail                    TEXT NOT NULL,
    hot_wallet_id           TEXT REFERENCES hot_wallets (id),
    nonce                   BIGINT CHECK (nonce >= 0),
    provider_key            TEXT,
    provider_ref            TEXT,
    last_valid_block_height BIGINT,
    death_proof             TEXT,
    created_at_ms           BIGINT NOT NULL,
    updated_at_ms           BIGINT NOT NULL,
    UNIQUE (payout_id, attempt_no),
    -- A dead attempt carries its proof.
    CHECK (status <> 'dead' OR death_proof IS NOT NULL)
);
-- I3: at most one live attempt per payout.
CREATE UNIQUE INDEX attempts_one_live ON attempts (payout_id) WHERE status IN ('created', 'signed', 'broadcast');
-- A nonce is used by one attempt of one wallet, ever.
CREATE UNIQUE INDEX attempts_wallet_nonce ON attempts (hot_wallet_id, nonce) WHERE nonce IS NOT NULL;

-- Every transaction an attempt ever broadcast (original, replacements, cancel), bytes stored first (I4).
CREATE TABLE attempt_transactions (
    tx_hash                  TEXT PRIMARY KEY,
    attempt_id               TEXT NOT NULL REFERENCES attempts (id),
    kind                     TEXT NOT NULL CHECK (kind IN ('original', 'replacement', 'cancel')),
    raw                      BLOB NOT NULL,
    max_fee_per_gas          TEXT,
    max_priority_fee_per_gas TEXT,
    created_at_ms            BIGINT NOT NULL
);
CREATE INDEX attempt_transactions_attempt ON attempt_transactions (attempt_id);

-- Outbox: one row per (type, entity), id derived from both.
CREATE TABLE events (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    type          TEXT NOT NULL,
    entity_id     TEXT NOT NULL,
    merchant_id   TEXT NOT NULL,
    payload       TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    UNIQUE (type, entity_id)
);
CREATE INDEX events_merchant ON events (merchant_id, seq);

CREATE TABLE incidents (
    id             TEXT PRIMARY KEY,
    kind           TEXT NOT NULL,
    merchant_id    TEXT,
    payout_id      TEXT REFERENCES payouts (id),
    attempt_id     TEXT REFERENCES attempts (id),
    detail         TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('open', 'resolved')),
    resolution     TEXT,
    created_at_ms  BIGINT NOT NULL,
    resolved_at_ms BIGINT,
    CHECK (status = 'open' OR resolution IS NOT NULL)
);
CREATE INDEX incidents_open ON incidents (status, created_at_ms);

CREATE TRIGGER journals_no_update BEFORE UPDATE ON journals BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER journals_no_delete BEFORE DELETE ON journals BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
