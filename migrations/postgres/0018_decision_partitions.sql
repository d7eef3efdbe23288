-- The decision log partitioned by month of created_at (#45).
--
-- A busy tenant writes tens of millions of decisions a day. Archiving
-- (0017) deleted a stream's archived rows one by one; now the table is
-- partitioned by range of created_at, one partition per calendar month
-- (UTC), so a past month whose rows are all archived is dropped whole
-- (`Decisions::drop_archived_partitions`); only a month that also holds
-- rows not archived yet has its archived rows deleted one by one.
--
-- The existing table is not copied: it becomes the first partition (every
-- created_at up to the end of the month this migration runs in, or of its
-- newest row if later), so the migration takes one scan and one index
-- build, not a rewrite. A default partition takes rows no monthly
-- partition covers (a writer's clock far ahead, a month nobody created),
-- so an append never fails for want of a partition; such rows are pruned
-- row by row. `toolgate_ensure_decision_partitions` creates the months
-- ahead; the owner's store calls it when it opens, the controller each
-- checkpoint pass, archiving each run.
--
-- One row per seq. A partitioned table's unique indexes must contain the
-- partition key, so the primary key becomes (tenant, stream, seq,
-- created_at), which alone would let two rows share a seq at different
-- times: a fork. So the trigger now runs for the owner's rows too
-- (through 0017 its rows of seq > 1 skipped it), and the trigger and the
-- tenant append functions call toolgate_stream_continues: under a transaction-scoped
-- advisory lock of the stream, no row may be at that seq or beyond, so a
-- second row at a seq already taken is refused (TG006, where the key said
-- 23505); a tenant's row must also continue the row at seq - 1, as before.
-- The lock is only sound under READ COMMITTED (each statement sees what
-- the lock's previous holder committed), so an append at another
-- isolation level is refused. The key names the tenant and the stream,
-- whose name ends in a random nonce (sidecar streams are POD/UUIDv7)
-- that another tenant cannot read, so
-- nobody can hold a lock they do not already own.
--
-- Custom SQLSTATEs raised here: TG006, as in 0008.

-- ---- months ----------------------------------------------------------------

-- The first millisecond of the UTC calendar month `p_months` after the one
-- holding `p_ms`.
CREATE FUNCTION toolgate_decision_month(p_ms bigint, p_months integer) RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (EXTRACT(epoch FROM pg_catalog.date_trunc('month',
                pg_catalog.timezone('UTC', pg_catalog.to_timestamp(p_ms / 1000.0)))
            + pg_catalog.make_interval(months => p_months)) * 1000)::bigint
$$;

-- Creates the partitions of the current month and the `p_months_ahead`
-- after it that do not exist yet; returns how many it created. A month
-- the first partition (the table before this migration) overlaps, or
-- whose rows already sit in the default partition, is left to them.
CREATE FUNCTION toolgate_ensure_decision_partitions(p_months_ahead integer) RETURNS integer
LANGUAGE plpgsql SECURITY INVOKER
AS $$
DECLARE
    now_ms bigint := (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint;
    lo     bigint;
    hi     bigint;
    name   text;
    made   integer := 0;
    -- The schema of decisions (this function's search path pins
    -- pg_catalog first, so current_schema() is not it).
    home   text := (SELECT n.nspname FROM pg_catalog.pg_class c
                    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                    WHERE c.oid = 'decisions'::regclass);
BEGIN
    FOR i IN 0..GREATEST(p_months_ahead, 0) LOOP
        lo := toolgate_decision_month(now_ms, i);
        hi := toolgate_decision_month(now_ms, i + 1);
        name := 'decisions_' || pg_catalog.to_char(
            pg_catalog.timezone('UTC', pg_catalog.to_timestamp(lo / 1000.0)), 'YYYYMM');
        CONTINUE WHEN pg_catalog.to_regclass(
            pg_catalog.quote_ident(home) || '.' || pg_catalog.quote_ident(name)) IS NOT NULL;
        BEGIN
            EXECUTE pg_catalog.format(
                'CREATE TABLE %1$I.%2$I PARTITION OF %1$I.decisions FOR VALUES FROM (%3$s) TO (%4$s)',
                home, name, lo, hi);
            made := made + 1;
        EXCEPTION WHEN invalid_object_definition OR check_violation THEN
            NULL;
        END;
    END LOOP;
    RETURN made;
END $$;

REVOKE ALL ON FUNCTION toolgate_decision_month(bigint, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION toolgate_ensure_decision_partitions(integer) FROM PUBLIC;

-- ---- the table ---------------------------------------------------------------

ALTER TABLE decisions RENAME TO decisions_before_partitioning;
-- Its key (tenant, stream, seq) gives way to the parent's, which attaching
-- builds on it.
ALTER TABLE decisions_before_partitioning DROP CONSTRAINT decisions_pkey;
DROP TRIGGER decisions_chain ON decisions_before_partitioning;
-- Reached only through the parent from now on: its policies apply there.
DROP POLICY toolgate_admin ON decisions_before_partitioning;
DROP POLICY toolgate_tenant_rows ON decisions_before_partitioning;
REVOKE ALL ON decisions_before_partitioning FROM toolgate_tenant;

CREATE TABLE decisions (LIKE decisions_before_partitioning
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)
    PARTITION BY RANGE (created_at);
ALTER TABLE decisions ADD PRIMARY KEY (tenant, stream, seq, created_at);

DO $migration$
DECLARE
    upper bigint;
BEGIN
    SELECT toolgate_decision_month(GREATEST(
               (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint,
               COALESCE(pg_catalog.max(created_at), 0)), 1)
    INTO upper FROM decisions_before_partitioning;
    EXECUTE pg_catalog.format(
        'ALTER TABLE %1$I.decisions ATTACH PARTITION %1$I.decisions_before_partitioning '
        'FOR VALUES FROM (MINVALUE) TO (%2$s)', current_schema(), upper);
END
$migration$;
CREATE TABLE decisions_default PARTITION OF decisions DEFAULT;

ALTER TABLE decisions ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON decisions
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON decisions
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));
GRANT SELECT, INSERT ON decisions TO toolgate_tenant;

-- The compatibility view of 0008 named the old table; it names this one.
CREATE OR REPLACE VIEW decision_heads WITH (security_invoker = true) AS
SELECT s.tenant, s.stream,
       CASE WHEN l.seq > s.seq THEN l.seq ELSE s.seq END AS seq,
       CASE WHEN l.seq > s.seq THEN l.prev_hash ELSE s.prev_hash END AS prev_hash,
       CASE WHEN l.seq > s.seq THEN l.hash ELSE s.hash END AS hash,
       s.previous_stream, s.previous_seq, s.previous_hash, s.started_at
FROM decision_streams s
LEFT JOIN LATERAL (
    SELECT d.seq, d.prev_hash, d.hash FROM decisions d
    WHERE d.tenant = s.tenant AND d.stream = s.stream
    ORDER BY d.seq DESC LIMIT 1
) l ON true;

-- ---- one row per seq -----------------------------------------------------------

-- True when a row at `p_seq` chained on `p_prev_hash` may join the
-- stream: no row is at `p_seq` or beyond, and with `p_link` (beyond seq 1)
-- the row at `p_seq` - 1 holds `p_prev_hash`. Holds the stream's append
-- lock until the transaction ends (see the header).
CREATE FUNCTION toolgate_stream_continues(p_tenant text, p_stream text, p_seq bigint,
                                          p_prev_hash text, p_link boolean)
RETURNS boolean
LANGUAGE plpgsql SECURITY INVOKER
AS $$
DECLARE
    lseq  bigint;
    lhash text;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_transaction_state',
            MESSAGE = 'decisions are appended in READ COMMITTED transactions only';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(
        'toolgate.decisions/' || p_tenant || '/' || p_stream, 0::bigint));
    SELECT seq, hash INTO lseq, lhash FROM decisions
    WHERE tenant = p_tenant AND stream = p_stream AND seq >= p_seq - 1
    ORDER BY seq DESC LIMIT 1;
    IF FOUND AND lseq >= p_seq THEN
        RETURN false;
    END IF;
    IF p_seq <= 1 OR NOT p_link THEN
        RETURN true;
    END IF;
    RETURN FOUND AND lseq = p_seq - 1 AND lhash = p_prev_hash;
END $$;

REVOKE ALL ON FUNCTION toolgate_stream_continues(text, text, bigint, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate_stream_continues(text, text, bigint, text, boolean)
    TO toolgate_tenant;

-- TG_ARGV[0] is the tables' owner, whose own rows may leave a gap, as
-- they always could: a writer that missed a cut of the newest rows goes
-- on after the seq it wrote, and the cut shows as missing rows.
CREATE OR REPLACE FUNCTION toolgate_chain_decision() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER
AS $$
DECLARE
    rec       text;
    tail      text;
    last_seq  bigint;
    last_hash text;
BEGIN
    IF NEW.seq IS NOT NULL THEN
        IF NEW.seq > 1 THEN
            IF toolgate_stream_continues(NEW.tenant, NEW.stream, NEW.seq, NEW.prev_hash,
                                         current_user <> TG_ARGV[0]) THEN
                RETURN NEW;
            END IF;
        ELSIF NEW.seq = 1
              AND toolgate_stream_continues(NEW.tenant, NEW.stream, 1, NEW.prev_hash, true)
              AND toolgate_register_decision_stream(NEW.tenant, NEW.stream, NEW.prev_hash) THEN
            RETURN NEW;
        END IF;
        -- Another tenant's stream is refused as RLS would refuse the row,
        -- not reported as a chain position the caller could go looking for.
        IF toolgate_tenant_session() AND NEW.tenant IS DISTINCT FROM toolgate_current_tenant() THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                MESSAGE = 'new row violates row-level security policy for table "decisions"';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'TG006',
            MESSAGE = pg_catalog.format('decision seq %s does not continue stream %s',
                                        NEW.seq, NEW.stream);
    END IF;

    -- A row without seq (a sidecar of an earlier release): chained here,
    -- after the stream's last row, one such writer of a stream at a time.
    rec := '{"args_digest":' || pg_catalog.to_json(NEW.args_digest)::text
        || CASE WHEN NEW.call_digest IS NULL THEN ''
                ELSE ',"call_digest":' || pg_catalog.to_json(NEW.call_digest)::text END
        || ',"created_at_ms":' || NEW.created_at::text
        || ',"decision_id":' || pg_catalog.to_json(NEW.decision_id)::text
        || CASE WHEN NEW.definition_digest IS NULL THEN ''
                ELSE ',"definition_digest":' || pg_catalog.to_json(NEW.definition_digest)::text END
        || ',"matched_rule":' || COALESCE(pg_catalog.to_json(NEW.matched_rule)::text, 'null')
        || ',"message":' || COALESCE(pg_catalog.to_json(NEW.message)::text, 'null')
        || ',"policy_version":' || pg_catalog.to_json(NEW.policy_version)::text
        || ',"reason":' || pg_catalog.to_json(NEW.reason)::text
        || ',"risk":' || pg_catalog.to_json(NEW.risk)::text
        || ',"run_id":' || pg_catalog.to_json(NEW.run_id)::text
        || ',"step_id":' || pg_catalog.to_json(NEW.step_id)::text
        || ',"tool":' || pg_catalog.to_json(NEW.tool)::text
        || ',"verdict":' || pg_catalog.to_json(NEW.verdict)::text
        || '}';
    IF NEW.stream = 'legacy' THEN
        tail := ',"tenant":' || pg_catalog.to_json(NEW.tenant)::text || ',"v":1}';
    ELSE
        tail := ',"stream":' || pg_catalog.to_json(NEW.stream)::text
            || ',"tenant":' || pg_catalog.to_json(NEW.tenant)::text || ',"v":2}';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(
        'toolgate.decisions/' || NEW.tenant || '/' || NEW.stream, 0::bigint));
    SELECT seq, hash INTO last_seq, last_hash FROM decision_streams
    WHERE tenant = NEW.tenant AND stream = NEW.stream;
    IF NOT FOUND THEN
        last_seq := 0;
        last_hash := toolgate_stream_genesis(NEW.tenant, NEW.stream, NULL, NULL, NULL);
        PERFORM toolgate_register_decision_stream(NEW.tenant, NEW.stream, last_hash);
    END IF;
    SELECT d.seq, d.hash INTO last_seq, last_hash FROM (
        (SELECT seq, hash FROM decisions
         WHERE tenant = NEW.tenant AND stream = NEW.stream AND seq > last_seq
         ORDER BY seq DESC LIMIT 1)
        UNION ALL SELECT last_seq, last_hash
    ) d ORDER BY d.seq DESC LIMIT 1;
    NEW.seq := last_seq + 1;
    NEW.prev_hash := last_hash;
    NEW.hash := pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(
        '{"prev_hash":"' || last_hash || '","record":' || rec || ',"seq":' || NEW.seq::text || tail,
        'UTF8')), 'hex');
    RETURN NEW;
END $$;

-- Every row but those of seq > 1 the tenant append functions insert with
-- the owner's rights (they check their first row themselves, and derive
-- the rest from it): the owner's own rows included, which through 0017
-- skipped it, the primary key keeping them one per seq.
DO $migration$
BEGIN
    EXECUTE pg_catalog.format(
        'CREATE TRIGGER decisions_chain BEFORE INSERT ON %1$I.decisions '
        'FOR EACH ROW WHEN (NEW.seq IS NULL OR NEW.seq = 1 OR current_user <> %2$L '
        'OR session_user = current_user) '
        'EXECUTE FUNCTION %1$I.toolgate_chain_decision(%2$L)',
        current_schema(),
        (SELECT pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class c
         WHERE c.oid = pg_catalog.to_regclass(pg_catalog.quote_ident(current_schema())
                                              || '.decisions')));
