-- payoutd pipeline: what the sign, broadcast and resolve workers need on attempts and wallets.
-- (SQLite cannot add a CHECK to an existing table; the EVM slot rule is enforced by the store code here.)

ALTER TABLE attempts ADD COLUMN last_sent_at_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN last_checked_at_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN mined_block INTEGER;
ALTER TABLE attempts ADD COLUMN mined_hash TEXT;
ALTER TABLE attempts ADD COLUMN evidence TEXT;
CREATE INDEX attempts_live_sweep ON attempts (last_checked_at_ms) WHERE status IN ('signed', 'broadcast');
CREATE INDEX attempts_payout ON attempts (payout_id);

ALTER TABLE hot_wallets ADD COLUMN created_at_ms INTEGER NOT NULL DEFAULT 0;
