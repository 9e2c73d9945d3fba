-- payoutd: rail-neutral attempt slots. An attempt's slot is EVM (hot wallet + nonce), Solana (fee
-- payer + last valid block height, or a durable nonce account) or a provider's (provider +
-- idempotency key + reference once recorded).
ALTER TABLE attempts ADD COLUMN provider TEXT;
ALTER TABLE attempts ADD COLUMN nonce_account TEXT;
ALTER TABLE attempts ADD CONSTRAINT attempts_rail CHECK (rail IN ('evm', 'solana', 'provider'));
ALTER TABLE attempts ADD CONSTRAINT attempts_solana_slot
    CHECK (rail <> 'solana' OR (hot_wallet_id IS NOT NULL AND (last_valid_block_height IS NOT NULL) <> (nonce_account IS NOT NULL)));
ALTER TABLE attempts ADD CONSTRAINT attempts_provider_slot CHECK (rail <> 'provider' OR (provider IS NOT NULL AND provider_key IS NOT NULL));
-- One attempt per provider idempotency key, ever: a key sent twice means the same request.
CREATE UNIQUE INDEX attempts_provider_key ON attempts (provider, provider_key) WHERE provider_key IS NOT NULL;
