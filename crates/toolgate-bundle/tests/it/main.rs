//! The integration tests of `toolgate-bundle`, built as one binary: one
//! module per area, sharing the fixtures in `common`.

mod candidate;
mod common;
mod interop;
mod keys_trust;
mod tamper;
mod verify;
