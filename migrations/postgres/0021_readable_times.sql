-- Times a tenant writes are times the store can read back (review finding:
-- one tenant must not stall the approvals mirror).
--
-- A tenant role inserts its approvals with its own created_at and
-- expires_at, sets consumed_at, and inserts flow labels with their set_at.
-- A value no timestamp can hold (jiff's range ends at 9999-12-30T22:00Z)
-- made every list across tenants fail on that one row, the controller's
-- mirror of every tenant's approvals included. The store now skips and
-- reports such a row (`Approvals::list_all_readable`); these checks keep
-- new ones out. Readable here means Unix milliseconds from 1970 up to
-- 9999-01-01, the bound flow_labels' own check (0015) now gets too: it
-- stopped at 9999-12-31, past what a timestamp holds.
--
-- Rows already stored are not checked, so one planted before this
-- migration cannot make it fail (the per-row read reports those). On
-- approvals the check is a trigger on the times a statement sets, not a
-- CHECK constraint: a constraint would also refuse expiring or cancelling
-- such a planted row, whose other times the statement does not touch, and
-- that sweep runs over every tenant's rows at once.

CREATE FUNCTION toolgate_approval_times_readable() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_column text;
    v_ms bigint;
BEGIN
    FOR v_column, v_ms IN
        SELECT c, n FROM (VALUES
            ('created_at', NEW.created_at, OLD.created_at),
            ('expires_at', NEW.expires_at, OLD.expires_at),
            ('resolved_at', NEW.resolved_at, OLD.resolved_at),
            ('consumed_at', NEW.consumed_at, OLD.consumed_at)) AS t (c, n, o)
        WHERE n IS DISTINCT FROM o
    LOOP
        IF v_ms NOT BETWEEN 0 AND 253370764800000 THEN
            RAISE EXCEPTION USING ERRCODE = 'TG007',
                MESSAGE = pg_catalog.format('approval %s: %s %s is not a time the store can read',
                                            NEW.id, v_column, v_ms);
        END IF;
    END LOOP;
    RETURN NEW;
END $$;

CREATE TRIGGER approvals_times_readable BEFORE INSERT OR UPDATE ON approvals
FOR EACH ROW EXECUTE FUNCTION toolgate_approval_times_readable();

-- Flow labels are never updated (0015), so a constraint checks only what
-- is written from now on.
ALTER TABLE flow_labels ADD CONSTRAINT flow_labels_set_at_readable
    CHECK (set_at <= 253370764800000) NOT VALID;

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