END
$migration$;

-- The tenant append functions check the tenant, then their first row
-- under the stream's lock, then insert (through 0017 the insert's own
-- condition checked the first link, and the primary key refused a second
-- row at a seq).
CREATE OR REPLACE FUNCTION toolgate_append_decision(
    p_tenant text, p_decision_id text, p_run_id text, p_step_id text, p_tool text,
    p_verdict text, p_reason text, p_message text, p_matched_rule text,
    p_policy_version text, p_risk text, p_args_digest text, p_created_at bigint,
    p_call_digest text, p_definition_digest text, p_stream text, p_seq bigint,
    p_prev_hash text, p_hash text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    IF p_seq IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = 'toolgate_append_decision needs the row''s seq';
    END IF;
    PERFORM FROM tenant_roles WHERE role = session_user AND tenant = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decisions"';
    END IF;
    IF NOT toolgate_stream_continues(p_tenant, p_stream, p_seq, p_prev_hash, true) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG006',
            MESSAGE = pg_catalog.format('decision seq %s does not continue stream %s',
                                        p_seq, p_stream);
    END IF;
    INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, verdict, reason,
                           message, matched_rule, policy_version, risk, args_digest,
                           created_at, call_digest, definition_digest, stream, seq,
                           prev_hash, hash)
    VALUES (p_tenant, p_decision_id, p_run_id, p_step_id, p_tool, p_verdict, p_reason,
            p_message, p_matched_rule, p_policy_version, p_risk, p_args_digest,
            p_created_at, p_call_digest, p_definition_digest, p_stream, p_seq,
            p_prev_hash, p_hash);
