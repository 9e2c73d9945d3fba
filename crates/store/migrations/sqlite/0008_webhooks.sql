-- payoutd: webhook endpoints and deliveries from the outbox.

-- Operator events (an incident no merchant is concerned by) have no merchant: SQLite cannot drop a
-- NOT NULL in place, so the table is rebuilt with the same rows and indexes.
CREATE TABLE events_new (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE,
    type             TEXT NOT NULL,
    entity_id        TEXT NOT NULL,
    merchant_id      TEXT,
    payload          TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    -- Set when the event has been turned into deliveries; the token names the fan-out that took it.
    fanned_out_at_ms BIGINT,
    fanout_token     TEXT,
    UNIQUE (type, entity_id)
);
-- Events written before webhooks existed had no endpoint to go to.
INSERT INTO events_new (seq, id, type, entity_id, merchant_id, payload, created_at_ms, fanned_out_at_ms)
    SELECT seq, id, type, entity_id, merchant_id, payload, created_at_ms, created_at_ms FROM events;
DROP TABLE events;
ALTER TABLE events_new RENAME TO events;
CREATE INDEX events_merchant ON events (merchant_id, seq);
CREATE INDEX events_to_fan_out ON events (seq) WHERE fanned_out_at_ms IS NULL;
CREATE INDEX events_fanout_token ON events (fanout_token) WHERE fanout_token IS NOT NULL;
CREATE INDEX events_type ON events (type, seq);

CREATE TABLE webhook_endpoints (
    id            TEXT PRIMARY KEY,
    -- NULL: an operator endpoint (incidents of every merchant).
    merchant_id   TEXT REFERENCES merchants (id),
    url           TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    -- Type names separated by one space; '' for every type.
    event_types   TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    deleted_at_ms BIGINT
);
CREATE INDEX webhook_endpoints_owner ON webhook_endpoints (merchant_id) WHERE deleted_at_ms IS NULL;

-- Secrets sign until they expire; the current one has none. Stored in clear because an HMAC needs
-- the key; never printed.
CREATE TABLE webhook_secrets (
    endpoint_id   TEXT NOT NULL REFERENCES webhook_endpoints (id),
    secret        TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT,
    PRIMARY KEY (endpoint_id, secret)
);

-- One event to one endpoint.
CREATE TABLE webhook_deliveries (
    event_id        TEXT NOT NULL REFERENCES events (id),
    endpoint_id     TEXT NOT NULL REFERENCES webhook_endpoints (id),
    state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'abandoned')),
    round           INTEGER NOT NULL CHECK (round >= 1),
    tries_in_round  INTEGER NOT NULL CHECK (tries_in_round >= 0),
    next_try_at_ms  BIGINT NOT NULL,
    leased_until_ms BIGINT,
    lease_token     TEXT,
    delivered_at_ms BIGINT,
    created_at_ms   BIGINT NOT NULL,
    PRIMARY KEY (event_id, endpoint_id),
    CHECK (state <> 'delivered' OR delivered_at_ms IS NOT NULL)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, next_try_at_ms) WHERE state = 'pending';

-- Every try, kept: when, what came back, how long it took.
CREATE TABLE webhook_delivery_tries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    round       INTEGER NOT NULL,
    try_no      INTEGER NOT NULL,
    at_ms       BIGINT NOT NULL,
    status_code INTEGER,
    error       TEXT,
    latency_ms  BIGINT NOT NULL,
    FOREIGN KEY (event_id, endpoint_id) REFERENCES webhook_deliveries (event_id, endpoint_id)
);
CREATE INDEX webhook_delivery_tries_delivery ON webhook_delivery_tries (event_id, endpoint_id, id);
