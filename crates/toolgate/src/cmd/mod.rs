//! One module per subcommand.

pub mod analyze;
pub mod approvals;
pub mod archive;
pub mod audit;
pub mod audit_log;
pub mod bundle;
pub mod check;
pub mod console;
pub mod crdgen;
pub mod demo;
pub mod hook;
pub mod keygen;
pub mod mcp;
pub mod replay;
pub mod runs;
pub mod sidecar;
pub mod tenant;
pub mod test;
pub mod wakeups;
pub mod webhook;
