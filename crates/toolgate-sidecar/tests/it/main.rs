//! The integration tests of `toolgate-sidecar`, built as one binary: one
//! module per area, each against a real sidecar on loopback (see `common`).

#[macro_use]
mod common;

mod attacks;
mod flows;
mod fuzz;
mod hooks;
mod http;
mod ids;
mod mcp_messages;
mod mcp_tasks;
mod mcp_upstream;
mod paths;
mod refusal_log;
mod run_ids;
mod run_scopes;
mod runs;
mod workspace;
mod workspace_links;
