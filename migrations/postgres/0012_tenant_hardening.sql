-- What a tenant role could still do around row-level security (issue 32).
--
-- 1. Owner's rights through a shadowing function. Where PUBLIC may create
--    objects in toolgate's schema (PostgreSQL 14 and older by default, and
--    databases pg_upgrade'd from them), a tenant could create, say,
--    to_json(text): an exact-typed overload beats pg_catalog's polymorphic
--    to_json(anyelement) whatever the search path, so an owner-rights
--    function calling to_json ran the tenant's code with the owner's rights.
--    Now: CREATE on the schema is revoked from PUBLIC (and the migration
--    refuses to go on while a tenant role owns objects in the schema or can
--    still create them), every function below calls built-ins as
--    pg_catalog.name, and every toolgate function pins
--    search_path = pg_catalog, <schema>, pg_temp (set at the end, after the
--    last CREATE OR REPLACE, which drops a function's settings).
-- 2. A stream name the store would refuse (control characters, over 1,024
--    bytes, blank) stopped every checkpoint pass. toolgate_valid_stream_name
--    is the store's rule in SQL; opening or registering a stream checks it
--    (TG005).
-- 3. A tenant could record a profile load naming another tenant's pod, and
--    so suppress that pod's own row: loads are now unique per namespace and
--    a tenant's loaded_by must name a pod of its own namespace.
-- 4. Provisioning and migrating waited on advisory keys any role can hold.
--    Provisioning now locks tenant_roles (in the store), and migrations
--    after this one lock toolgate_migration_lock: no tenant can lock either.
-- 5. One intent per decision per tenant, not per decision id across tenants.
-- 6. Approval wake-ups go to a channel per tenant whose name is derived
--    with a key only the owner can read (LISTEN needs no privilege, so the
--    name is the secret); a tenant learns its own channel and sends none.
-- 7. Process events are deduplicated per tenant.
--
-- Custom SQLSTATEs raised here:
--   TG005  a stream name the store would refuse (as for reserved names)

-- ---- 1. nobody but the owner creates objects in this schema --------------
DO $$
DECLARE
    planted text;
BEGIN
    EXECUTE pg_catalog.format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', current_schema());
    EXECUTE pg_catalog.format('REVOKE CREATE ON SCHEMA %I FROM toolgate_tenant', current_schema());
    IF pg_catalog.has_schema_privilege('toolgate_tenant', current_schema(), 'CREATE') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('tenant roles can create objects in schema %s', current_schema()),
            HINT = pg_catalog.format('have the schema''s owner run: REVOKE CREATE ON SCHEMA %I FROM PUBLIC',
                                     current_schema());
    END IF;
    -- Objects a tenant role already planted would still shadow built-ins
    -- for the owner's own unqualified SQL.
    SELECT pg_catalog.string_agg(o.what, ', ' ORDER BY o.what) INTO planted FROM (
        SELECT 'function ' || p.oid::regprocedure::text AS what, p.proowner AS owner
        FROM pg_catalog.pg_proc p WHERE p.pronamespace OPERATOR(pg_catalog.=) current_schema()::regnamespace
        UNION ALL
        SELECT 'operator ' || o.oid::regoperator::text, o.oprowner
        FROM pg_catalog.pg_operator o WHERE o.oprnamespace OPERATOR(pg_catalog.=) current_schema()::regnamespace
        UNION ALL
        SELECT 'relation ' || c.oid::regclass::text, c.relowner
        FROM pg_catalog.pg_class c WHERE c.relnamespace OPERATOR(pg_catalog.=) current_schema()::regnamespace
        UNION ALL
        SELECT 'type ' || t.oid::regtype::text, t.typowner
        FROM pg_catalog.pg_type t WHERE t.typnamespace OPERATOR(pg_catalog.=) current_schema()::regnamespace
    ) o
    WHERE o.owner IN (SELECT m.member FROM pg_catalog.pg_auth_members m
                      WHERE m.roleid OPERATOR(pg_catalog.=) 'toolgate_tenant'::regrole);
    IF planted IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('tenant roles own objects in schema %s: %s', current_schema(), planted),
            HINT = 'a tenant could only have created them to run code with other roles'' rights: '
                   'inspect and drop them, then migrate again';
    END IF;
END $$;

-- ---- 2. the store's stream-name rule, in SQL -------------------------------
-- The same rule as crates/toolgate-store/src/fields.rs `require` (which
-- toolgate_store::check_stream applies to stream names): not blank (Rust's
-- str::trim removes White_Space; every White_Space character that is not a
-- control character is listed), at most 1,024 bytes, no control character
-- (Unicode Cc: U+0001-U+001F, U+007F-U+009F; text cannot hold U+0000). The
-- store's differential test (tests/it/tenant_attacks.rs) runs both on the
-- same names: change them together.
CREATE FUNCTION toolgate_valid_stream_name(p_stream text) RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_stream IS NOT NULL
       AND pg_catalog.octet_length(p_stream) OPERATOR(pg_catalog.<=) 1024
       AND p_stream OPERATOR(pg_catalog.!~) '[\u0001-\u001f\u007f-\u009f]'
       AND p_stream OPERATOR(pg_catalog.!~)
           '^[ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$'
$$;

-- ---- 4. the migration lock ---------------------------------------------------
-- Migrating processes serialise on a lock of this table from now on, not
-- on sqlx's advisory key, which any role can take and hold. No tenant (no
-- role but the owner) has a privilege on it, so none can lock it.
CREATE TABLE toolgate_migration_lock (
    id BOOLEAN PRIMARY KEY DEFAULT true CHECK (id)
);
ALTER TABLE toolgate_migration_lock ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON toolgate_migration_lock FROM PUBLIC;

