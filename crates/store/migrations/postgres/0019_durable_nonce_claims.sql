-- payoutd: a durable-nonce attempt records the nonce value it was signed against and the block
-- height at signing. One attempt per (nonce account, value), ever: nonce values never repeat, and
-- of two transactions signed on one value at most one can land, so the second attempt is refused
-- by the store instead of dying beside the first. The height bounds how far back a node's history
-- must reach before "no such signature" means absent. Attempts signed before this hold NULLs.
ALTER TABLE attempts ADD COLUMN nonce_value TEXT;
ALTER TABLE attempts ADD COLUMN signed_at_block_height BIGINT;
CREATE UNIQUE INDEX attempts_durable_nonce_value ON attempts (nonce_account, nonce_value) WHERE nonce_value IS NOT NULL;
