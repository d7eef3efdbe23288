//! The integration tests of `toolgate-controller`, built as one binary: one
//! module per area, sharing the mock API server and fixtures in `common`.

mod approval_mirror;
mod approvers;
mod archive;
mod checkpoint;
mod common;
mod crd;
mod fleet;
mod last_good;
mod profiles;
mod rbac;
mod tenancy;
mod tenant_approvers;
