-- A stream's head is its last row: appends no longer rewrite a head row.
--
-- Through 0007 the statement that inserted a decision also updated its
-- stream's row in decision_heads: a second row version and WAL record per
-- append, and a SECURITY DEFINER call with a pinned search path around it.
-- That kept 64 sidecars of one tenant at about 0.7x of a bare INSERT. Now
-- the primary key (tenant, stream, seq) refuses a second row at any seq,
-- so nobody forks or rewinds a chain, and the trigger only reads the row
-- before the new one: seq - 1 must exist and carry the new row's
-- prev_hash, so no role but the owner (see the end) leaves a gap or a
-- wrong link either.
--
-- The head table becomes decision_streams, the register of streams: one
-- row per stream, written when the stream is opened (with its link to the
-- previous stream) or by its first row when nobody opened it. Its seq and hash are the
-- position recorded then: seq 0 and the genesis hash for streams started
-- from now on, the head as of this migration for older ones. A stream's
-- head is its last row when that lies beyond the recorded position, and
-- `toolgate audit verify` requires every chain to reach the recorded
-- position. Removing a stream's newest rows is found by its signed
-- checkpoints (`toolgate audit checkpoint`), as removing rows and
-- rewinding the head row together always had to be.
--
-- The trigger runs with the inserting role's rights (a tenant sees its own
-- rows through row-level security) and names every relation and function
-- with this schema, so a temporary table cannot stand in for decisions;
-- only registering a new stream needs the owner's rights.
--
-- A sidecar of an earlier release still reads its stream's head from
-- decision_heads when it has lost track of it (after a failed append), so
-- decision_heads stays, as a view that computes each head; without it such
-- a sidecar would re-read a head that no longer moves and be refused until
-- restarted.
--
-- Custom SQLSTATEs raised here:
--   TG006  a row that does not continue its stream

ALTER TABLE decision_heads RENAME TO decision_streams;

