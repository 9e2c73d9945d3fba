-- payoutd: what arrived in each hot wallet from outside (the balance check's opening balance per
-- asset, and fundings an operator recorded), each booked once with its ledger journal.
CREATE TABLE wallet_fundings (
    reference     TEXT PRIMARY KEY,
    hot_wallet_id TEXT NOT NULL REFERENCES hot_wallets (id),
    asset         TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('opening', 'funding')),
    amount        TEXT NOT NULL CHECK (length(amount) = 78 AND amount NOT GLOB '*[^0-9]*'),
    created_at_ms BIGINT NOT NULL
);
-- One opening per wallet and asset, whichever worker books it first.
CREATE UNIQUE INDEX wallet_fundings_one_opening ON wallet_fundings (hot_wallet_id, asset) WHERE kind = 'opening';
