-- payoutd: when a provider first replayed an error it saved for a provider attempt's idempotency
-- key (the database's clock). Every worker reads it: lookups decide such an attempt a margin after
-- it, instead of each worker learning it again, or the key window (24 h) deciding.
ALTER TABLE attempts ADD COLUMN provider_key_spent_at_ms BIGINT;
