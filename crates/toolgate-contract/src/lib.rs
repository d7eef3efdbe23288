//! What toolgate's components agree on, in one place: enums whose variants
//! travel as strings ([`wire_enum!`]), the approval status, the names the
//! webhook writes and the sidecar reads ([`names`], [`env`]), and the one
//! duration syntax of every flag. Free of Kubernetes, database and HTTP
//! crates, so every crate (the policy core included) can depend on it.

mod approval;
mod duration;
pub mod env;
pub mod names;
mod wire;

pub use approval::{ApprovalDecision, ApprovalStatus, UnknownStatus};
pub use duration::parse_duration;
