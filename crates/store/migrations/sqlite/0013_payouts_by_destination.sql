-- payoutd: payouts by destination. The policy pass counts near-duplicates (same merchant, asset,
-- destination and amount in a window) and sums the volume sent to a destination in a window for
-- every payout it decides; without this index both read every payout of the merchant (or of the
-- asset), so a policy pass over n payouts cost O(n^2) row reads.
CREATE INDEX payouts_by_destination ON payouts (destination, asset, merchant_id, created_at_ms);
