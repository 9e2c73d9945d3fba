-- payoutd pipeline: what the sign, broadcast and resolve workers need on attempts and wallets.

ALTER TABLE attempts ADD COLUMN last_sent_at_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN last_checked_at_ms BIGINT NOT NULL DEFAULT 0;
-- A receipt seen below the finality threshold; cleared when a reorg drops it.
ALTER TABLE attempts ADD COLUMN mined_block BIGINT;
ALTER TABLE attempts ADD COLUMN mined_hash TEXT;
-- What proved the attempt's end: the landed hash (confirmed), the proof of death (dead), the reverted hash.
ALTER TABLE attempts ADD COLUMN evidence TEXT;
-- An EVM attempt always owns a (wallet, nonce) slot from the moment it exists.
ALTER TABLE attempts ADD CONSTRAINT attempts_evm_slot CHECK (rail <> 'evm' OR (hot_wallet_id IS NOT NULL AND nonce IS NOT NULL));
CREATE INDEX attempts_live_sweep ON attempts (last_checked_at_ms) WHERE status IN ('signed', 'broadcast');
CREATE INDEX attempts_payout ON attempts (payout_id);

ALTER TABLE hot_wallets ADD COLUMN created_at_ms BIGINT NOT NULL DEFAULT 0;
