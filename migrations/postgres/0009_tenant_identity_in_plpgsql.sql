-- The tenant identity functions in PL/pgSQL, so their queries are planned
-- once per session instead of once per statement.
--
-- Every row-level security policy (migration 0003) calls
-- toolgate_tenant_session() and toolgate_current_tenant(). Written in SQL
-- and SECURITY DEFINER, PostgreSQL can neither inline them nor keep their
-- plans: each statement of a tenant session parsed and planned both bodies
-- again, the pg_auth_members join included. That cost about 0.6 ms per
-- statement, more than the INSERT it guarded, and held a tenant's decision
-- appends to about 0.5x of a bare INSERT. PL/pgSQL caches the plans of its
-- queries for the session; the answers are the same: the tenant is still
-- looked up by session_user (which SET ROLE cannot change), and a direct
-- member of toolgate_tenant without a mapping is still a tenant session.
--
-- CREATE OR REPLACE keeps each function's OID, so the policies, the column
-- default of process_events.tenant and the other functions that call them
-- need no change. It also drops the pinned search path, which is set again
-- below.

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

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION toolgate_current_tenant() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION toolgate_tenant_session() SET search_path = %I, pg_temp',
                   current_schema());
END $$;
