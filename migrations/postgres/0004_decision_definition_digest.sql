-- Decisions made through an MCP gateway record the definition digest of
-- the tool as the server announced it (see crates/toolgate-mcp). The chain
-- trigger is restated for it, and no longer asks the catalog on every
-- append (see below). It is part
-- of the hashed record when present, in sorted key order as RFC 8785 puts
-- it (after `decision_id`), exactly as crates/toolgate-store/src/decisions.rs
-- hashes it; rows without it keep the document they were written with.

ALTER TABLE decisions ADD COLUMN definition_digest TEXT;

CREATE OR REPLACE FUNCTION toolgate_chain_decision() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
    rec       text;
    tjson     text;
    head_seq  bigint;
    head_prev text;
    head_hash text;
BEGIN
    -- No tenant check here: a tenant's row for another tenant fails the
    -- decisions RLS WITH CHECK after this trigger, and the head update
    -- below rolls back with the statement. (Asking the catalog here on
    -- every append halved the append rate.)
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

-- Replacing the function drops its settings: pin its search path again.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION toolgate_chain_decision() SET search_path = %I, pg_temp',
                   current_schema());
END $$;
