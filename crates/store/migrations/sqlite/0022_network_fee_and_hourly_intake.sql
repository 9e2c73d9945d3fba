-- payoutd: a network fee per payout, and new payouts per merchant per hour counted across processes.
-- The fee is charged to the merchant at intake beside the hold (a `fee` journal: available ->
-- platform:fees-charged) and refunded with the hold when the payout ends without paying. Numbered as
-- PostgreSQL's migration for the same change.
ALTER TABLE payouts ADD COLUMN network_fee TEXT NOT NULL DEFAULT '000000000000000000000000000000000000000000000000000000000000000000000000000000'
    CHECK (length(network_fee) = 78 AND network_fee NOT GLOB '*[^0-9]*');

-- New payouts per merchant per clock hour, counted under the single writer for the hourly limit.
CREATE TABLE merchant_intake_hours (
    merchant_id TEXT NOT NULL REFERENCES merchants (id),
    hour_ms     BIGINT NOT NULL,
    payouts     BIGINT NOT NULL CHECK (payouts >= 0),
    PRIMARY KEY (merchant_id, hour_ms)
);
