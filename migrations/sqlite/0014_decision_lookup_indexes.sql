-- Reading the decision log by time and by run (PostgreSQL 0020): the
-- approvals mirror's lookups and archiving's search by time.
CREATE INDEX decisions_by_time ON decisions (tenant, created_at);
CREATE INDEX decisions_by_run ON decisions (tenant, run_id, created_at);
