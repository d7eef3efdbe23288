-- Recorded inputs of decided calls, for `toolgate replay`. See
-- migrations/postgres/0023_decision_inputs.sql; SQLite is single-user, so
-- only the table is shared.

CREATE TABLE decision_inputs (
    tenant       TEXT NOT NULL,
    decision_id  TEXT NOT NULL CHECK (length(decision_id) BETWEEN 1 AND 1024),
    call         TEXT NOT NULL CHECK (length(call) <= 65536),
    masked       INTEGER NOT NULL CHECK (masked IN (0, 1)),
    recorded_at  INTEGER NOT NULL CHECK (recorded_at BETWEEN 0 AND 253370764800000),
    expires_at   INTEGER NOT NULL CHECK (expires_at BETWEEN 0 AND 253370764800000),
    PRIMARY KEY (tenant, decision_id)
);

CREATE INDEX decision_inputs_expiry ON decision_inputs (expires_at);
