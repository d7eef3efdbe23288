//! The CRD manifests under `crds/`, generated from the Rust types.
//!
//! `toolgate crdgen` prints or writes them; a test in the controller fails
//! when the committed files drift from the types.

use std::path::Path;

use kube::CustomResourceExt;

use crate::cancellation::RunCancellation;
use crate::crd::{Approval, PolicyProfile};
use crate::error::K8sError;

/// File names of the generated CRDs under `crds/`, with their YAML.
pub fn crd_files() -> Vec<(&'static str, String)> {
    vec![
        (
            "policyprofiles.toolgate.dev.yaml",
            to_yaml(&PolicyProfile::crd()),
        ),
        ("approvals.toolgate.dev.yaml", to_yaml(&Approval::crd())),
        (
            "runcancellations.toolgate.dev.yaml",
            to_yaml(&RunCancellation::crd()),
        ),
    ]
}

fn to_yaml(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> String {
    let body = serde_yaml::to_string(crd).expect("a CRD serializes to YAML");
    format!(
        "# Generated from the Rust types in crates/toolgate-k8s/src/.\n\
         # Do not edit: regenerate with `cargo run -p toolgate -- crdgen --out crds`.\n\
         {body}"
    )
}

/// The YAML of every CRD as one multi-document stream (`kubectl apply -f -`).
pub fn crdgen() -> String {
    crd_files()
        .into_iter()
        .map(|(_, yaml)| yaml)
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Writes every CRD file of [`crd_files`] into `dir` (`toolgate crdgen --out`).
pub fn write_crds(dir: &Path) -> Result<(), K8sError> {
    std::fs::create_dir_all(dir).map_err(|e| K8sError::Io(format!("{}: {e}", dir.display())))?;
    for (name, yaml) in crd_files() {
        let path = dir.join(name);
        std::fs::write(&path, yaml)
            .map_err(|e| K8sError::Io(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}
