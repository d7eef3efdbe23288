-- Approval notifications (issue 36): which channel has been sent which
-- approval event (run_events of kind approval.*, written in the
-- transaction of each approval change). See
-- migrations/postgres/0014_approval_notifications.sql.

CREATE TABLE notification_deliveries (
    channel         TEXT    NOT NULL CHECK (length(channel) BETWEEN 1 AND 600),
    event_id        INTEGER NOT NULL,
    attempts        INTEGER NOT NULL CHECK (attempts >= 0),
    next_attempt_at INTEGER NOT NULL,
    delivered_at    INTEGER,
    last_error      TEXT,
    PRIMARY KEY (channel, event_id)
);

CREATE INDEX run_events_approval_events ON run_events (created_at, id)
    WHERE kind LIKE 'approval.%';
