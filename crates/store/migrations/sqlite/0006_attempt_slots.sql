-- payoutd: rail-neutral attempt slots. An attempt's slot is EVM (hot wallet + nonce), Solana (fee
-- payer + last valid block height, or a durable nonce account) or a provider's (provider +
-- idempotency key + reference once recorded). SQLite cannot add CHECK constraints to a table;
-- the store writes only what `AttemptSlot` allows and reads every row back through it.
ALTER TABLE attempts ADD COLUMN provider TEXT;
ALTER TABLE attempts ADD COLUMN nonce_account TEXT;
-- One attempt per provider idempotency key, ever: a key sent twice means the same request.
CREATE UNIQUE INDEX attempts_provider_key ON attempts (provider, provider_key) WHERE provider_key IS NOT NULL;
