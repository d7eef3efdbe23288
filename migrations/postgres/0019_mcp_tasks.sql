-- MCP tasks the gateway holds (toolgate_mcp::tasks): an escalated
-- tools/call of a client that takes tasks waits here for its approval, so a
-- restarted sidecar still knows it.
--
-- state: 'held' (waiting on approval_id) -> 'forwarding' (committed before
-- the request is sent upstream; only one process wins that UPDATE) ->
-- 'completed' | 'failed'; 'held' -> 'cancelled' | 'failed'. A task found
-- 'forwarding' after a restart is never sent again: it fails, its outcome
-- unknown. outcome is the JSON text of the result or the error.
-- Shared in shape with migrations/sqlite/0013_mcp_tasks.sql.

CREATE TABLE mcp_tasks (
    tenant       TEXT NOT NULL,
    task_id      TEXT NOT NULL CHECK (pg_catalog.length(task_id) BETWEEN 1 AND 256),
    server       TEXT NOT NULL CHECK (pg_catalog.length(server) BETWEEN 1 AND 256),
    run_id       TEXT NOT NULL CHECK (pg_catalog.length(run_id) BETWEEN 1 AND 256),
    session      TEXT CHECK (pg_catalog.length(session) BETWEEN 1 AND 1024),
    approval_id  TEXT NOT NULL CHECK (pg_catalog.length(approval_id) BETWEEN 1 AND 256),
    call_digest  TEXT CHECK (pg_catalog.length(call_digest) BETWEEN 1 AND 256),
    request      TEXT NOT NULL CHECK (pg_catalog.length(request) <= 4194304),
    state        TEXT NOT NULL CHECK (state IN ('held', 'forwarding', 'completed', 'failed', 'cancelled')),
    outcome      TEXT CHECK (pg_catalog.length(outcome) <= 4194304),
    created_at   BIGINT NOT NULL CHECK (created_at BETWEEN 0 AND 253402300799999),
    updated_at   BIGINT NOT NULL CHECK (updated_at BETWEEN 0 AND 253402300799999),
    expires_at   BIGINT NOT NULL CHECK (expires_at BETWEEN 0 AND 253402300799999),
    PRIMARY KEY (tenant, task_id)
);

CREATE INDEX mcp_tasks_open ON mcp_tasks (tenant, server)
    WHERE state IN ('held', 'forwarding');

GRANT SELECT, INSERT, UPDATE, DELETE ON mcp_tasks TO toolgate_tenant;

ALTER TABLE mcp_tasks ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON mcp_tasks
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON mcp_tasks
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));

-- No new function; toolgate's functions keep the search path 0012 pinned.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
        WHERE p.pronamespace OPERATOR(pg_catalog.=) current_schema()::regnamespace
          AND pg_catalog.starts_with(p.proname::text, 'toolgate_')
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp',
                                  f, current_schema());
    END LOOP;
END $$;
