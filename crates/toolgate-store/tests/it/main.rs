//! The integration tests of `toolgate-store`, built as one binary: one
//! module per area, sharing the harness in `common`.

#[macro_use]
mod common;
mod approval_consume_and_wait;
mod approvals;
mod archive;
mod atomicity;
mod bad_input;
mod connections;
mod decision_inputs;
mod decision_lookup;
mod decision_query;
mod decisions;
mod flow_labels;
mod intents;
mod mcp_tasks;
mod notifications;
mod partitions;
mod pooler;
mod profiles_and_heartbeats;
mod run_scopes;
mod runs;
mod schema_hijack;
mod streams;
mod tenant_attacks;
mod tenant_confinement;
mod tenant_isolation;
mod tenant_provisioning;
mod tenant_streams;
mod unreadable_approvals;
mod unreadable_tenant_rows;
