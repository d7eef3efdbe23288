-- What a sidecar's shadowed candidate decided since it loaded it (JSON,
-- NULL without a candidate); see PostgreSQL's 0024.
ALTER TABLE sidecar_heartbeats
    ADD COLUMN shadow TEXT CHECK (shadow IS NULL OR length(shadow) <= 8192);
