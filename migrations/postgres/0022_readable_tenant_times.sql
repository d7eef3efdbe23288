-- More times a tenant writes are times the store can read back (review
-- finding: one tenant must not stall a controller loop that serves every
-- tenant; 0021 did this for approvals).
--
-- A tenant role writes its pods' heartbeats (last_seen) and its decision
-- rows (created_at) itself. A value no timestamp holds made the fleet
-- status of every profile of that name fail (before the controller read
-- only the profile's own namespace), and a decision row of any tenant made
-- the scheduled archive of every tenant's log fail. The controller now
-- skips and reports such rows; these triggers keep new ones out, with the
-- bound of 0021: Unix milliseconds from 1970 up to 9999-01-01.
--
-- Triggers with a WHEN condition, not CHECK constraints: the condition is
-- evaluated without calling any function, so the decision log's append
-- (the hot path) pays nothing measurable; rows planted before this
-- migration do not make it fail; and an update that leaves a planted
-- heartbeat's time alone is not refused.

CREATE FUNCTION toolgate_refuse_unreadable_time() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'TG007',
        MESSAGE = pg_catalog.format('%s: %s %s is not a time the store can read',
                                    TG_TABLE_NAME, TG_ARGV[0],
                                    pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.->>) TG_ARGV[0]);
END $$;

CREATE TRIGGER sidecar_heartbeats_time_readable BEFORE INSERT ON sidecar_heartbeats
FOR EACH ROW WHEN (NEW.last_seen NOT BETWEEN 0 AND 253370764800000)
EXECUTE FUNCTION toolgate_refuse_unreadable_time('last_seen');

CREATE TRIGGER sidecar_heartbeats_time_readable_update BEFORE UPDATE ON sidecar_heartbeats
FOR EACH ROW WHEN (NEW.last_seen IS DISTINCT FROM OLD.last_seen
                   AND NEW.last_seen NOT BETWEEN 0 AND 253370764800000)
EXECUTE FUNCTION toolgate_refuse_unreadable_time('last_seen');

-- Decisions are never updated; on the partitioned table the trigger is
-- every partition's, those created later included.
CREATE TRIGGER decisions_time_readable BEFORE INSERT ON decisions
FOR EACH ROW WHEN (NEW.created_at NOT BETWEEN 0 AND 253370764800000)
EXECUTE FUNCTION toolgate_refuse_unreadable_time('created_at');

REVOKE ALL ON FUNCTION toolgate_refuse_unreadable_time() FROM PUBLIC;

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
