-- payoutd: a duplicate_transfer incident opened while its transfer was not final (a provider's
-- `processing`, a state the rail does not recognise, a receipt not yet readable) books nothing
-- until the rail reports the transfer final: booked then if it moved, resolved if it did not.
ALTER TABLE incidents ADD COLUMN awaiting_books BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX incidents_awaiting_books ON incidents (created_at_ms) WHERE awaiting_books;
