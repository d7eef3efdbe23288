-- MCP tasks the gateway holds. See migrations/postgres/0019_mcp_tasks.sql;
-- SQLite is single-user, so only the table is shared.

CREATE TABLE mcp_tasks (
    tenant       TEXT NOT NULL,
    task_id      TEXT NOT NULL CHECK (length(task_id) BETWEEN 1 AND 256),
    server       TEXT NOT NULL CHECK (length(server) BETWEEN 1 AND 256),
    run_id       TEXT NOT NULL CHECK (length(run_id) BETWEEN 1 AND 256),
    session      TEXT CHECK (length(session) BETWEEN 1 AND 1024),
    approval_id  TEXT NOT NULL CHECK (length(approval_id) BETWEEN 1 AND 256),
    call_digest  TEXT CHECK (length(call_digest) BETWEEN 1 AND 256),
    request      TEXT NOT NULL CHECK (length(request) <= 4194304),
    state        TEXT NOT NULL CHECK (state IN ('held', 'forwarding', 'completed', 'failed', 'cancelled')),
    outcome      TEXT CHECK (length(outcome) <= 4194304),
    created_at   BIGINT NOT NULL CHECK (created_at BETWEEN 0 AND 253402300799999),
    updated_at   BIGINT NOT NULL CHECK (updated_at BETWEEN 0 AND 253402300799999),
    expires_at   BIGINT NOT NULL CHECK (expires_at BETWEEN 0 AND 253402300799999),
    PRIMARY KEY (tenant, task_id)
);

CREATE INDEX mcp_tasks_open ON mcp_tasks (tenant, server)
    WHERE state IN ('held', 'forwarding');
