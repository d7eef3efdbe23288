-- Run governance: budget counters per (tenant, run) and durable cancellation.
--
-- Shared in shape with migrations/sqlite/0005_run_governance.sql; the
-- tenancy parts (grants, row-level security, TG004, the SECURITY DEFINER
-- cancel function) are PostgreSQL only.
--
-- Custom SQLSTATE raised here:
--   TG004  a run update that lowers a counter, moves its start, or
--          withdraws a cancellation

CREATE TABLE runs (
    tenant              TEXT NOT NULL,
    run_id              TEXT NOT NULL,
    -- First counted call (ms since the epoch); maxRunSeconds runs from here.
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

-- A cancelled run's pending approvals are reaped as `cancelled`.
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled'));

-- Counters only go up, a run keeps its start, and a cancellation stays.
CREATE FUNCTION toolgate_run_forward_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.tenant IS DISTINCT FROM OLD.tenant
       OR NEW.run_id IS DISTINCT FROM OLD.run_id
       OR NEW.started_at IS DISTINCT FROM OLD.started_at
       OR NEW.calls < OLD.calls
       OR NEW.high_risk_calls < OLD.high_risk_calls THEN
        RAISE EXCEPTION USING ERRCODE = 'TG004',
            MESSAGE = format('run %s: counters only go up and the start is fixed', OLD.run_id);
    END IF;
    IF OLD.cancel_requested_at IS NOT NULL
       AND (NEW.cancel_requested_at IS DISTINCT FROM OLD.cancel_requested_at
            OR NEW.cancel_reason IS DISTINCT FROM OLD.cancel_reason
            OR NEW.cancelled_by IS DISTINCT FROM OLD.cancelled_by) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG004',
            MESSAGE = format('run %s: a cancellation cannot be changed or withdrawn', OLD.run_id);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER runs_forward_only BEFORE UPDATE ON runs
FOR EACH ROW EXECUTE FUNCTION toolgate_run_forward_only();

-- Cancels a run: the one implementation for the admin CLI, the controller
-- and a tenant's own sidecar (which may cancel only its own tenant's runs,
-- and otherwise may not touch approval status). Records the cancellation
-- once, reaps the run's pending approvals, writes a run event for each and
-- wakes their waiters. Idempotent: a second call reports the first.
CREATE FUNCTION toolgate_cancel_run(p_tenant text, p_run text, p_reason text, p_by text,
                                    p_now bigint)
RETURNS TABLE (requested_at bigint, newly boolean, approvals_cancelled integer)
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    v_at    bigint;
    v_newly boolean := false;
    v_count integer := 0;
    v_id    text;
BEGIN
    IF toolgate_tenant_session() AND p_tenant IS DISTINCT FROM toolgate_current_tenant() THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('cannot cancel a run of tenant %s', p_tenant);
    END IF;
    INSERT INTO runs (tenant, run_id, started_at) VALUES (p_tenant, p_run, p_now)
    ON CONFLICT (tenant, run_id) DO NOTHING;
    UPDATE runs SET cancel_requested_at = p_now, cancel_reason = p_reason, cancelled_by = p_by
    WHERE tenant = p_tenant AND run_id = p_run AND cancel_requested_at IS NULL
    RETURNING cancel_requested_at INTO v_at;
    IF FOUND THEN
        v_newly := true;
        INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, created_at)
        VALUES (p_tenant, p_run, 'run.cancelled', p_run,
                json_build_object('reason', p_reason, 'by', p_by)::text, p_now);
        FOR v_id IN
            UPDATE approvals SET status = 'cancelled', resolved_at = p_now, resolved_by = p_by,
                                 reason = coalesce(p_reason, 'run cancelled')
            WHERE tenant = p_tenant AND run_id = p_run AND status = 'pending'
            RETURNING id
        LOOP
            v_count := v_count + 1;
            INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, created_at)
            VALUES (p_tenant, p_run, 'approval.cancelled', v_id,
                    json_build_object('approval_id', v_id)::text, p_now);
            PERFORM pg_notify('toolgate_approvals', p_tenant || '/' || v_id);
        END LOOP;
        PERFORM pg_notify('toolgate_approvals', 'run/' || p_tenant || '/' || p_run);
    ELSE
        SELECT r.cancel_requested_at INTO v_at FROM runs r
        WHERE r.tenant = p_tenant AND r.run_id = p_run;
    END IF;
    RETURN QUERY SELECT v_at, v_newly, v_count;
END $$;

REVOKE ALL ON FUNCTION toolgate_cancel_run(text, text, text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate_cancel_run(text, text, text, text, bigint) TO toolgate_tenant;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION toolgate_cancel_run(text, text, text, text, bigint) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;

-- A tenant's sidecar counts its runs' calls; cancelling goes through the
-- function above.
GRANT SELECT, INSERT (tenant, run_id, started_at, calls, high_risk_calls) ON runs TO toolgate_tenant;
GRANT UPDATE (calls, high_risk_calls) ON runs TO toolgate_tenant;

ALTER TABLE runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON runs
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON runs
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));
