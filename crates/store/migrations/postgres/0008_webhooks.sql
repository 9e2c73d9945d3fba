-- payoutd: webhook endpoints and deliveries from the outbox.

-- Operator events (an incident no merchant is concerned by) have no merchant.
ALTER TABLE events ALTER COLUMN merchant_id DROP NOT NULL;
-- Set when the event has been turned into deliveries; the token names the fan-out that took it.
ALTER TABLE events ADD COLUMN fanned_out_at_ms BIGINT;
ALTER TABLE events ADD COLUMN fanout_token TEXT;
-- Events written before webhooks existed had no endpoint to go to.
UPDATE events SET fanned_out_at_ms = created_at_ms;
CREATE INDEX events_to_fan_out ON events (seq) WHERE fanned_out_at_ms IS NULL;
CREATE INDEX events_fanout_token ON events (fanout_token) WHERE fanout_token IS NOT NULL;
CREATE INDEX events_type ON events (type, seq);
-- The writing transaction: `seq` is taken at insert but seen at commit, so a reader paging by `seq`
-- lists only events below the oldest transaction still running, and never steps over one.
ALTER TABLE events ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();

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
    round           BIGINT NOT NULL CHECK (round >= 1),
    tries_in_round  BIGINT NOT NULL CHECK (tries_in_round >= 0),
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
    id          BIGSERIAL PRIMARY KEY,
    event_id    TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    round       BIGINT NOT NULL,
    try_no      BIGINT NOT NULL,
    at_ms       BIGINT NOT NULL,
    status_code BIGINT,
    error       TEXT,
    latency_ms  BIGINT NOT NULL,
    FOREIGN KEY (event_id, endpoint_id) REFERENCES webhook_deliveries (event_id, endpoint_id)
);
CREATE INDEX webhook_delivery_tries_delivery ON webhook_delivery_tries (event_id, endpoint_id, id);