-- ---- 6. approval wake-up channels ------------------------------------------
-- The key the channel names are derived from. Owner only: no grants, and
-- row-level security with no policy for anyone the owner's rights do not
-- cover.
CREATE TABLE toolgate_secrets (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
ALTER TABLE toolgate_secrets ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON toolgate_secrets FROM PUBLIC;
INSERT INTO toolgate_secrets (name, value)
VALUES ('approval_channel_key',
        pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', '')
        || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));

-- The NOTIFY channel of p_tenant's approval wake-ups: `tg_approvals_` and
-- 40 hex digits of SHA-256 over the key and the tenant. A tenant session
-- gets its own channel only; any other session only if it may read every
-- approval anyway (the owner, a controller role granted SELECT).
CREATE FUNCTION toolgate_approval_channel(p_tenant text) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
AS $$
DECLARE
    k text;
BEGIN
    IF toolgate_tenant_session() THEN
        IF p_tenant IS DISTINCT FROM toolgate_current_tenant() THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                MESSAGE = 'not the approval channel of this session''s tenant';
        END IF;
    ELSIF NOT pg_catalog.has_table_privilege(session_user, 'approvals', 'SELECT') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'approval channels are for roles that may read approvals';
    END IF;
    SELECT s.value INTO k FROM toolgate_secrets s WHERE s.name = 'approval_channel_key';
    RETURN 'tg_approvals_' || pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
        pg_catalog.convert_to(k || '/' || p_tenant, 'UTF8')), 'hex'), 40);
END $$;

-- Wakes p_tenant's approval waiters with p_payload: for roles that may
-- change approvals (the owner, a controller role granted UPDATE), never for
-- a tenant session. toolgate_cancel_run, which a tenant calls for its own
-- runs, notifies its own tenant's channel itself.
CREATE FUNCTION toolgate_notify_approval(p_tenant text, p_payload text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
    IF toolgate_tenant_session()
       OR NOT pg_catalog.has_table_privilege(session_user, 'approvals', 'UPDATE') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'only roles that may change approvals send their wake-ups';
    END IF;
    PERFORM pg_catalog.pg_notify(toolgate_approval_channel(p_tenant), p_payload);
END $$;

-- ---- 3, 5, 7. keys per tenant ------------------------------------------------
DROP INDEX intents_one_per_decision;
CREATE UNIQUE INDEX intents_one_per_decision ON intents (tenant, decision_id);

ALTER TABLE policy_profiles DROP CONSTRAINT policy_profiles_policy_version_loaded_by_key;
ALTER TABLE policy_profiles ADD CONSTRAINT policy_profiles_namespace_version_loader_key
    UNIQUE (namespace, policy_version, loaded_by);
-- A tenant's sidecar records itself as `sidecar:{namespace}/{pod}`.
ALTER POLICY toolgate_tenant_rows ON policy_profiles
    WITH CHECK (namespace OPERATOR(pg_catalog.=) (SELECT toolgate_current_tenant())
                AND pg_catalog.starts_with(loaded_by, 'sidecar:' || namespace || '/'));

ALTER TABLE process_events DROP CONSTRAINT process_events_idempotency_key_key;
CREATE UNIQUE INDEX process_events_key_per_tenant
    ON process_events ((COALESCE(tenant, '')), idempotency_key);

-- ---- every function again, built-ins qualified -----------------------------

CREATE OR REPLACE FUNCTION toolgate_current_tenant() RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
AS $$
BEGIN
    RETURN (SELECT tenant FROM tenant_roles WHERE role = session_user);
END $$;

CREATE OR REPLACE FUNCTION toolgate_tenant_session() RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM tenant_roles WHERE role = session_user)
        OR EXISTS (
            SELECT 1 FROM pg_catalog.pg_auth_members m
            JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
            JOIN pg_catalog.pg_roles u ON u.oid = m.member
            WHERE g.rolname = 'toolgate_tenant' AND u.rolname = session_user
        );
