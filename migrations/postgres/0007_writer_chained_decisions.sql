-- Decisions chained by their writer, linked by the database.
--
-- Until now the chain trigger built each row's canonical document and
-- hashed it in PL/pgSQL, about a sixth of an append's database time
-- (pgbench, 64 clients: 0.64x of a bare INSERT, 0.76x without it). A
-- sidecar now computes seq, prev_hash and hash itself (the same document,
-- crates/toolgate-store/src/decisions/chain.rs) and the trigger only
-- checks that the row continues its stream: seq is the head's seq + 1 and
-- prev_hash is the head's hash, in the same statement that advances the
-- head. So the database still refuses a fork, a gap or a rewind whoever
-- inserts. The hash a writer supplies is not recomputed here: a row whose
-- hash does not match its content is found by `toolgate audit verify`,
-- which recomputes every hash, as it finds any later edit.
--
-- A row inserted without seq (a sidecar of an earlier release, during a
-- rolling upgrade) is still chained by the database as before.
--
-- Custom SQLSTATEs raised here:
--   TG006  a row that does not continue its stream's head

CREATE OR REPLACE FUNCTION toolgate_chain_decision() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    rec       text;
    tail      text;
    head_seq  bigint;
    head_prev text;
    head_hash text;
BEGIN
    -- No tenant check here (see 0004): the decisions RLS WITH CHECK runs
    -- after this trigger and the head update rolls back with the statement.
    IF NEW.seq IS NOT NULL THEN
        -- Locks this stream's head row until commit, as below.
        UPDATE decision_heads SET seq = NEW.seq, prev_hash = NEW.prev_hash, hash = NEW.hash
        WHERE tenant = NEW.tenant AND stream = NEW.stream
          AND seq = NEW.seq - 1 AND hash = NEW.prev_hash;
        IF FOUND THEN
            RETURN NEW;
        END IF;
        IF NEW.seq = 1 THEN
            -- First row of a stream nobody opened: it starts unlinked.
            INSERT INTO decision_heads (tenant, stream, seq, prev_hash, hash, started_at)
            SELECT NEW.tenant, NEW.stream, 1, NEW.prev_hash, NEW.hash,
                   (extract(epoch FROM clock_timestamp()) * 1000)::bigint
            WHERE NEW.prev_hash = toolgate_stream_genesis(NEW.tenant, NEW.stream, NULL, NULL, NULL)
            ON CONFLICT (tenant, stream) DO NOTHING;
            IF FOUND THEN
                RETURN NEW;
            END IF;
        END IF;
        -- Another tenant's stream is refused as RLS would refuse the row,
        -- not reported as a chain position the caller could go looking for.
        IF toolgate_tenant_session() AND NEW.tenant IS DISTINCT FROM toolgate_current_tenant() THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                MESSAGE = 'new row violates row-level security policy for table "decisions"';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'TG006',
            MESSAGE = format('decision seq %s does not continue the head of stream %s',
                             NEW.seq, NEW.stream);
    END IF;

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
    LOOP
        UPDATE decision_heads SET seq = seq + 1, prev_hash = hash,
            hash = encode(sha256(convert_to('{"prev_hash":"' || hash || '","record":' || rec
                || ',"seq":' || (seq + 1)::text || tail, 'UTF8')), 'hex')
        WHERE tenant = NEW.tenant AND stream = NEW.stream
        RETURNING seq, prev_hash, hash INTO head_seq, head_prev, head_hash;
        EXIT WHEN FOUND;
        INSERT INTO decision_heads (tenant, stream, seq, prev_hash, hash, started_at)
        VALUES (NEW.tenant, NEW.stream, 0, repeat('0', 64),
                toolgate_stream_genesis(NEW.tenant, NEW.stream, NULL, NULL, NULL),
                (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
        ON CONFLICT (tenant, stream) DO NOTHING;
    END LOOP;
    NEW.seq := head_seq;
    NEW.prev_hash := head_prev;
    NEW.hash := head_hash;
    RETURN NEW;
END $$;

-- Replacing a function drops its settings: pin the search path.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION toolgate_chain_decision() SET search_path = %I, pg_temp',
                   current_schema());
END $$;
