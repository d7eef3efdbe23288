-- Approval notifications (issue 36): which channel has been sent which
-- approval event, so the controller's leader delivers each at least once
-- across restarts and leader changes.
--
-- The outbox is run_events itself: every approval state change already
-- writes its `approval.*` event in the transaction that changes the row
-- (requested, resolved, expired, cancelled), so an event exists exactly
-- when the change committed. This table only remembers deliveries, keyed by
-- (channel, event): an event committed late with a smaller id than one
-- already sent is still found, because nothing here is a cursor.
--
-- Owner only: no tenant role is granted anything on it (a tenant neither
-- reads another's channels nor marks its own events delivered).
-- Shared in shape with migrations/sqlite/0010_approval_notifications.sql.

CREATE TABLE notification_deliveries (
    channel         TEXT    NOT NULL CHECK (pg_catalog.length(channel) BETWEEN 1 AND 600),
    event_id        BIGINT  NOT NULL,
    attempts        BIGINT  NOT NULL CHECK (attempts >= 0),
    next_attempt_at BIGINT  NOT NULL,
    delivered_at    BIGINT,
    last_error      TEXT,
    PRIMARY KEY (channel, event_id)
);

-- The delivery pass reads recent approval events in id order.
CREATE INDEX run_events_approval_events ON run_events (created_at, id)
    WHERE kind LIKE 'approval.%';

REVOKE ALL ON notification_deliveries FROM PUBLIC;
