//! The integration tests of `toolgate-sidecar`, built as one binary: one
//! module per area, each against a real sidecar on loopback (see `common`).

mod common;
mod attacks;
mod fuzz;
mod http;
mod runs;
mod workspace;
