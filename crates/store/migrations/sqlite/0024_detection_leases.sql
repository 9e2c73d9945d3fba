-- payoutd: one worker at a time reads a rail's history for reconciliation (a chain's final blocks, an
-- account's transfers). Two workers reading the same blocks at once only repeat work, and on a node
-- that work is the dearest read there is. Until `leased_until_ms` no other worker takes the scope; an
-- expired lease (a killed worker) is free again. Every cursor write stays conditional: the lease only
-- saves duplicate work.
CREATE TABLE detection_leases (
    scope           TEXT PRIMARY KEY,
    leased_until_ms BIGINT NOT NULL
);
