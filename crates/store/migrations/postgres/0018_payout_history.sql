-- A payout's page reads its events and the operator actions on it: by entity and by subject.
CREATE INDEX events_by_entity ON events (entity_id, seq);
CREATE INDEX operator_actions_by_subject ON operator_actions (subject, id);
-- The dashboard's search finds a payout by the provider's id of its transfer.
CREATE INDEX attempts_by_provider_ref ON attempts (provider_ref) WHERE provider_ref IS NOT NULL;
