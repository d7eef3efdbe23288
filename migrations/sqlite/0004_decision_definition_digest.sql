-- Decisions made through an MCP gateway record the definition digest of
-- the tool as the server announced it; hashed with the record when present
-- (crates/toolgate-store/src/decisions.rs).

ALTER TABLE decisions ADD COLUMN definition_digest TEXT;
