-- payoutd: the next attempt after a proven death (SPEC I3, 4.5).
-- Set, in the same transaction that ends attempt n as dead with its proof, to n + 1 while the
-- payout stays `processing` under its hold; cleared by the signing session that creates attempt n + 1.
ALTER TABLE payouts ADD COLUMN next_attempt_no INTEGER CHECK (next_attempt_no >= 2);
CREATE INDEX payouts_awaiting_next_attempt ON payouts (id) WHERE next_attempt_no IS NOT NULL;
