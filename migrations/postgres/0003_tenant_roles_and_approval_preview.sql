-- Per-tenant login roles with row-level security, and what an approver needs
-- to see on an approval (action, preview).
--
-- The approval columns are the only part shared with
-- migrations/sqlite/0003_tenant_roles_and_approval_preview.sql: SQLite is
-- single-user and enforces no tenancy.
--
-- Model. The tenant is the Kubernetes namespace of the agent pod. Every
-- tenant gets its own LOGIN role (created by toolgate_provision_tenant, see
-- `toolgate tenant provision`), recorded in tenant_roles and made a member of
-- the NOLOGIN group role toolgate_tenant, which holds every privilege a
-- sidecar needs and no more. Row-level security limits a tenant session to
-- rows of its own tenant; any other role (the owner that ran the migrations,
-- a controller role) sees every row. RLS is enabled but not FORCEd: the owner
-- bypasses it, which the SECURITY DEFINER functions below rely on.
--
-- Custom SQLSTATEs raised here:
--   TG001  an intent update that is not a forward transition
--   TG002  an approval consumed twice (consumed_at changed once set)
--   TG003  a bundle high-water mark moved down or sideways

ALTER TABLE approvals ADD COLUMN action TEXT;
ALTER TABLE approvals ADD COLUMN preview TEXT;

-- Process events written by a tenant session carry its tenant (NULL for
-- events written by the owner or the controller).
ALTER TABLE process_events ADD COLUMN tenant TEXT;

-- Tenant login role -> tenant.
CREATE TABLE tenant_roles (
    role       TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

-- The group role every tenant role is a member of. Roles are cluster-global
-- and these migrations may run in several databases or schemas of one
-- server, so create it only once (and tolerate a concurrent creator).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'toolgate_tenant') THEN
        BEGIN
            CREATE ROLE toolgate_tenant NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                    MESSAGE = 'migration 0003 needs the group role toolgate_tenant',
                    HINT = 'run the migration once with a role that has CREATEROLE, or have '
                        'a superuser run: CREATE ROLE toolgate_tenant NOLOGIN';
        END;
    END IF;
END $$;

-- The tenant of the session's login role, NULL for non-tenant roles.
-- session_user, not current_user: SET ROLE cannot change it.
CREATE FUNCTION toolgate_current_tenant() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
AS $$ SELECT tenant FROM tenant_roles WHERE role = session_user $$;

-- Whether the session belongs to a tenant: mapped in tenant_roles, or a
-- direct member of toolgate_tenant (a tenant role whose mapping was removed
-- must not fall through to the unrestricted policy).
CREATE FUNCTION toolgate_tenant_session() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
AS $$
    SELECT EXISTS (SELECT 1 FROM tenant_roles WHERE role = session_user)
        OR EXISTS (
            SELECT 1 FROM pg_catalog.pg_auth_members m
            JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
            JOIN pg_catalog.pg_roles u ON u.oid = m.member
            WHERE g.rolname = 'toolgate_tenant' AND u.rolname = session_user
        )
$$;

ALTER TABLE process_events ALTER COLUMN tenant SET DEFAULT toolgate_current_tenant();

-- PostgreSQL decision chain: a BEFORE INSERT trigger, not the caller,
-- assigns seq, prev_hash and hash and advances the tenant's head, so a
-- session that may only INSERT into decisions cannot fork, forge or skip
-- chain positions, and needs no privilege on decision_heads. The record
-- document is the RFC 8785 canonical JSON the store hashes (see
-- crates/toolgate-store/src/decisions.rs): keys in sorted order, strings
-- escaped by to_json (which escapes exactly what RFC 8785 escapes),
-- call_digest present only when not NULL.
CREATE FUNCTION toolgate_chain_decision() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    rec       text;
    tjson     text;
    head_seq  bigint;
    head_prev text;
    head_hash text;
