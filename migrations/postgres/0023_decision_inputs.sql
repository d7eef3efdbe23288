-- Recorded inputs of decided calls (spec.audit.recordInputs), for
-- `toolgate replay`. call is the RFC 8785 canonical JSON of the call as the
-- evaluator read it (tool, action, arguments, provenance); its SHA-256 is in
-- its decision's chained message (input_sha256), so `toolgate audit verify`
-- and replay check every row against its decision. Times are bounded as
-- 0021/0022 bound theirs (before 9999-01-01), so every row reads back.
-- Rows expire (expires_at, from spec.audit.inputRetention) and are pruned;
-- nothing of the chain is. Shared in shape with
-- migrations/sqlite/0015_decision_inputs.sql.

CREATE TABLE decision_inputs (
    tenant       TEXT NOT NULL,
    decision_id  TEXT NOT NULL CHECK (pg_catalog.length(decision_id) BETWEEN 1 AND 1024),
    call         TEXT NOT NULL CHECK (pg_catalog.length(call) <= 65536),
    masked       BOOLEAN NOT NULL,
    recorded_at  BIGINT NOT NULL CHECK (recorded_at BETWEEN 0 AND 253370764800000),
    expires_at   BIGINT NOT NULL CHECK (expires_at BETWEEN 0 AND 253370764800000),
    PRIMARY KEY (tenant, decision_id)
);

CREATE INDEX decision_inputs_expiry ON decision_inputs (expires_at);

-- A tenant writes its sidecars' inputs and prunes the expired ones; it
-- cannot rewrite a row, nor delete one before it expires.
GRANT SELECT, INSERT, DELETE ON decision_inputs TO toolgate_tenant;

ALTER TABLE decision_inputs ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON decision_inputs
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_read ON decision_inputs FOR SELECT
    USING (tenant = (SELECT toolgate_current_tenant()));
CREATE POLICY toolgate_tenant_insert ON decision_inputs FOR INSERT
    WITH CHECK (tenant = (SELECT toolgate_current_tenant()));
CREATE POLICY toolgate_tenant_prune ON decision_inputs FOR DELETE
    USING (tenant = (SELECT toolgate_current_tenant())
           AND expires_at < (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000)::BIGINT);
