//! The one error type of the controller, with stable machine-readable codes.

/// Why a reconcile, a startup step or a plugin command failed. Each variant
/// has a stable [`code`](ControllerError::code), which is also the `error`
/// label of `toolgate_reconcile_errors_total` (a fixed set, see [`ControllerError::CODES`]).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The toolgate database refused or failed.
    #[error("store: {0}")]
    Store(#[from] toolgate_store::StoreError),
    /// Building or signing a bundle failed.
    #[error("bundle: {0}")]
    Bundle(#[from] toolgate_bundle::BundleError),
    /// The signing key Secret or trust ConfigMap is unusable.
    #[error("signing key: {0}")]
    Key(String),
    /// An object lacks something the controller needs (name, namespace, a field).
    #[error("invalid object: {0}")]
    InvalidObject(String),
    /// Kubernetes configuration (kubeconfig / in-cluster) could not be loaded.
    #[error("kubernetes configuration: {0}")]
    Config(String),
    /// Reading or writing a local file failed.
    #[error("io: {0}")]
    Io(String),
    /// A JSON or YAML value could not be encoded or decoded.
    #[error("serialization: {0}")]
    Serialization(String),
    /// The finalizer helper failed (adding or removing `toolgate.dev/cleanup`).
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// Leadership was lost while running.
    #[error("leader election: {0}")]
    Leader(String),
    /// Reading or writing a file of the decision archive failed.
    #[error("{path}: {source}")]
    File {
        /// The file or directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The decision archive cannot go on from what an earlier run left
    /// (a segment listed but not pruned that no longer fits the database).
    #[error("archive: {0}")]
    Archive(String),
}

impl ControllerError {
    /// Every code [`code`](Self::code) can return.
    pub const CODES: &'static [&'static str] = &[
        "kube_api",
        "store",
        "bundle",
        "signing_key",
        "invalid_object",
        "kube_config",
        "io",
        "serialization",
        "finalizer",
        "leader_election",
        "archive_file",
        "archive_inconsistent",
    ];

    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kube_api",
            Self::Store(_) => "store",
            Self::Bundle(_) => "bundle",
            Self::Key(_) => "signing_key",
            Self::InvalidObject(_) => "invalid_object",
            Self::Config(_) => "kube_config",
            Self::Io(_) => "io",
            Self::Serialization(_) => "serialization",
            Self::Finalizer(_) => "finalizer",
            Self::Leader(_) => "leader_election",
            Self::File { .. } => "archive_file",
            Self::Archive(_) => "archive_inconsistent",
        }
    }
}

impl From<serde_json::Error> for ControllerError {
    fn from(e: serde_json::Error) -> Self {
        Self::Serialization(e.to_string())
    }
}

impl From<kube::runtime::finalizer::Error<ControllerError>> for ControllerError {
    fn from(e: kube::runtime::finalizer::Error<ControllerError>) -> Self {
        use kube::runtime::finalizer::Error as F;
        match e {
            F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner,
            F::AddFinalizer(e) | F::RemoveFinalizer(e) => Self::Kube(e),
            other => Self::Finalizer(other.to_string()),
        }
    }
}
