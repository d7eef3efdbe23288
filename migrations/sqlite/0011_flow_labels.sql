-- Flow labels. See migrations/postgres/0015_flow_labels.sql; SQLite is
-- single-user, so only the table and its no-update rule are shared.

CREATE TABLE flow_labels (
    tenant      TEXT NOT NULL,
    scope       TEXT NOT NULL CHECK (scope IN ('run', 'pod')),
    subject     TEXT NOT NULL CHECK (length(subject) BETWEEN 1 AND 256),
    label       TEXT NOT NULL CHECK (length(label) BETWEEN 1 AND 63),
    decision_id TEXT NOT NULL CHECK (length(decision_id) BETWEEN 1 AND 256),
    set_at      BIGINT NOT NULL CHECK (set_at BETWEEN 0 AND 253402300799999),
    PRIMARY KEY (tenant, scope, subject, label)
);

CREATE TRIGGER flow_labels_fixed BEFORE UPDATE ON flow_labels
BEGIN
    SELECT RAISE(ABORT, 'TG004: a flow label cannot be changed');
END;