-- Registers the stream of a first row nobody opened, when `p_genesis` is
-- the stream's unlinked genesis; true if the stream is (now) registered
-- with that genesis at seq 0.
CREATE FUNCTION toolgate_register_decision_stream(p_tenant text, p_stream text, p_genesis text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    IF toolgate_tenant_session() AND p_tenant IS DISTINCT FROM toolgate_current_tenant() THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decisions"';
    END IF;
    PERFORM FROM decision_streams
    WHERE tenant = p_tenant AND stream = p_stream AND seq = 0 AND hash = p_genesis;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF p_genesis IS DISTINCT FROM toolgate_stream_genesis(p_tenant, p_stream, NULL, NULL, NULL) THEN
        RETURN false;
    END IF;
    INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash, started_at)
    VALUES (p_tenant, p_stream, 0, repeat('0', 64), p_genesis,
            (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
    ON CONFLICT (tenant, stream) DO NOTHING;
    RETURN FOUND;
END $$;
REVOKE ALL ON FUNCTION toolgate_register_decision_stream(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate_register_decision_stream(text, text, text) TO toolgate_tenant;

-- The head a new stream's start document names: the previous stream's last
-- row, or its recorded position when it has no row beyond that.
CREATE OR REPLACE FUNCTION toolgate_open_decision_stream(p_tenant text, p_stream text, p_previous text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    pseq    bigint;
    phash   text;
    lseq    bigint;
    lhash   text;
    genesis text;
BEGIN
    IF toolgate_tenant_session() AND p_tenant IS DISTINCT FROM toolgate_current_tenant() THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decision_streams"';
    END IF;
    IF p_stream = 'legacy' THEN
        RAISE EXCEPTION USING ERRCODE = 'TG005', MESSAGE = 'stream name legacy is reserved';
    END IF;
    IF p_previous IS NOT NULL THEN
        SELECT seq, hash INTO pseq, phash FROM decision_streams
        WHERE tenant = p_tenant AND stream = p_previous;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TG005',
                MESSAGE = format('previous stream %s does not exist', p_previous);
        END IF;
        SELECT seq, hash INTO lseq, lhash FROM decisions
        WHERE tenant = p_tenant AND stream = p_previous ORDER BY seq DESC LIMIT 1;
        IF FOUND AND lseq > pseq THEN
            pseq := lseq;
            phash := lhash;
        END IF;
    END IF;
    genesis := toolgate_stream_genesis(p_tenant, p_stream, p_previous, pseq, phash);
    INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash, previous_stream,
                                previous_seq, previous_hash, started_at)
    VALUES (p_tenant, p_stream, 0, repeat('0', 64), genesis, p_previous, pseq, phash,
            (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    RETURN genesis;
END $$;

DO $migration$
BEGIN
    EXECUTE format('ALTER FUNCTION toolgate_register_decision_stream(text, text, text) '
                   'SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION toolgate_open_decision_stream(text, text, text) '
                   'SET search_path = %I, pg_temp', current_schema());

    -- The chain trigger, written out with this schema's name in it (%1$I).
    EXECUTE format($fn$
CREATE OR REPLACE FUNCTION %1$I.toolgate_chain_decision() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER
AS $body$
DECLARE
    rec       text;
    tail      text;
    last_seq  bigint;
    last_hash text;
BEGIN
    IF NEW.seq IS NOT NULL THEN
        IF NEW.seq > 1 THEN
            PERFORM FROM %1$I.decisions
            WHERE tenant OPERATOR(pg_catalog.=) NEW.tenant
              AND stream OPERATOR(pg_catalog.=) NEW.stream
              AND seq OPERATOR(pg_catalog.=) (NEW.seq OPERATOR(pg_catalog.-) 1)
              AND hash OPERATOR(pg_catalog.=) NEW.prev_hash;
            IF FOUND THEN
                RETURN NEW;
            END IF;
        ELSIF NEW.seq OPERATOR(pg_catalog.=) 1
              AND %1$I.toolgate_register_decision_stream(NEW.tenant, NEW.stream, NEW.prev_hash) THEN
            RETURN NEW;
        END IF;
        -- Another tenant's stream is refused as RLS would refuse the row,
        -- not reported as a chain position the caller could go looking for.
        IF %1$I.toolgate_tenant_session()
           AND NEW.tenant IS DISTINCT FROM %1$I.toolgate_current_tenant() THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                MESSAGE = 'new row violates row-level security policy for table "decisions"';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'TG006',
            MESSAGE = pg_catalog.format('decision seq %%s does not continue stream %%s',
                                        NEW.seq, NEW.stream);
    END IF;

    -- A row without seq (a sidecar of an earlier release): chained here,
    -- after the stream's last row, one such writer of a stream at a time.
    rec := '{"args_digest":' || to_json(NEW.args_digest)::text
        || CASE WHEN NEW.call_digest IS NULL THEN ''
                ELSE ',"call_digest":' || to_json(NEW.call_digest)::text END
        || ',"created_at_ms":' || NEW.created_at::text
        || ',"decision_id":' || to_json(NEW.decision_id)::text
        || CASE WHEN NEW.definition_digest IS NULL THEN ''
                ELSE ',"definition_digest":' || to_json(NEW.definition_digest)::text END
        || ',"matched_rule":' || COALESCE(to_json(NEW.matched_rule)::text, 'null')
        || ',"message":' || COALESCE(to_json(NEW.message)::text, 'null')
        || ',"policy_version":' || to_json(NEW.policy_version)::text
        || ',"reason":' || to_json(NEW.reason)::text
        || ',"risk":' || to_json(NEW.risk)::text
        || ',"run_id":' || to_json(NEW.run_id)::text
        || ',"step_id":' || to_json(NEW.step_id)::text
        || ',"tool":' || to_json(NEW.tool)::text
        || ',"verdict":' || to_json(NEW.verdict)::text
        || '}';
    IF NEW.stream = 'legacy' THEN
        tail := ',"tenant":' || to_json(NEW.tenant)::text || ',"v":1}';
    ELSE
        tail := ',"stream":' || to_json(NEW.stream)::text
            || ',"tenant":' || to_json(NEW.tenant)::text || ',"v":2}';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(
        pg_catalog.hashtextextended('toolgate.decisions/' || NEW.tenant || '/' || NEW.stream, 0));
    SELECT seq, hash INTO last_seq, last_hash FROM %1$I.decision_streams
    WHERE tenant = NEW.tenant AND stream = NEW.stream;
    IF NOT FOUND THEN
        last_seq := 0;
        last_hash := %1$I.toolgate_stream_genesis(NEW.tenant, NEW.stream, NULL, NULL, NULL);
        PERFORM %1$I.toolgate_register_decision_stream(NEW.tenant, NEW.stream, last_hash);
    END IF;
    SELECT d.seq, d.hash INTO last_seq, last_hash FROM (
        (SELECT seq, hash FROM %1$I.decisions
         WHERE tenant = NEW.tenant AND stream = NEW.stream AND seq > last_seq
         ORDER BY seq DESC LIMIT 1)
        UNION ALL SELECT last_seq, last_hash
    ) d ORDER BY d.seq DESC LIMIT 1;
    NEW.seq := last_seq + 1;
    NEW.prev_hash := last_hash;
    NEW.hash := encode(sha256(convert_to('{"prev_hash":"' || last_hash || '","record":' || rec
        || ',"seq":' || NEW.seq::text || tail, 'UTF8')), 'hex');
    RETURN NEW;
END
$body$
$fn$, current_schema());

    -- The owner of decisions skips the link check (not the registration of
    -- a stream's first row, nor the chaining of a row without seq): it
    -- could disable the trigger or edit rows anyway, so the check protects
    -- nothing from it and only costs its appends (64 writers: 0.87x of a
    -- bare INSERT without the check, about 0.77x with it). Its rows still
    -- cannot share a seq (the primary key), and `toolgate audit verify`
    -- recomputes every link. Every other role, tenant roles above all, is
    -- checked.
    EXECUTE format('DROP TRIGGER decisions_chain ON %1$I.decisions', current_schema());
    EXECUTE format('CREATE TRIGGER decisions_chain BEFORE INSERT ON %1$I.decisions '
                   'FOR EACH ROW WHEN (NEW.seq IS NULL OR NEW.seq = 1 OR current_user <> %2$L) '
                   'EXECUTE FUNCTION %1$I.toolgate_chain_decision()',
                   current_schema(),
                   (SELECT pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class c
                    WHERE c.oid = pg_catalog.to_regclass(pg_catalog.quote_ident(current_schema())
                                                         || '.decisions')));
END
$migration$;

-- Heads as earlier releases read them: the register row, or the stream's
-- last row when that lies beyond it. Read with the caller's rights, so a
-- tenant sees its own streams only.
CREATE VIEW decision_heads WITH (security_invoker = true) AS
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
GRANT SELECT ON decision_heads TO toolgate_tenant;
