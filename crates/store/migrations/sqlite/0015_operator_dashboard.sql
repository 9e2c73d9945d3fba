-- The operator dashboard: every operator action with who and when, and the indexes its payout
-- filters need over all merchants (newest first by id, as the API pages).
CREATE TABLE operator_actions (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms   INTEGER NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    subject TEXT NOT NULL,
    detail  TEXT NOT NULL
);
CREATE INDEX payouts_by_status ON payouts (status, id DESC);
CREATE INDEX payouts_by_asset ON payouts (asset, id DESC);
CREATE INDEX payouts_by_created ON payouts (created_at_ms);
CREATE TRIGGER operator_actions_no_update BEFORE UPDATE ON operator_actions BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER operator_actions_no_delete BEFORE DELETE ON operator_actions BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
