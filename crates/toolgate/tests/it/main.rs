//! The integration tests of the `toolgate` binary and its dashboards, built
//! as one binary: one module per command or area (helpers in `common`).

mod analyze_cli;
mod archive_cli;
mod archive_measure;
mod audit_log_cli;
mod bundle_cli;
mod closed_pipe;
mod common;
mod dashboard;
mod db_cli;
mod hook_cli;
mod hook_formats;
mod policy_cli;
mod replay_cli;
mod shadow_cli;
mod sidecar_process;
mod tenant_cli;
mod wakeups_relay;
