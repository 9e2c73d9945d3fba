-- payoutd: reconciliation of hot-wallet outflows (SPEC 8.10).
-- The next block the wallet's reconciliation scans; NULL until its first pass.
ALTER TABLE hot_wallets ADD COLUMN reconciled_next_block BIGINT CHECK (reconciled_next_block >= 0);
-- What an incident is about (a transaction hash for unmatched transfers): one incident per kind and
-- subject, however many workers scan the same block.
ALTER TABLE incidents ADD COLUMN subject TEXT;
CREATE UNIQUE INDEX incidents_subject ON incidents (kind, subject) WHERE subject IS NOT NULL;
