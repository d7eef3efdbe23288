//! toolgate's Kubernetes API, shared by the controller, the admission
//! webhook and the `toolgate` CLI.
//!
//! - [`crd`] and [`cancellation`]: the `PolicyProfile`, `Approval` and
//!   `RunCancellation` custom resources as Rust types (the CRD YAML under
//!   `crds/` is generated from them, [`crdgen`]);
//! - [`names`]: every annotation, label, ConfigMap name and port that two
//!   components must agree on;
//! - [`validate`]: the one validation of profiles and approvals, called by
//!   the webhook at admission and by the controller when it reconciles;
//! - [`telemetry`]: the build-info and process metrics every component
//!   exports alike.
//!
//! This crate knows nothing of the database or the sidecar; it depends on
//! `kube`'s types only, never on a client.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cancellation;
pub mod crd;
mod error;
mod escalation;
mod generate;
pub mod names;
pub mod telemetry;
pub mod validate;

pub use error::K8sError;
pub use escalation::{MAX_ESCALATION_HISTORY, MAX_ESCALATION_LABELS};
pub use generate::{crd_files, crdgen, write_crds};
pub use validate::{
    ApprovalFields, Approver, Requester, approver_allowed, validate_approval, validate_profile,
};
