-- One intent per decision of a tenant, as on PostgreSQL (migration 0012):
-- a decision id is unique only within its tenant, so another tenant's row
-- must neither block an intent nor reveal that one exists.

DROP INDEX intents_one_per_decision;
CREATE UNIQUE INDEX intents_one_per_decision ON intents (tenant, decision_id);
