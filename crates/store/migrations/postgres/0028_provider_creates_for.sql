-- payoutd: how long after a provider attempt began a create may still be sent, fixed when the
-- attempt is made: its lookups read the transfers created until a margin after it, whatever the
-- configuration says later. NULL for attempts made before: the key window bounds those.
ALTER TABLE attempts ADD COLUMN provider_creates_for_ms BIGINT;
