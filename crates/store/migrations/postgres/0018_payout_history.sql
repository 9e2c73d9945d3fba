-- A payout's page reads the operator actions on it (its events come by their unique (type, entity)).
CREATE INDEX operator_actions_by_subject ON operator_actions (subject, id);
-- The dashboard's search finds a payout by the provider's id of its transfer.
CREATE INDEX attempts_by_provider_ref ON attempts (provider_ref) WHERE provider_ref IS NOT NULL;
