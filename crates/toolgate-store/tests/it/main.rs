//! The integration tests of `toolgate-store`, built as one binary: one
//! module per area, sharing the harness in `common`.

#[macro_use]
mod common;
mod run_scopes;
mod runs;
mod schema_hijack;
mod store;
mod streams;
mod tenancy;
mod tenant_attacks;
