-- Run governance: budget counters per (tenant, run) and durable cancellation.
-- See migrations/postgres/0005_run_governance.sql; SQLite is single-user, so
-- only the tables are shared.

CREATE TABLE runs (
    tenant              TEXT NOT NULL,
    run_id              TEXT NOT NULL,
    started_at          BIGINT NOT NULL,
    calls               BIGINT NOT NULL DEFAULT 0 CHECK (calls >= 0),
    high_risk_calls     BIGINT NOT NULL DEFAULT 0 CHECK (high_risk_calls >= 0),
    cancel_requested_at BIGINT,
    cancel_reason       TEXT,
    cancelled_by        TEXT,
    PRIMARY KEY (tenant, run_id)
);
CREATE INDEX runs_cancelled ON runs (tenant, cancel_requested_at)
    WHERE cancel_requested_at IS NOT NULL;

-- SQLite cannot alter a CHECK constraint: rebuild approvals with
-- `cancelled` among its statuses.
CREATE TABLE approvals_0005 (
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
        CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled')),
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    resolved_by    TEXT,
    reason         TEXT,
    resolved_at    BIGINT,
    consumed_at    BIGINT,
    call_digest    TEXT,
    action         TEXT,
    preview        TEXT,
    UNIQUE (tenant, invocation_id)
);
INSERT INTO approvals_0005 (id, tenant, invocation_id, run_id, tool, args_digest, policy_version,
    decision_id, requested_by, status, created_at, expires_at, resolved_by, reason, resolved_at,
    consumed_at, call_digest, action, preview)
SELECT id, tenant, invocation_id, run_id, tool, args_digest, policy_version,
    decision_id, requested_by, status, created_at, expires_at, resolved_by, reason, resolved_at,
    consumed_at, call_digest, action, preview
FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_0005 RENAME TO approvals;
CREATE INDEX approvals_by_tenant_status ON approvals (tenant, status);
CREATE INDEX approvals_pending_expiry ON approvals (expires_at) WHERE status = 'pending';
