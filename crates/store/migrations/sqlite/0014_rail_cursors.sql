-- Reconciliation cursors of rails that number nothing by block: a Solana hot wallet's newest judged
-- signature, a provider account's position in its list of transfers.
CREATE TABLE rail_cursors (
    name   TEXT PRIMARY KEY,
    cursor TEXT NOT NULL
);