BEGIN
    IF toolgate_tenant_session() AND NEW.tenant IS DISTINCT FROM toolgate_current_tenant() THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decisions"';
    END IF;
    rec := '{"args_digest":' || to_json(NEW.args_digest)::text
        || CASE WHEN NEW.call_digest IS NULL THEN ''
                ELSE ',"call_digest":' || to_json(NEW.call_digest)::text END
        || ',"created_at_ms":' || NEW.created_at::text
        || ',"decision_id":' || to_json(NEW.decision_id)::text
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
    tjson := to_json(NEW.tenant)::text;
    LOOP
        -- Locks the head row until commit: appends per tenant are serialised.
        UPDATE decision_heads SET seq = seq + 1, prev_hash = hash,
            hash = encode(sha256(convert_to('{"prev_hash":"' || hash || '","record":' || rec
                || ',"seq":' || (seq + 1)::text || ',"tenant":' || tjson || ',"v":1}', 'UTF8')), 'hex')
        WHERE tenant = NEW.tenant
        RETURNING seq, prev_hash, hash INTO head_seq, head_prev, head_hash;
        EXIT WHEN FOUND;
        -- First append for this tenant: an empty head is a chain of zero rows.
        INSERT INTO decision_heads (tenant, seq, prev_hash, hash)
        VALUES (NEW.tenant, 0, repeat('0', 64), repeat('0', 64))
        ON CONFLICT (tenant) DO NOTHING;
    END LOOP;
    NEW.seq := head_seq;
    NEW.prev_hash := head_prev;
    NEW.hash := head_hash;
    RETURN NEW;
END $$;

CREATE TRIGGER decisions_chain BEFORE INSERT ON decisions
FOR EACH ROW EXECUTE FUNCTION toolgate_chain_decision();

