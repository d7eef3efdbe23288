-- A tenant session appends a decision through one SECURITY DEFINER call
-- instead of an INSERT under row-level security and the chain trigger.
--
-- Through 0009 a tenant's INSERT into decisions paid the policies' WITH
-- CHECK (two calls of the tenant identity functions), then the trigger's
-- link check, whose read ran under the same policies again. With 64
-- sidecars of one tenant that held appends to about half the rate of a
-- bare INSERT. toolgate_append_decision checks what those did, in the
-- one statement that inserts the row with the owner's rights:
--   - the session's login role is mapped to p_tenant (by session_user, as
--     the policies do; a role without a mapping is refused, so is every
--     role outside toolgate_tenant, which cannot execute the function);
--   - a row beyond seq 1 continues its stream: row seq - 1 exists and
--     carries p_prev_hash (else TG006, as from the trigger).
-- The trigger still fires for a first row (seq 1: the stream is registered
-- or the row refused); the primary key still refuses a second row at any
-- seq (23505), and the CHECK constraints apply as to any INSERT.
--
-- The INSERT privilege stays, with the trigger, for sidecars of earlier
-- releases, which insert directly.

CREATE FUNCTION toolgate_append_decision(
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
    -- One statement: the row is inserted only if the session's role is
    -- mapped to p_tenant and, beyond seq 1, row seq - 1 carries p_prev_hash.
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
    -- Nothing inserted. Another tenant's stream is refused as row-level
    -- security would refuse the row, whatever its link, so the caller
    -- learns nothing of that stream.
    PERFORM FROM tenant_roles WHERE role = session_user AND tenant = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decisions"';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'TG006',
        MESSAGE = format('decision seq %s does not continue stream %s', p_seq, p_stream);
END $$;

REVOKE ALL ON FUNCTION toolgate_append_decision(text, text, text, text, text, text, text, text,
    text, text, text, text, bigint, text, text, text, bigint, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate_append_decision(text, text, text, text, text, text, text, text,
    text, text, text, text, bigint, text, text, text, bigint, text, text) TO toolgate_tenant;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION toolgate_append_decision(text, text, text, text, text, text, '
                   'text, text, text, text, text, text, bigint, text, text, text, bigint, text, '
                   'text) SET search_path = %I, pg_temp', current_schema());
END $$;
