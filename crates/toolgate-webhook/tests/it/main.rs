//! The integration tests of `toolgate-webhook`, built as one binary: the
//! webhook over real TLS, and the fuzz properties (shared harness in `common`).

mod annotations;
mod approvals;
mod common;
mod fuzz;
mod injection;
mod pod_isolation;
mod policy_profiles;
mod server;
mod updates;
