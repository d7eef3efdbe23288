-- A scoped cancellation wakes the sidecars it stops, as a run's already
-- does (0012): one notification on the tenant's own channel, so an idle
-- sidecar can wait for stops instead of asking for them every second. The
-- payload names the tenant only; what was stopped is read from the table
-- by whoever is allowed to.
CREATE FUNCTION toolgate_scope_wakeup() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    PERFORM pg_catalog.pg_notify(toolgate_approval_channel(NEW.tenant), 'scope/' || NEW.tenant);
    RETURN NULL;
END $$;

REVOKE ALL ON FUNCTION toolgate_scope_wakeup() FROM PUBLIC;

CREATE TRIGGER cancelled_scopes_wakeup AFTER INSERT ON cancelled_scopes
FOR EACH ROW EXECUTE FUNCTION toolgate_scope_wakeup();

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
