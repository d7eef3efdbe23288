-- Archived prefixes of decision streams (`toolgate audit archive`, #45).
--
-- Archiving writes a stream's oldest rows to signed, hashed files, stores a
-- signed checkpoint of the last archived row, and only then deletes the
-- rows up to that checkpoint, recording here in the same transaction
-- where the stream now starts: verification walks a stream from its
-- highest archived position (seq, hash) instead of its genesis. Each row
-- names a stored checkpoint at the same position (the foreign key), whose
-- signature `toolgate audit verify --checkpoints --trust` checks; rows
-- deleted without such a record still fail verification as a gap.
--
-- Written by the admin role only (it alone may delete decisions); tenants
-- may read their own.
CREATE TABLE decision_archives (
    tenant     TEXT NOT NULL,
    stream     TEXT NOT NULL,
    seq        BIGINT NOT NULL CHECK (seq >= 1),
    hash       TEXT NOT NULL,
    at         BIGINT NOT NULL,
    PRIMARY KEY (tenant, stream, seq),
    FOREIGN KEY (tenant, stream, seq) REFERENCES checkpoints (tenant, stream, seq)
);

GRANT SELECT ON decision_archives TO toolgate_tenant;
ALTER TABLE decision_archives ENABLE ROW LEVEL SECURITY;
CREATE POLICY toolgate_admin ON decision_archives
    USING (NOT (SELECT toolgate_tenant_session()))
    WITH CHECK (NOT (SELECT toolgate_tenant_session()));
CREATE POLICY toolgate_tenant_read ON decision_archives FOR SELECT
    USING (tenant = (SELECT toolgate_current_tenant()));
