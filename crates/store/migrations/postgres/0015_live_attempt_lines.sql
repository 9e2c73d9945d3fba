-- payoutd: each wallet's line of live attempts in the sweep's order (lowest nonce, then least
-- recently checked). The sweep reads the head of every line from this index and stops at its limit,
-- instead of ordering every live attempt of every wallet on each pass.
CREATE INDEX attempts_live_line ON attempts (hot_wallet_id, nonce, last_checked_at_ms, id) WHERE status IN ('signed', 'broadcast');
-- The sweep's second look at each line (attempts of payouts waiting for a person) starts from these
-- few payouts instead of reading every payout ever made.
CREATE INDEX payouts_needs_attention ON payouts (id) WHERE status = 'needs_attention';
