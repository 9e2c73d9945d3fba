-- The operator dashboard: every operator action with who and when, and the indexes its payout
-- filters need over all merchants (newest first by id, as the API pages).
CREATE TABLE operator_actions (
    id      BIGSERIAL PRIMARY KEY,
    at_ms   BIGINT NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    subject TEXT NOT NULL,
    detail  TEXT NOT NULL
);
CREATE INDEX payouts_by_status ON payouts (status, id DESC);
CREATE INDEX payouts_by_asset ON payouts (asset, id DESC);
CREATE INDEX payouts_by_created ON payouts (created_at_ms);
CREATE FUNCTION payoutd_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END
$$;
CREATE TRIGGER operator_actions_append_only BEFORE UPDATE OR DELETE ON operator_actions
    FOR EACH ROW EXECUTE FUNCTION payoutd_audit_append_only();
