-- payoutd: API keys get an id to list and revoke them by. It is derived from the key's hash (half of
-- it), so keys created before this migration get the same id the code would give them.
ALTER TABLE api_keys ADD COLUMN id TEXT;
UPDATE api_keys SET id = 'key_' || substr(key_hash, 1, 32);
CREATE UNIQUE INDEX api_keys_id ON api_keys (id);
