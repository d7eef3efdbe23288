-- toolgate-store schema, SQLite flavour.
-- Every timestamp is BIGINT milliseconds since the Unix epoch (UTC) so that
-- PostgreSQL and SQLite compare, sort and round-trip times identically.
-- Keep this file semantically identical to migrations/postgres/0001_toolgate_store.sql.

-- Durable pre-execution intent records for high-risk calls.
CREATE TABLE intents (
    id                 TEXT PRIMARY KEY,
    tenant             TEXT NOT NULL,
    run_id             TEXT NOT NULL,
    step_id            TEXT NOT NULL,
    tool               TEXT NOT NULL,
    args_digest        TEXT NOT NULL,
    decision_id        TEXT NOT NULL,
    risk               TEXT NOT NULL,
    verification_probe TEXT,
    status             TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'completed', 'not_completed', 'error')),
    detail             TEXT,
    created_at         BIGINT NOT NULL,
    effect_sent_at     BIGINT,
    completed_at       BIGINT
);
CREATE INDEX intents_open_by_run ON intents (run_id, status);

-- Durable approvals; one per (tenant, invocation).
CREATE TABLE approvals (
    id             TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL,
    invocation_id  TEXT NOT NULL,
    run_id         TEXT NOT NULL,
    tool           TEXT NOT NULL,
    args_digest    TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    decision_id    TEXT NOT NULL,
    requested_by   TEXT NOT NULL,
    status         TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    resolved_by    TEXT,
    reason         TEXT,
    resolved_at    BIGINT,
    consumed_at    BIGINT,
    UNIQUE (tenant, invocation_id)
);
CREATE INDEX approvals_by_tenant_status ON approvals (tenant, status);
CREATE INDEX approvals_pending_expiry ON approvals (expires_at) WHERE status = 'pending';

-- Per-run audit events (approval.requested, approval.resolved, ...).
CREATE TABLE run_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant     TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX run_events_by_run ON run_events (tenant, run_id, id);

-- Append-only, per-tenant hash-chained decision log.
CREATE TABLE decisions (
    tenant         TEXT NOT NULL,
    seq            BIGINT NOT NULL CHECK (seq >= 1),
    decision_id    TEXT NOT NULL,
    run_id         TEXT NOT NULL,
    step_id        TEXT NOT NULL,
    tool           TEXT NOT NULL,
    verdict        TEXT NOT NULL,
    reason         TEXT NOT NULL,
    message        TEXT,
    matched_rule   TEXT,
    policy_version TEXT NOT NULL,
    risk           TEXT NOT NULL,
    args_digest    TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    prev_hash      TEXT NOT NULL,
    hash           TEXT NOT NULL,
    PRIMARY KEY (tenant, seq)
);

-- The chain head per tenant: the last appended seq and hash. Appends run in
-- BEGIN IMMEDIATE transactions, so they are serialised; verification compares
-- the head to the last row so that deleting the newest rows is detected too.
-- The trigger below advances the head (PostgreSQL does it in the append
-- statement instead).
CREATE TABLE decision_heads (
    tenant    TEXT PRIMARY KEY,
    seq       BIGINT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL
);

CREATE TRIGGER decisions_advance_head AFTER INSERT ON decisions
FOR EACH ROW BEGIN
    INSERT INTO decision_heads (tenant, seq, prev_hash, hash)
    VALUES (NEW.tenant, NEW.seq, NEW.prev_hash, NEW.hash)
    ON CONFLICT (tenant) DO UPDATE
        SET seq = excluded.seq, prev_hash = excluded.prev_hash, hash = excluded.hash;
END;

-- Every policy profile version a process loaded, with its full hashes.
CREATE TABLE policy_profiles (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    profile         TEXT NOT NULL,
    namespace       TEXT NOT NULL,
    policy_version  TEXT NOT NULL,
    spec_sha256     TEXT NOT NULL,
    hardline_sha256 TEXT NOT NULL,
    bundle_digest   TEXT,
    loaded_by       TEXT NOT NULL,
    loaded_at       BIGINT NOT NULL,
    UNIQUE (policy_version, loaded_by)
);

-- Process-wide operational events (no tenant, no session), deduplicated by a
-- content-derived idempotency key.
CREATE TABLE process_events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    payload         TEXT NOT NULL,
    created_at      BIGINT NOT NULL
);

-- Latest heartbeat per sidecar pod, for the controller's fleet view.
CREATE TABLE sidecar_heartbeats (
    pod_namespace  TEXT NOT NULL,
    pod_name       TEXT NOT NULL,
    profile        TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    sequence       BIGINT NOT NULL,
    last_seen      BIGINT NOT NULL,
    PRIMARY KEY (pod_namespace, pod_name)
);
CREATE INDEX sidecar_heartbeats_by_profile ON sidecar_heartbeats (profile);
