-- Stops an agent cannot step around by choosing a new run id (issue 31).
--
-- A run id is the agent's to choose, so a cancellation or a budget keyed by
-- the run alone is left behind by starting another run. Two additions:
--   cancelled_scopes  every run of one pod (one sidecar instance, by pod
--                     name), of one profile, or of the whole namespace (the
--                     tenant) is refused from the moment it is written;
--   pod_budgets       spec.budgets.perPod counts every call of a pod,
--                     whatever its run ids, in the transaction that charges
--                     the run.
-- Both are written once per key and only move forward (TG004), as runs do.
-- Shared in shape with migrations/sqlite/0009_scoped_cancellation_and_pod_budgets.sql.

CREATE TABLE cancelled_scopes (
    tenant       TEXT NOT NULL,
    scope        TEXT NOT NULL CHECK (scope IN ('pod', 'profile', 'namespace')),
    -- The pod or profile name; '' for the namespace.
    target       TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    reason       TEXT,
    cancelled_by TEXT NOT NULL,
    PRIMARY KEY (tenant, scope, target),
    CHECK ((scope = 'namespace') = (target = '')),
    -- What the store's Scope::parse accepts (a Kubernetes object name) and
    -- a time it can read: a row nothing can parse never enters.
    CHECK (target = '' OR (pg_catalog.length(target) <= 253
                           AND target ~ '^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$')),
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

-- A scoped cancellation is never changed (the owner may delete one to let a
-- pod name be used again; no tenant can).
CREATE FUNCTION toolgate_scope_fixed() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'TG004',
        MESSAGE = pg_catalog.format('cancellation of %s %s cannot be changed or withdrawn',
                                    OLD.scope, OLD.target);
END $$;

CREATE TRIGGER cancelled_scopes_fixed BEFORE UPDATE ON cancelled_scopes
FOR EACH ROW EXECUTE FUNCTION toolgate_scope_fixed();

-- A pod's counters only go up.
CREATE FUNCTION toolgate_pod_budget_forward_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.tenant IS DISTINCT FROM OLD.tenant
       OR NEW.pod IS DISTINCT FROM OLD.pod
       OR NEW.started_at IS DISTINCT FROM OLD.started_at
       OR NEW.calls < OLD.calls
       OR NEW.high_risk_calls < OLD.high_risk_calls THEN
        RAISE EXCEPTION USING ERRCODE = 'TG004',
            MESSAGE = pg_catalog.format('pod %s: counters only go up and the start is fixed',
                                        OLD.pod);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER pod_budgets_forward_only BEFORE UPDATE ON pod_budgets
FOR EACH ROW EXECUTE FUNCTION toolgate_pod_budget_forward_only();

-- Cancels a scope: the one implementation for the admin CLI, the
-- controller and a tenant's own sidecar (which may cancel only scopes of
-- its own tenant). Records the cancellation once and reaps the pending
-- approvals it covers (the namespace's all; a pod's, those its sidecar
-- asked for), with a run event for each and their waiters woken. A
-- profile's approvals are not reaped: an approval does not record its
-- profile; each is refused when its call passes. Idempotent.
CREATE FUNCTION toolgate_cancel_scope(p_tenant text, p_scope text, p_target text,
                                      p_reason text, p_by text, p_now bigint)
RETURNS TABLE (cancelled_at bigint, newly boolean, approvals_cancelled integer)
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    v_at    bigint;
    v_newly boolean := false;
    v_count integer := 0;
    v_id    text;
    v_run   text;
BEGIN
    IF toolgate_tenant_session() AND p_tenant IS DISTINCT FROM toolgate_current_tenant() THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('cannot cancel a scope of tenant %s', p_tenant);
    END IF;
    INSERT INTO cancelled_scopes AS c (tenant, scope, target, requested_at, reason, cancelled_by)
    VALUES (p_tenant, p_scope, p_target, p_now, p_reason, p_by)
    ON CONFLICT (tenant, scope, target) DO NOTHING
    RETURNING c.requested_at INTO v_at;
    IF FOUND THEN
        v_newly := true;
        FOR v_id, v_run IN
            UPDATE approvals a SET status = 'cancelled', resolved_at = p_now, resolved_by = p_by,
                                   reason = COALESCE(p_reason, p_scope || ' cancelled')
            WHERE a.tenant = p_tenant AND a.status = 'pending'
              -- A sidecar asks as `sidecar:<its namespace>/<its pod>`; the
              -- target is a checked pod name (no LIKE wildcard in it).
              AND (p_scope = 'namespace'
                   OR (p_scope = 'pod' AND a.requested_by LIKE 'sidecar:%/' || p_target))
            RETURNING a.id, a.run_id
        LOOP
            v_count := v_count + 1;
            INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, created_at)
            VALUES (p_tenant, v_run, 'approval.cancelled', v_id,
                    pg_catalog.json_build_object('approval_id', v_id)::text, p_now);
            PERFORM pg_catalog.pg_notify(toolgate_approval_channel(p_tenant),
                                         p_tenant || '/' || v_id);
        END LOOP;
    ELSE
        SELECT c.requested_at INTO v_at FROM cancelled_scopes c
        WHERE c.tenant = p_tenant AND c.scope = p_scope AND c.target = p_target;
    END IF;
    RETURN QUERY SELECT v_at, v_newly, v_count;
END $$;

REVOKE ALL ON FUNCTION toolgate_cancel_scope(text, text, text, text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate_cancel_scope(text, text, text, text, text, bigint)
    TO toolgate_tenant;

-- A tenant's sidecar reads its scopes (cancelling goes through the function
-- above) and counts its pods' calls.
GRANT SELECT ON cancelled_scopes TO toolgate_tenant;
GRANT SELECT, INSERT (tenant, pod, started_at, calls, high_risk_calls) ON pod_budgets
    TO toolgate_tenant;
GRANT UPDATE (calls, high_risk_calls) ON pod_budgets TO toolgate_tenant;

ALTER TABLE cancelled_scopes ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON cancelled_scopes
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON cancelled_scopes
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));

ALTER TABLE pod_budgets ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON pod_budgets
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON pod_budgets
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));

-- Pin the new functions' search path, as 0012 does for every toolgate function.
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
