-- payoutd: a merchant's payouts filtered by status, newest first, walk this index (GET
-- /v1/payouts?status=...) rather than skipping every newer payout of another status.
CREATE INDEX payouts_merchant_status_listing ON payouts (merchant_id, status, id);
