-- Hardening: bind approvals, intents and decision records to the whole call
-- (tool, action and arguments), one intent per decision enforced by the
-- database, and the highest bundle sequence a sidecar accepted per profile,
-- so anti-rollback survives a restart.
-- Keep this file semantically identical in migrations/postgres and migrations/sqlite.

-- NULL only on rows written before this migration.
ALTER TABLE decisions ADD COLUMN call_digest TEXT;
ALTER TABLE intents ADD COLUMN call_digest TEXT;
ALTER TABLE approvals ADD COLUMN call_digest TEXT;

-- A decision allows one call, so it can have at most one intent; concurrent
-- POST /v1/intents for one decision race here and exactly one wins.
CREATE UNIQUE INDEX intents_one_per_decision ON intents (decision_id);

-- The newest bundle accepted for a profile: a sidecar refuses, at start-up
-- as at reload, any bundle with a lower sequence (or the same sequence with
-- another digest).
CREATE TABLE bundle_high_water (
    namespace     TEXT NOT NULL,
    profile       TEXT NOT NULL,
    sequence      BIGINT NOT NULL CHECK (sequence >= 0),
    bundle_digest TEXT NOT NULL,
    updated_at    BIGINT NOT NULL,
    PRIMARY KEY (namespace, profile)
);
