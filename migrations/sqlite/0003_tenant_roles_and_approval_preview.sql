-- What an approver needs to see on an approval: the action and a short
-- preview of the call.
--
-- The PostgreSQL migration of the same number also creates per-tenant login
-- roles and row-level security; SQLite is single-user (one embedded file,
-- one process) and enforces no tenancy, so only the columns are shared.

ALTER TABLE approvals ADD COLUMN action TEXT;
ALTER TABLE approvals ADD COLUMN preview TEXT;
