-- Scoped cancellations and per-pod budgets. See
-- migrations/postgres/0013_scoped_cancellation_and_pod_budgets.sql; SQLite
-- is single-user, so only the tables are shared.

CREATE TABLE cancelled_scopes (
    tenant       TEXT NOT NULL,
    scope        TEXT NOT NULL CHECK (scope IN ('pod', 'profile', 'namespace')),
    target       TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    reason       TEXT,
    cancelled_by TEXT NOT NULL,
    PRIMARY KEY (tenant, scope, target),
    CHECK ((scope = 'namespace') = (target = '')),
    CHECK (length(target) <= 253),
    CHECK (requested_at BETWEEN 0 AND 253402300799999)
);

CREATE TABLE pod_budgets (
    tenant          TEXT NOT NULL,
    pod             TEXT NOT NULL,
    started_at      BIGINT NOT NULL,
    calls           BIGINT NOT NULL DEFAULT 0 CHECK (calls >= 0),
    high_risk_calls BIGINT NOT NULL DEFAULT 0 CHECK (high_risk_calls >= 0),
    PRIMARY KEY (tenant, pod)
);
