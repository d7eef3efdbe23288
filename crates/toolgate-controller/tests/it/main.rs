//! The integration tests of `toolgate-controller`, built as one binary: one
//! module per area, sharing the mock API server and fixtures in `common`.

mod checkpoint;
mod common;
mod crd;
mod reconcile;
mod tenancy;
mod tenant_approvers;
