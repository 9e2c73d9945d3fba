-- payoutd: fewer indexes on attempts, the hottest table of the signing pass.
-- attempts_payout repeats the leading column of UNIQUE (payout_id, attempt_no), which serves the same look-ups.
DROP INDEX attempts_payout;
-- The sweep finds live attempts through attempts_one_live (same predicate, plus 'created') and orders
-- them by nonce; indexing last_checked_at_ms made every "checked" write a full (non-HOT) row update.
DROP INDEX attempts_live_sweep;
