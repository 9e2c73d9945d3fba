-- payoutd: keys a deployment makes once and keeps with its data. `chain_reference`: what the
-- references its transactions carry on chain are made with (a keyed hash of each business event).
-- Never rotated: a transaction's reference must still link to its payout years later.
CREATE TABLE IF NOT EXISTS deployment_keys (
    name TEXT PRIMARY KEY,
    key_hex TEXT NOT NULL CHECK (length(key_hex) = 64)
);
