-- What a sidecar's shadowed candidate (a bundle's candidate section)
-- decided since the sidecar loaded it: JSON written with every heartbeat,
-- NULL without a candidate. The controller sums a profile's current pods
-- into its status (`CandidateDisagrees`). A tenant writes its own pods'
-- rows, so it can only skew its own profile's counts; the decision log
-- (`shadow` in each decision's chained message) stays the record.
ALTER TABLE sidecar_heartbeats
    ADD COLUMN shadow TEXT CHECK (shadow IS NULL OR length(shadow) <= 8192);
GRANT UPDATE (shadow) ON sidecar_heartbeats TO toolgate_tenant;
