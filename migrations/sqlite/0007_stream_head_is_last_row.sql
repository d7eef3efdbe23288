-- A stream's head is its last row; decision_heads becomes decision_streams,
-- the register of streams. See
-- migrations/postgres/0008_stream_head_is_last_row.sql for the design. On
-- SQLite the store appends inside BEGIN IMMEDIATE, so no trigger checks
-- the link; this one only registers the stream of a first row nobody
-- opened (seq 0, its genesis hash), as PostgreSQL's trigger does.

DROP TRIGGER decisions_advance_head;
ALTER TABLE decision_heads RENAME TO decision_streams;

CREATE TRIGGER decisions_register_stream AFTER INSERT ON decisions
FOR EACH ROW WHEN NEW.seq = 1 BEGIN
    INSERT INTO decision_streams (tenant, stream, seq, prev_hash, hash, started_at)
    VALUES (NEW.tenant, NEW.stream, 0,
            '0000000000000000000000000000000000000000000000000000000000000000',
            NEW.prev_hash, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
    ON CONFLICT (tenant, stream) DO NOTHING;
END;
