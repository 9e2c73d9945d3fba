-- payoutd: a worker leases the live attempts it resolves, so two workers do not read the same
-- receipts or race to settle the same attempt. Until this time (ms) no other sweep takes the attempt;
-- an expired lease (a killed worker) is free again. Every write stays conditional: the lease only
-- saves duplicate work.
ALTER TABLE attempts ADD COLUMN leased_until_ms BIGINT;
