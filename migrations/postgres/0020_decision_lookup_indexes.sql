-- Reading the decision log by time and by run (#46 item 3, #45).
--
-- The approvals mirror looks up an escalation's decision by tenant and
-- time (`Decisions::at`) and a run's latest decisions in a window
-- (`Decisions::run_history`); archiving finds each stream's prefix by time
-- (`Decisions::archive_ranges`). Without these indexes each was a scan of
-- the tenant's rows in the month's partition: tens of millions of rows a
-- day for a busy tenant. On the partitioned table each index is created
-- on every partition, and on every partition created later.
CREATE INDEX decisions_by_time ON decisions (tenant, created_at);
CREATE INDEX decisions_by_run ON decisions (tenant, run_id, created_at);