END $$;

CREATE OR REPLACE FUNCTION toolgate_append_decisions(
    p_tenant text, p_stream text, p_seq bigint, p_prev_hash text,
    p_decision_id text[], p_run_id text[], p_step_id text[], p_tool text[],
    p_verdict text[], p_reason text[], p_message text[], p_matched_rule text[],
    p_policy_version text[], p_risk text[], p_args_digest text[], p_created_at bigint[],
    p_call_digest text[], p_definition_digest text[], p_hash text[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    n integer := COALESCE(pg_catalog.cardinality(p_hash), 0);
    inserted bigint;
BEGIN
    IF p_seq IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = 'toolgate_append_decisions needs the first row''s seq';
    END IF;
    IF n = 0 OR pg_catalog.array_ndims(p_hash) <> 1 OR pg_catalog.array_lower(p_hash, 1) <> 1
       OR EXISTS (
            SELECT FROM pg_catalog.unnest(ARRAY[
                pg_catalog.cardinality(p_decision_id), pg_catalog.cardinality(p_run_id),
                pg_catalog.cardinality(p_step_id), pg_catalog.cardinality(p_tool),
                pg_catalog.cardinality(p_verdict), pg_catalog.cardinality(p_reason),
                pg_catalog.cardinality(p_message), pg_catalog.cardinality(p_matched_rule),
                pg_catalog.cardinality(p_policy_version), pg_catalog.cardinality(p_risk),
                pg_catalog.cardinality(p_args_digest), pg_catalog.cardinality(p_created_at),
                pg_catalog.cardinality(p_call_digest),
                pg_catalog.cardinality(p_definition_digest)]) AS c(len)
            WHERE c.len IS DISTINCT FROM n) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'toolgate_append_decisions needs one element per row in every array, '
                      'and at least one row';
    END IF;
    PERFORM FROM tenant_roles WHERE role = session_user AND tenant = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decisions"';
    END IF;
    IF NOT toolgate_stream_continues(p_tenant, p_stream, p_seq, p_prev_hash, true) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG006',
            MESSAGE = pg_catalog.format('decision seq %s does not continue stream %s',
                                        p_seq, p_stream);
    END IF;
    INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, verdict, reason,
                           message, matched_rule, policy_version, risk, args_digest,
                           created_at, call_digest, definition_digest, stream, seq,
                           prev_hash, hash)
    SELECT p_tenant, u.decision_id, u.run_id, u.step_id, u.tool, u.verdict, u.reason,
           u.message, u.matched_rule, u.policy_version, u.risk, u.args_digest,
           u.created_at, u.call_digest, u.definition_digest, p_stream, p_seq + u.ord - 1,
           CASE WHEN u.ord = 1 THEN p_prev_hash ELSE p_hash[u.ord - 1] END,
           u.hash
    -- ROWS FROM of one-array unnests: what the many-array form expands to,
    -- which the parser only does for the unqualified name.
    FROM ROWS FROM (pg_catalog.unnest(p_decision_id), pg_catalog.unnest(p_run_id),
                    pg_catalog.unnest(p_step_id), pg_catalog.unnest(p_tool),
                    pg_catalog.unnest(p_verdict), pg_catalog.unnest(p_reason),
                    pg_catalog.unnest(p_message), pg_catalog.unnest(p_matched_rule),
                    pg_catalog.unnest(p_policy_version), pg_catalog.unnest(p_risk),
                    pg_catalog.unnest(p_args_digest), pg_catalog.unnest(p_created_at),
                    pg_catalog.unnest(p_call_digest), pg_catalog.unnest(p_definition_digest),
                    pg_catalog.unnest(p_hash))
         WITH ORDINALITY AS u(decision_id, run_id, step_id, tool, verdict, reason, message,
                              matched_rule, policy_version, risk, args_digest, created_at,
                              call_digest, definition_digest, hash, ord);
    GET DIAGNOSTICS inserted = ROW_COUNT;
    RETURN inserted;
END $$;

SELECT toolgate_ensure_decision_partitions(2);

-- Pin every toolgate function's search path, as 0012 does (CREATE OR
-- REPLACE dropped the settings of those replaced here).
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
