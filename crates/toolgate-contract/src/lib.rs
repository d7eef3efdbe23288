//! What toolgate's components agree on, in one place: the agent API's
//! bodies and limits ([`agent_api`]), enums whose variants travel as
//! strings ([`wire_enum!`]), the approval status, the names the
//! webhook writes and the sidecar reads ([`names`], [`env`](mod@env)), and the one
//! duration syntax of every flag (and the `--since`/`--until` instants
//! written in it). Free of Kubernetes, database and HTTP
//! crates, so every crate (the policy core included) can depend on it.

pub mod agent_api;
mod approval;
#[cfg(test)]
mod doc_tables;
mod duration;
pub mod env;
pub mod errors;
pub mod hooks;
pub mod names;
#[cfg(feature = "metrics")]
pub mod telemetry;
mod wire;

pub use approval::{ApprovalDecision, ApprovalStatus, UnknownStatus};
pub use duration::{InstantError, InstantProblem, parse_duration, parse_instant};

/// The `tracing` target of every span toolgate exports as a trace. Logs
/// never format these spans and the exporter takes nothing else, so with
/// tracing off (the default) no layer is interested and a span costs one
/// cached interest check.
pub const TRACE_TARGET: &str = "toolgate_trace";