END $$;

CREATE OR REPLACE FUNCTION toolgate_stream_genesis(p_tenant text, p_stream text,
                                                   p_previous_stream text,
                                                   p_previous_seq bigint, p_previous_hash text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_stream = 'legacy' THEN pg_catalog.repeat('0', 64) ELSE
        pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to('{"previous":'
            || CASE WHEN p_previous_stream IS NULL THEN 'null'
                    ELSE '{"hash":' || pg_catalog.to_json(p_previous_hash)::text
                        || ',"seq":' || p_previous_seq::text
                        || ',"stream":' || pg_catalog.to_json(p_previous_stream)::text || '}' END
            || ',"stream":' || pg_catalog.to_json(p_stream)::text
            || ',"tenant":' || pg_catalog.to_json(p_tenant)::text
            || ',"type":"toolgate.stream.start","v":2}', 'UTF8')), 'hex')
    END
$$;

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
            PERFORM FROM decisions
            WHERE tenant = NEW.tenant AND stream = NEW.stream AND seq = NEW.seq - 1
              AND hash = NEW.prev_hash;
            IF FOUND THEN
                RETURN NEW;
            END IF;
        ELSIF NEW.seq = 1 AND toolgate_register_decision_stream(NEW.tenant, NEW.stream, NEW.prev_hash) THEN
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

