-- Decision chains per stream, and signed checkpoints of their heads. See
-- migrations/postgres/0006_decision_streams_and_checkpoints.sql for the
-- design; on SQLite the store computes seq and hashes in Rust
-- (crates/toolgate-store/src/decisions.rs) inside BEGIN IMMEDIATE, and the
-- trigger below only advances the head. Existing rows and heads become the
-- stream `legacy` of their tenant, which keeps its v1 hashes.
--
-- SQLite cannot change a primary key: rebuild both tables.

CREATE TABLE decisions_0006 (
    tenant            TEXT NOT NULL,
    stream            TEXT NOT NULL DEFAULT 'legacy'
                      CHECK (stream <> '' AND length(stream) <= 1024),
    seq               BIGINT NOT NULL CHECK (seq >= 1),
    decision_id       TEXT NOT NULL,
    run_id            TEXT NOT NULL,
    step_id           TEXT NOT NULL,
    tool              TEXT NOT NULL,
    verdict           TEXT NOT NULL,
    reason            TEXT NOT NULL,
    message           TEXT,
    matched_rule      TEXT,
    policy_version    TEXT NOT NULL,
    risk              TEXT NOT NULL,
    args_digest       TEXT NOT NULL,
    created_at        BIGINT NOT NULL,
    prev_hash         TEXT NOT NULL,
    hash              TEXT NOT NULL,
    call_digest       TEXT,
    definition_digest TEXT,
    PRIMARY KEY (tenant, stream, seq)
);
INSERT INTO decisions_0006 (tenant, stream, seq, decision_id, run_id, step_id, tool, verdict,
    reason, message, matched_rule, policy_version, risk, args_digest, created_at, prev_hash,
    hash, call_digest, definition_digest)
SELECT tenant, 'legacy', seq, decision_id, run_id, step_id, tool, verdict, reason, message,
    matched_rule, policy_version, risk, args_digest, created_at, prev_hash, hash, call_digest,
    definition_digest
FROM decisions;
DROP TABLE decisions;
ALTER TABLE decisions_0006 RENAME TO decisions;

CREATE TABLE decision_heads_0006 (
    tenant          TEXT NOT NULL,
    stream          TEXT NOT NULL DEFAULT 'legacy',
    seq             BIGINT NOT NULL,
    prev_hash       TEXT NOT NULL,
    hash            TEXT NOT NULL,
    previous_stream TEXT,
    previous_seq    BIGINT,
    previous_hash   TEXT,
    started_at      BIGINT,
    PRIMARY KEY (tenant, stream)
);
INSERT INTO decision_heads_0006 (tenant, stream, seq, prev_hash, hash)
SELECT tenant, 'legacy', seq, prev_hash, hash FROM decision_heads;
DROP TABLE decision_heads;
ALTER TABLE decision_heads_0006 RENAME TO decision_heads;

-- The head of (tenant, stream) follows every insert; a head created by
-- opening the stream keeps its previous-stream link.
CREATE TRIGGER decisions_advance_head AFTER INSERT ON decisions
FOR EACH ROW BEGIN
    INSERT INTO decision_heads (tenant, stream, seq, prev_hash, hash)
    VALUES (NEW.tenant, NEW.stream, NEW.seq, NEW.prev_hash, NEW.hash)
    ON CONFLICT (tenant, stream) DO UPDATE
        SET seq = excluded.seq, prev_hash = excluded.prev_hash, hash = excluded.hash;
END;

CREATE TABLE checkpoints (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant     TEXT NOT NULL,
    stream     TEXT NOT NULL,
    seq        BIGINT NOT NULL CHECK (seq >= 0),
    hash       TEXT NOT NULL,
    at         BIGINT NOT NULL,
    keyid      TEXT NOT NULL,
    envelope   TEXT NOT NULL,
    UNIQUE (tenant, stream, seq)
);
