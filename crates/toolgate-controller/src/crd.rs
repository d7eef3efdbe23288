//! The custom resources the controller reconciles. They live in
//! [`toolgate_k8s`] (shared with the webhook and the CLI); this module
//! re-exports them, with the CRD generator, under their historical path.

pub use toolgate_k8s::crd::*;
pub use toolgate_k8s::{crd_files, crdgen};

use std::path::Path;

use crate::error::ControllerError;

/// Writes every generated CRD file into `dir` (`toolgate crdgen --out`).
pub fn write_crds(dir: &Path) -> Result<(), ControllerError> {
    toolgate_k8s::write_crds(dir).map_err(|e| match e {
        toolgate_k8s::K8sError::Io(message) => ControllerError::Io(message),
        other => ControllerError::Io(other.to_string()),
    })
}