CREATE OR REPLACE FUNCTION toolgate_intent_forward_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF (NEW.id, NEW.tenant, NEW.run_id, NEW.step_id, NEW.tool, NEW.args_digest,
        NEW.call_digest, NEW.decision_id, NEW.risk, NEW.verification_probe, NEW.created_at)
       IS DISTINCT FROM
       (OLD.id, OLD.tenant, OLD.run_id, OLD.step_id, OLD.tool, OLD.args_digest,
        OLD.call_digest, OLD.decision_id, OLD.risk, OLD.verification_probe, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG001',
            MESSAGE = pg_catalog.format('intent %s: identifying columns cannot change', OLD.id);
    END IF;
    IF OLD.status <> 'pending' THEN
        IF NEW IS DISTINCT FROM OLD THEN
            RAISE EXCEPTION USING ERRCODE = 'TG001',
                MESSAGE = pg_catalog.format('intent %s is already %s', OLD.id, OLD.status);
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.effect_sent_at IS NOT NULL AND NEW.effect_sent_at IS DISTINCT FROM OLD.effect_sent_at THEN
        RAISE EXCEPTION USING ERRCODE = 'TG001',
            MESSAGE = pg_catalog.format('intent %s: effect_sent_at cannot change once set', OLD.id);
    END IF;
    IF NEW.status = 'pending' THEN
        IF NEW.detail IS DISTINCT FROM OLD.detail
           OR NEW.completed_at IS DISTINCT FROM OLD.completed_at THEN
            RAISE EXCEPTION USING ERRCODE = 'TG001',
                MESSAGE = pg_catalog.format('intent %s: a pending intent has no outcome', OLD.id);
        END IF;
    ELSIF NEW.completed_at IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'TG001',
            MESSAGE = pg_catalog.format('intent %s: an outcome needs completed_at', OLD.id);
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION toolgate_approval_consume_once() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF OLD.consumed_at IS NOT NULL AND NEW.consumed_at IS DISTINCT FROM OLD.consumed_at THEN
        RAISE EXCEPTION USING ERRCODE = 'TG002',
            MESSAGE = pg_catalog.format('approval %s was already consumed', OLD.id);
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION toolgate_high_water_up_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW IS DISTINCT FROM OLD
       AND ((NEW.namespace, NEW.profile) IS DISTINCT FROM (OLD.namespace, OLD.profile)
            OR NEW.sequence <= OLD.sequence) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG003',
            MESSAGE = pg_catalog.format('bundle high-water mark of %s/%s can only move up',
                                        OLD.namespace, OLD.profile);
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION toolgate_run_forward_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.tenant IS DISTINCT FROM OLD.tenant
       OR NEW.run_id IS DISTINCT FROM OLD.run_id
       OR NEW.started_at IS DISTINCT FROM OLD.started_at
       OR NEW.calls < OLD.calls
       OR NEW.high_risk_calls < OLD.high_risk_calls THEN
        RAISE EXCEPTION USING ERRCODE = 'TG004',
            MESSAGE = pg_catalog.format('run %s: counters only go up and the start is fixed',
                                        OLD.run_id);
    END IF;
    IF OLD.cancel_requested_at IS NOT NULL
       AND (NEW.cancel_requested_at IS DISTINCT FROM OLD.cancel_requested_at
            OR NEW.cancel_reason IS DISTINCT FROM OLD.cancel_reason
            OR NEW.cancelled_by IS DISTINCT FROM OLD.cancelled_by) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG004',
            MESSAGE = pg_catalog.format('run %s: a cancellation cannot be changed or withdrawn',
                                        OLD.run_id);
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION toolgate_provision_tenant(p_tenant text, p_role text, p_password text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    r pg_catalog.pg_roles%ROWTYPE;
    mapped text;
BEGIN
    SELECT tenant INTO mapped FROM tenant_roles WHERE role = p_role;
    IF mapped IS NOT NULL AND mapped <> p_tenant THEN
        RAISE EXCEPTION USING ERRCODE = 'unique_violation',
            MESSAGE = pg_catalog.format('role %s already belongs to tenant %s', p_role, mapped);
    END IF;
    SELECT * INTO r FROM pg_catalog.pg_roles WHERE rolname = p_role;
    IF FOUND THEN
        IF r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                MESSAGE = pg_catalog.format('role %s exists with privileges a tenant role must not have',
                                            p_role);
        END IF;
        EXECUTE pg_catalog.format('ALTER ROLE %I WITH LOGIN INHERIT PASSWORD %L', p_role, p_password);
    ELSE
        EXECUTE pg_catalog.format('CREATE ROLE %I WITH LOGIN INHERIT PASSWORD %L', p_role, p_password);
    END IF;
    EXECUTE pg_catalog.format('GRANT toolgate_tenant TO %I', p_role);
    IF pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CONNECT WITH GRANT OPTION') THEN
        EXECUTE pg_catalog.format('GRANT CONNECT ON DATABASE %I TO %I',
                                  pg_catalog.current_database(), p_role);
    ELSIF NOT pg_catalog.has_database_privilege(p_role, pg_catalog.current_database(), 'CONNECT') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('cannot grant CONNECT on database %s to %s',
                                        pg_catalog.current_database(), p_role);
    END IF;
    INSERT INTO tenant_roles (role, tenant, created_at)
    VALUES (p_role, p_tenant,
            (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint)
    ON CONFLICT (role) DO NOTHING;
END $$;

CREATE OR REPLACE FUNCTION toolgate_cancel_run(p_tenant text, p_run text, p_reason text, p_by text,
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
            MESSAGE = pg_catalog.format('cannot cancel a run of tenant %s', p_tenant);
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
                pg_catalog.json_build_object('reason', p_reason, 'by', p_by)::text, p_now);
        FOR v_id IN
            UPDATE approvals SET status = 'cancelled', resolved_at = p_now, resolved_by = p_by,
                                 reason = COALESCE(p_reason, 'run cancelled')
            WHERE tenant = p_tenant AND run_id = p_run AND status = 'pending'
            RETURNING id
        LOOP
            v_count := v_count + 1;
            INSERT INTO run_events (tenant, run_id, kind, subject_id, payload, created_at)
            VALUES (p_tenant, p_run, 'approval.cancelled', v_id,
                    pg_catalog.json_build_object('approval_id', v_id)::text, p_now);
            PERFORM pg_catalog.pg_notify(toolgate_approval_channel(p_tenant),
                                         p_tenant || '/' || v_id);
        END LOOP;
        PERFORM pg_catalog.pg_notify(toolgate_approval_channel(p_tenant),
                                     'run/' || p_tenant || '/' || p_run);
    ELSE
        SELECT r.cancel_requested_at INTO v_at FROM runs r
        WHERE r.tenant = p_tenant AND r.run_id = p_run;
    END IF;
    RETURN QUERY SELECT v_at, v_newly, v_count;
END $$;

CREATE OR REPLACE FUNCTION toolgate_register_decision_stream(p_tenant text, p_stream text,
                                                             p_genesis text)
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
    IF NOT toolgate_valid_stream_name(p_stream) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG005',
            MESSAGE = 'stream name must be 1-1024 bytes, not blank, without control characters';
    END IF;
    IF p_genesis IS DISTINCT FROM toolgate_stream_genesis(p_tenant, p_stream, NULL, NULL, NULL) THEN
        RETURN false;
    END IF;
    INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash, started_at)
    VALUES (p_tenant, p_stream, 0, pg_catalog.repeat('0', 64), p_genesis,
            (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint)
    ON CONFLICT (tenant, stream) DO NOTHING;
    RETURN FOUND;
END $$;

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
    IF NOT toolgate_valid_stream_name(p_stream) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG005',
            MESSAGE = 'stream name must be 1-1024 bytes, not blank, without control characters';
    END IF;
    IF p_previous IS NOT NULL THEN
        SELECT seq, hash INTO pseq, phash FROM decision_streams
        WHERE tenant = p_tenant AND stream = p_previous;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'TG005',
                MESSAGE = pg_catalog.format('previous stream %s does not exist', p_previous);
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
    VALUES (p_tenant, p_stream, 0, pg_catalog.repeat('0', 64), genesis, p_previous, pseq, phash,
            (EXTRACT(epoch FROM pg_catalog.clock_timestamp()) * 1000)::bigint);
    RETURN genesis;
END $$;

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
    INSERT INTO decisions (tenant, decision_id, run_id, step_id, tool, verdict, reason,
                           message, matched_rule, policy_version, risk, args_digest,
                           created_at, call_digest, definition_digest, stream, seq,
                           prev_hash, hash)
    SELECT p_tenant, p_decision_id, p_run_id, p_step_id, p_tool, p_verdict, p_reason,
           p_message, p_matched_rule, p_policy_version, p_risk, p_args_digest,
           p_created_at, p_call_digest, p_definition_digest, p_stream, p_seq,
           p_prev_hash, p_hash
    FROM tenant_roles r
    WHERE r.role = session_user AND r.tenant = p_tenant
      AND (p_seq <= 1 OR EXISTS (
            SELECT FROM decisions d
            WHERE d.tenant = p_tenant AND d.stream = p_stream AND d.seq = p_seq - 1
              AND d.hash = p_prev_hash));
    IF FOUND THEN
        RETURN;
    END IF;
    PERFORM FROM tenant_roles WHERE role = session_user AND tenant = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decisions"';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'TG006',
        MESSAGE = pg_catalog.format('decision seq %s does not continue stream %s', p_seq, p_stream);
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
                              call_digest, definition_digest, hash, ord)
    WHERE EXISTS (SELECT FROM tenant_roles r
                  WHERE r.role = session_user AND r.tenant = p_tenant)
      AND (p_seq <= 1 OR EXISTS (
            SELECT FROM decisions d
            WHERE d.tenant = p_tenant AND d.stream = p_stream AND d.seq = p_seq - 1
              AND d.hash = p_prev_hash));
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted > 0 THEN
        RETURN inserted;
    END IF;
    PERFORM FROM tenant_roles WHERE role = session_user AND tenant = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decisions"';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'TG006',
        MESSAGE = pg_catalog.format('decision seq %s does not continue stream %s', p_seq, p_stream);
END $$;

-- ---- pin every toolgate function's search path -----------------------------
-- pg_catalog first, named, then this schema, then pg_temp (last, so a
-- temporary table never stands in for one of ours). CREATE OR REPLACE
-- drops a function's settings, so a later migration that replaces one must
-- pin it again; the store's tests check that every toolgate function does.
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
