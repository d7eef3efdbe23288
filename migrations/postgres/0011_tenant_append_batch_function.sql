-- A tenant session appends a batch of decisions in one call.
--
-- The sidecar writes low-risk decisions in batches. Through 0010 a tenant
-- session sent each row of a batch as its own toolgate_append_decision
-- call inside a transaction: BEGIN, a round trip and a link probe per row,
-- COMMIT. toolgate_append_decisions takes the batch as arrays (one element
-- per row, in chain order) and inserts it in one statement with the
-- owner's rights, checking what 0010 checks, once:
--   - the session's login role is mapped to p_tenant (by session_user);
--   - beyond seq 1, the first row continues its stream: row p_seq - 1
--     exists and carries p_prev_hash (else TG006).
-- The links inside the batch are not taken from the caller: row i's seq is
-- p_seq + i - 1 and its prev_hash is row i - 1's hash, so the batch is one
-- unbroken piece of chain by construction. As for one row, the hashes are
-- the caller's and `audit verify` recomputes them; the trigger still
-- registers (or refuses) a stream's first row, the primary key refuses a
-- taken seq (23505) and the CHECK constraints apply to every row.

CREATE FUNCTION toolgate_append_decisions(
    p_tenant text, p_stream text, p_seq bigint, p_prev_hash text,
    p_decision_id text[], p_run_id text[], p_step_id text[], p_tool text[],
    p_verdict text[], p_reason text[], p_message text[], p_matched_rule text[],
    p_policy_version text[], p_risk text[], p_args_digest text[], p_created_at bigint[],
    p_call_digest text[], p_definition_digest text[], p_hash text[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    n integer := coalesce(cardinality(p_hash), 0);
    inserted bigint;
BEGIN
    IF p_seq IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
            MESSAGE = 'toolgate_append_decisions needs the first row''s seq';
    END IF;
    -- unnest pads a shorter array with NULLs, which would blank fields of
    -- the last rows: arrays of different lengths are refused outright. Row
    -- i's prev_hash is p_hash[i - 1], so p_hash must be a plain list
    -- indexed from 1 (SQL arrays may carry other bounds or dimensions).
    IF n = 0 OR array_ndims(p_hash) <> 1 OR array_lower(p_hash, 1) <> 1 OR EXISTS (
            SELECT FROM unnest(ARRAY[
                cardinality(p_decision_id), cardinality(p_run_id), cardinality(p_step_id),
                cardinality(p_tool), cardinality(p_verdict), cardinality(p_reason),
                cardinality(p_message), cardinality(p_matched_rule),
                cardinality(p_policy_version), cardinality(p_risk),
                cardinality(p_args_digest), cardinality(p_created_at),
                cardinality(p_call_digest), cardinality(p_definition_digest)]) AS c(len)
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
    FROM unnest(p_decision_id, p_run_id, p_step_id, p_tool, p_verdict, p_reason, p_message,
                p_matched_rule, p_policy_version, p_risk, p_args_digest, p_created_at,
                p_call_digest, p_definition_digest, p_hash)
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
    -- Nothing inserted: refused as toolgate_append_decision refuses one row,
    -- another tenant's stream before its link is looked at.
    PERFORM FROM tenant_roles WHERE role = session_user AND tenant = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = 'new row violates row-level security policy for table "decisions"';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'TG006',
        MESSAGE = format('decision seq %s does not continue stream %s', p_seq, p_stream);
END $$;

REVOKE ALL ON FUNCTION toolgate_append_decisions(text, text, bigint, text, text[], text[],
    text[], text[], text[], text[], text[], text[], text[], text[], text[], bigint[], text[],
    text[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION toolgate_append_decisions(text, text, bigint, text, text[], text[],
    text[], text[], text[], text[], text[], text[], text[], text[], text[], bigint[], text[],
    text[], text[]) TO toolgate_tenant;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION toolgate_append_decisions(text, text, bigint, text, text[], '
                   'text[], text[], text[], text[], text[], text[], text[], text[], text[], '
                   'text[], bigint[], text[], text[], text[]) SET search_path = %I, pg_temp',
                   current_schema());
END $$;
