-- Flow labels (spec.flows): what a run, or a whole pod, has touched.
--
-- An allowed call that a profile's label selector matches sets the label on
-- its run (scope 'run', subject = the run id) or its pod (scope 'pod',
-- subject = the pod name) before the call is answered, so every sidecar
-- serving the run sees it from then on. A label never comes off: rows are
-- only inserted, never changed (TG004), and a tenant may not delete them.
-- Each row names the decision that set it, for the auditor asking why a
-- later call was refused.
-- Shared in shape with migrations/sqlite/0011_flow_labels.sql.

CREATE TABLE flow_labels (
    tenant      TEXT NOT NULL,
    scope       TEXT NOT NULL CHECK (scope IN ('run', 'pod')),
    subject     TEXT NOT NULL CHECK (pg_catalog.length(subject) BETWEEN 1 AND 256),
    -- What the policy's flow names allow (toolgate_policy::flows).
    label       TEXT NOT NULL CHECK (pg_catalog.length(label) <= 63
                                     AND label ~ '^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$'),
    decision_id TEXT NOT NULL CHECK (pg_catalog.length(decision_id) BETWEEN 1 AND 256),
    set_at      BIGINT NOT NULL CHECK (set_at BETWEEN 0 AND 253402300799999),
    PRIMARY KEY (tenant, scope, subject, label)
);

CREATE FUNCTION toolgate_flow_label_fixed() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'TG004',
        MESSAGE = pg_catalog.format('flow label %s of %s %s cannot be changed',
                                    OLD.label, OLD.scope, OLD.subject);
END $$;

CREATE TRIGGER flow_labels_fixed BEFORE UPDATE ON flow_labels
FOR EACH ROW EXECUTE FUNCTION toolgate_flow_label_fixed();

GRANT SELECT, INSERT ON flow_labels TO toolgate_tenant;

ALTER TABLE flow_labels ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON flow_labels
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON flow_labels
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));

-- Pin the new function's search path, as 0012 does for every toolgate function.
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
