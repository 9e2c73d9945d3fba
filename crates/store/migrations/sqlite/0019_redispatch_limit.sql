-- payoutd: how often a delivery was sent again by hand (`POST /v1/events/{id}/redispatch`); past a
-- limit it is not sent again, so redispatching in a loop cannot turn payoutd into a request flood.
ALTER TABLE webhook_deliveries ADD COLUMN redispatches INTEGER NOT NULL DEFAULT 0;