-- Intents only move forward: pending (effect_sent_at set at most once) to
-- one terminal outcome, after which the row is frozen. Identifying columns
-- never change. Applies to every role.
CREATE FUNCTION toolgate_intent_forward_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF (NEW.id, NEW.tenant, NEW.run_id, NEW.step_id, NEW.tool, NEW.args_digest,
        NEW.call_digest, NEW.decision_id, NEW.risk, NEW.verification_probe, NEW.created_at)
       IS DISTINCT FROM
       (OLD.id, OLD.tenant, OLD.run_id, OLD.step_id, OLD.tool, OLD.args_digest,
        OLD.call_digest, OLD.decision_id, OLD.risk, OLD.verification_probe, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG001',
            MESSAGE = format('intent %s: identifying columns cannot change', OLD.id);
    END IF;
    IF OLD.status <> 'pending' THEN
        IF NEW IS DISTINCT FROM OLD THEN
            RAISE EXCEPTION USING ERRCODE = 'TG001',
                MESSAGE = format('intent %s is already %s', OLD.id, OLD.status);
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.effect_sent_at IS NOT NULL AND NEW.effect_sent_at IS DISTINCT FROM OLD.effect_sent_at THEN
        RAISE EXCEPTION USING ERRCODE = 'TG001',
            MESSAGE = format('intent %s: effect_sent_at cannot change once set', OLD.id);
    END IF;
    IF NEW.status = 'pending' THEN
        IF NEW.detail IS DISTINCT FROM OLD.detail
           OR NEW.completed_at IS DISTINCT FROM OLD.completed_at THEN
            RAISE EXCEPTION USING ERRCODE = 'TG001',
                MESSAGE = format('intent %s: a pending intent has no outcome', OLD.id);
        END IF;
    ELSIF NEW.completed_at IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'TG001',
            MESSAGE = format('intent %s: an outcome needs completed_at', OLD.id);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER intents_forward_only BEFORE UPDATE ON intents
FOR EACH ROW EXECUTE FUNCTION toolgate_intent_forward_only();

-- An approval's single use cannot be undone.
CREATE FUNCTION toolgate_approval_consume_once() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF OLD.consumed_at IS NOT NULL AND NEW.consumed_at IS DISTINCT FROM OLD.consumed_at THEN
        RAISE EXCEPTION USING ERRCODE = 'TG002',
            MESSAGE = format('approval %s was already consumed', OLD.id);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER approvals_consume_once BEFORE UPDATE ON approvals
FOR EACH ROW EXECUTE FUNCTION toolgate_approval_consume_once();

-- Anti-rollback marks only move up (an operator resets one by deleting it).
CREATE FUNCTION toolgate_high_water_up_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW IS DISTINCT FROM OLD
       AND ((NEW.namespace, NEW.profile) IS DISTINCT FROM (OLD.namespace, OLD.profile)
            OR NEW.sequence <= OLD.sequence) THEN
        RAISE EXCEPTION USING ERRCODE = 'TG003',
            MESSAGE = format('bundle high-water mark of %s/%s can only move up',
                             OLD.namespace, OLD.profile);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER bundle_high_water_up_only BEFORE UPDATE ON bundle_high_water
FOR EACH ROW EXECUTE FUNCTION toolgate_high_water_up_only();

-- Creates the tenant's LOGIN role, or rotates its password, and maps it to
-- the tenant. Executed by the admin (needs CREATEROLE); not SECURITY
-- DEFINER. The role name is chosen by the store; the password argument may
-- be a SCRAM verifier, so no cleartext password reaches the server.
CREATE FUNCTION toolgate_provision_tenant(p_tenant text, p_role text, p_password text)
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
            MESSAGE = format('role %s already belongs to tenant %s', p_role, mapped);
    END IF;
    SELECT * INTO r FROM pg_catalog.pg_roles WHERE rolname = p_role;
    IF FOUND THEN
        IF r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                MESSAGE = format('role %s exists with privileges a tenant role must not have', p_role);
        END IF;
        EXECUTE format('ALTER ROLE %I WITH LOGIN INHERIT PASSWORD %L', p_role, p_password);
    ELSE
        EXECUTE format('CREATE ROLE %I WITH LOGIN INHERIT PASSWORD %L', p_role, p_password);
    END IF;
    EXECUTE format('GRANT toolgate_tenant TO %I', p_role);
    -- An admin that does not own the database may be unable to grant
    -- CONNECT; PUBLIC normally has it anyway.
    IF has_database_privilege(current_database(), 'CONNECT WITH GRANT OPTION') THEN
        EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), p_role);
    ELSIF NOT has_database_privilege(p_role, current_database(), 'CONNECT') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('cannot grant CONNECT on database %s to %s', current_database(), p_role);
    END IF;
    INSERT INTO tenant_roles (role, tenant, created_at)
    VALUES (p_role, p_tenant, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
    ON CONFLICT (role) DO NOTHING;
END $$;
REVOKE ALL ON FUNCTION toolgate_provision_tenant(text, text, text) FROM PUBLIC;

-- Pin the search path of the SECURITY DEFINER functions to this schema.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION toolgate_current_tenant() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION toolgate_tenant_session() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION toolgate_chain_decision() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION toolgate_provision_tenant(text, text, text) SET search_path = %I, pg_temp',
                   current_schema());
    -- Only the schema owner (or a holder of the grant option) can grant
    -- USAGE; PUBLIC has it on the public schema anyway.
    IF has_schema_privilege(current_schema(), 'USAGE WITH GRANT OPTION') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO toolgate_tenant', current_schema());
    ELSIF NOT has_schema_privilege('toolgate_tenant', current_schema(), 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('cannot grant USAGE on schema %s to toolgate_tenant', current_schema());
    END IF;
END $$;

-- ---- privileges of the tenant group ----------------------------------------
-- Tenants can read the migration ledger, so a tenant session can check the
-- schema version instead of migrating.
GRANT SELECT ON _sqlx_migrations TO toolgate_tenant;

-- Decisions: insert-only (the trigger chains them); the head is read-only.
GRANT SELECT, INSERT ON decisions TO toolgate_tenant;
GRANT SELECT ON decision_heads TO toolgate_tenant;

-- Intents: a new intent is always pending; updates only of the lifecycle
-- columns, and the trigger only lets them move forward. No DELETE.
GRANT SELECT ON intents TO toolgate_tenant;
GRANT INSERT (id, tenant, run_id, step_id, tool, args_digest, call_digest, decision_id, risk,
              verification_probe, created_at) ON intents TO toolgate_tenant;
GRANT UPDATE (effect_sent_at, status, detail, completed_at) ON intents TO toolgate_tenant;

-- Approvals: request (always pending: no INSERT of status or resolution
-- columns), read, and consume once. Never resolve or expire.
GRANT SELECT ON approvals TO toolgate_tenant;
GRANT INSERT (id, tenant, invocation_id, run_id, tool, args_digest, call_digest, policy_version,
              decision_id, requested_by, created_at, expires_at, action, preview)
    ON approvals TO toolgate_tenant;
GRANT UPDATE (consumed_at) ON approvals TO toolgate_tenant;

-- Run events: append and read (tenants may only write approval.requested).
-- No INSERT of id: a tenant choosing ids could make another tenant's
-- inserts collide with them.
GRANT SELECT ON run_events TO toolgate_tenant;
GRANT INSERT (tenant, run_id, kind, subject_id, payload, created_at) ON run_events TO toolgate_tenant;
GRANT USAGE ON SEQUENCE run_events_id_seq TO toolgate_tenant;

-- Profile loads and their process events: append and read.
GRANT SELECT ON policy_profiles TO toolgate_tenant;
GRANT INSERT (profile, namespace, policy_version, spec_sha256, hardline_sha256, bundle_digest,
              loaded_by, loaded_at) ON policy_profiles TO toolgate_tenant;
GRANT USAGE ON SEQUENCE policy_profiles_id_seq TO toolgate_tenant;
GRANT SELECT ON process_events TO toolgate_tenant;
GRANT INSERT (kind, idempotency_key, payload, created_at) ON process_events TO toolgate_tenant;
GRANT USAGE ON SEQUENCE process_events_id_seq TO toolgate_tenant;

-- Heartbeats and bundle high-water marks: upsert.
GRANT SELECT, INSERT ON sidecar_heartbeats TO toolgate_tenant;
GRANT UPDATE (profile, policy_version, sequence, last_seen) ON sidecar_heartbeats TO toolgate_tenant;
GRANT SELECT, INSERT ON bundle_high_water TO toolgate_tenant;
GRANT UPDATE (sequence, bundle_digest, updated_at) ON bundle_high_water TO toolgate_tenant;

-- ---- row-level security ------------------------------------------------------
-- Every table: non-tenant sessions see everything (toolgate_admin), tenant
-- sessions only their own rows. The functions are wrapped in scalar
-- subqueries so they run once per statement, not once per row.

ALTER TABLE tenant_roles ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON tenant_roles
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));

