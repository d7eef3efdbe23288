-- Decision chains per stream, and signed checkpoints of their heads.
--
-- A decision now belongs to a chain keyed by (tenant, stream). A stream is
-- one sidecar instance (`{pod}/{uuidv7}`, chosen at sidecar start), so
-- sidecars of one tenant never lock the same head row: the per-tenant head
-- serialised every append of a tenant. Rows and heads written before this
-- migration form the stream `legacy` of their tenant and keep the hashes
-- they were written with (stream `legacy` hashes the v1 document, which has
-- no stream key). The column default is `legacy` too, so a sidecar of the
-- previous release keeps appending to its tenant's legacy chain during a
-- rolling upgrade.
--
-- Every other stream hashes the v2 document (crates/toolgate-store/src/
-- decisions.rs, `hashed_document`): the v1 keys plus `"stream"`, and `"v":2`.
-- Its first row's prev_hash is not zeros but the hash of the stream's start
-- document, which names the head of the previous stream the sidecar knew
-- (`previous_stream`, `previous_seq`, `previous_hash` of the head row), so a
-- restart is linked into the history and that link is covered by the chain.
--
-- Custom SQLSTATEs raised here:
--   TG005  opening a stream with a reserved name or an unknown previous stream

ALTER TABLE decisions ADD COLUMN stream TEXT NOT NULL DEFAULT 'legacy'
    CHECK (stream <> '' AND length(stream) <= 1024);
ALTER TABLE decisions DROP CONSTRAINT decisions_pkey;
ALTER TABLE decisions ADD PRIMARY KEY (tenant, stream, seq);

ALTER TABLE decision_heads ADD COLUMN stream TEXT NOT NULL DEFAULT 'legacy';
ALTER TABLE decision_heads ADD COLUMN previous_stream TEXT;
ALTER TABLE decision_heads ADD COLUMN previous_seq BIGINT;
ALTER TABLE decision_heads ADD COLUMN previous_hash TEXT;
ALTER TABLE decision_heads ADD COLUMN started_at BIGINT;
ALTER TABLE decision_heads DROP CONSTRAINT decision_heads_pkey;
ALTER TABLE decision_heads ADD PRIMARY KEY (tenant, stream);

-- The prev_hash of a stream's first row: zeros for `legacy` (as before),
-- else the SHA-256 of the RFC 8785 canonical start document
-- {"previous":null|{"hash","seq","stream"},"stream","tenant",
--  "type":"toolgate.stream.start","v":2}.
CREATE FUNCTION toolgate_stream_genesis(p_tenant text, p_stream text, p_previous_stream text,
                                        p_previous_seq bigint, p_previous_hash text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_stream = 'legacy' THEN repeat('0', 64) ELSE
        encode(sha256(convert_to('{"previous":'
            || CASE WHEN p_previous_stream IS NULL THEN 'null'
                    ELSE '{"hash":' || to_json(p_previous_hash)::text
                        || ',"seq":' || p_previous_seq::text
                        || ',"stream":' || to_json(p_previous_stream)::text || '}' END
            || ',"stream":' || to_json(p_stream)::text
            || ',"tenant":' || to_json(p_tenant)::text
            || ',"type":"toolgate.stream.start","v":2}', 'UTF8')), 'hex')
    END
$$;

-- The chain trigger, restated for streams: it locks and advances the head
-- of (tenant, stream) only, so appends of different streams never wait for
-- each other. A stream nobody opened is seeded here with no previous link.
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
        -- Locks this stream's head row until commit.
        UPDATE decision_heads SET seq = seq + 1, prev_hash = hash,
            hash = encode(sha256(convert_to('{"prev_hash":"' || hash || '","record":' || rec
                || ',"seq":' || (seq + 1)::text || tail, 'UTF8')), 'hex')
        WHERE tenant = NEW.tenant AND stream = NEW.stream
        RETURNING seq, prev_hash, hash INTO head_seq, head_prev, head_hash;
        EXIT WHEN FOUND;
        -- First append to a stream nobody opened: a chain of zero rows.
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

-- Opens a stream whose start document names the current head of
-- p_previous (read here, under the definer's rights, so a caller names the
-- previous stream but cannot make up its seq or hash). Returns the genesis
-- hash. A tenant session may only open streams of its own tenant; nobody
-- may reopen (reset) an existing stream.
CREATE FUNCTION toolgate_open_decision_stream(p_tenant text, p_stream text, p_previous text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    pseq    bigint;
    phash   text;
    genesis text;
BEGIN
    IF toolgate_tenant_session() AND p_tenant IS DISTINCT FROM toolgate_current_tenant() THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decision_heads"';
    END IF;
    IF p_stream = 'legacy' THEN
        RAISE EXCEPTION USING ERRCODE = 'TG005', MESSAGE = 'stream name legacy is reserved';
    END IF;
    IF p_previous IS NOT NULL THEN
        SELECT seq, hash INTO pseq, phash FROM decision_heads
        WHERE tenant = p_tenant AND stream = p_previous;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TG005',
                MESSAGE = format('previous stream %s does not exist', p_previous);
        END IF;
    END IF;
    genesis := toolgate_stream_genesis(p_tenant, p_stream, p_previous, pseq, phash);
    INSERT INTO decision_heads (tenant, stream, seq, prev_hash, hash, previous_stream,
                                previous_seq, previous_hash, started_at)
    VALUES (p_tenant, p_stream, 0, repeat('0', 64), genesis, p_previous, pseq, phash,
            (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    RETURN genesis;
END $$;
REVOKE ALL ON FUNCTION toolgate_open_decision_stream(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate_open_decision_stream(text, text, text) TO toolgate_tenant;

-- Signed checkpoints of stream heads: a DSSE envelope over
-- {tenant, stream, seq, hash, at} signed by the operator's key
-- (`toolgate audit checkpoint`). Written by the admin or controller role;
-- tenants may read their own. One row per signed position.
CREATE TABLE checkpoints (
    id         BIGSERIAL PRIMARY KEY,
    tenant     TEXT NOT NULL,
    stream     TEXT NOT NULL,
    seq        BIGINT NOT NULL CHECK (seq >= 0),
    hash       TEXT NOT NULL,
    at         BIGINT NOT NULL,
    keyid      TEXT NOT NULL,
    envelope   TEXT NOT NULL,
    UNIQUE (tenant, stream, seq)
);

GRANT SELECT ON checkpoints TO toolgate_tenant;
ALTER TABLE checkpoints ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON checkpoints
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_read ON checkpoints FOR SELECT
    USING (tenant = (SELECT toolgate_current_tenant()));

-- Replacing a function drops its settings: pin the search paths.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION toolgate_chain_decision() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION toolgate_stream_genesis(text, text, text, bigint, text) '
                   'SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION toolgate_open_decision_stream(text, text, text) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
