//! The integration tests of `toolgate-webhook`, built as one binary: the
//! webhook over real TLS, and the fuzz properties (shared harness in `common`).

mod approvals;
mod common;
mod fuzz;
mod https;
