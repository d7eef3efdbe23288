-- Archived prefixes of decision streams. See
-- migrations/postgres/0017_decision_archives.sql; SQLite is single-user,
-- so only the table is shared.
CREATE TABLE decision_archives (
    tenant     TEXT NOT NULL,
    stream     TEXT NOT NULL,
    seq        BIGINT NOT NULL CHECK (seq >= 1),
    hash       TEXT NOT NULL,
    at         BIGINT NOT NULL,
    PRIMARY KEY (tenant, stream, seq),
    FOREIGN KEY (tenant, stream, seq) REFERENCES checkpoints (tenant, stream, seq)
);