ALTER TABLE intents ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON intents
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON intents
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));

ALTER TABLE approvals ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON approvals
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON approvals
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));

ALTER TABLE run_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON run_events
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_read ON run_events FOR SELECT
    USING (tenant = (SELECT toolgate_current_tenant()));
CREATE POLICY toolgate_tenant_append ON run_events FOR INSERT
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()) AND kind = 'approval.requested');

ALTER TABLE decisions ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON decisions
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON decisions
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));

ALTER TABLE decision_heads ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON decision_heads
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_read ON decision_heads FOR SELECT
    USING (tenant = (SELECT toolgate_current_tenant()));

ALTER TABLE policy_profiles ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON policy_profiles
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON policy_profiles
    USING (namespace = (SELECT toolgate_current_tenant()))
    WITH CHECK (namespace = (SELECT toolgate_current_tenant()));

ALTER TABLE process_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON process_events
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON process_events
    USING (tenant = (SELECT toolgate_current_tenant()))
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));

ALTER TABLE sidecar_heartbeats ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON sidecar_heartbeats
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON sidecar_heartbeats
    USING (pod_namespace = (SELECT toolgate_current_tenant()))
    WITH CHECK (pod_namespace = (SELECT toolgate_current_tenant()));

ALTER TABLE bundle_high_water ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON bundle_high_water
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_rows ON bundle_high_water
    USING (namespace = (SELECT toolgate_current_tenant()))
    WITH CHECK (namespace = (SELECT toolgate_current_tenant()));
