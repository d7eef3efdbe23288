//! The one error type of this crate, with stable machine-readable codes.

/// Why a profile, grant or call was rejected. Each variant has a stable
/// [`code`](PolicyError::code) and its message names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The text is not valid YAML or JSON, or has the wrong shape.
    #[error("{field}: {message}")]
    Parse {
        /// Dotted path of the field, or `<document>`.
        field: String,
        /// What the parser said.
        message: String,
    },
    /// A field that the model does not define.
    #[error("{field}: unknown field `{name}`")]
    UnknownField {
        /// Dotted path of the object holding the field.
        field: String,
        /// The unknown field's name.
        name: String,
    },
    /// `spec.mode` is not one of `allowAll`, `denyAll`, `rules`.
    #[error("{field}: unknown mode `{value}`, expected one of allowAll, denyAll, rules")]
    InvalidMode {
        /// Always `spec.mode`.
        field: String,
        /// The value found.
        value: String,
    },
    /// A tool named by rules or aliases has no `spec.effects` entry.
    #[error("{field}: tool `{tool}` has no entry in spec.effects")]
    IncompleteEffects {
        /// Where the tool is named.
        field: String,
        /// The tool without an effects entry.
        tool: String,
    },
    /// A glob does not compile.
    #[error("{field}: invalid glob `{glob}`: {message}")]
    InvalidGlob {
        /// Path of the glob, e.g. `spec.rules.bash.allow[1]`.
        field: String,
        /// The glob text.
        glob: String,
        /// Why it does not compile.
        message: String,
    },
    /// A hardline CIDR is not a literal network.
    #[error("{field}: invalid CIDR `{value}` (literal IP networks only, e.g. 10.0.0.0/8)")]
    InvalidCidr {
        /// Path of the CIDR entry.
        field: String,
        /// The text found.
        value: String,
    },
    /// An alias is ambiguous, self-referential or chained.
    #[error("{field}: {message}")]
    InvalidAlias {
        /// Path of the alias entry.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A value is out of range or otherwise not acceptable.
    #[error("{field}: {message}")]
    InvalidValue {
        /// Path of the value.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// `apiVersion` or `kind` is not a toolgate PolicyProfile.
    #[error("{field}: {message}")]
    WrongKind {
        /// `apiVersion` or `kind`.
        field: String,
        /// What was expected.
        message: String,
    },
    /// An escalate glob every call of which the tiers before it decide
    /// (hardline, shell control, deny, allow), some allowed: those calls
    /// run without the human the author asked for. Raised by admission
    /// only ([`crate::analyze::admission_check`]), never when a stored
    /// profile is loaded.
    #[error(
        "{field}: escalate glob `{glob}` of tool `{tool}` never asks a human: every call it \
         matches is decided first, and calls such as `{witness}` are allowed without approval \
         by {} (the tiers run deny → allow → escalate); remove or narrow that allow glob, or \
         move the pattern to deny",
        .allowed_by.join(", ")
    )]
    ShadowedEscalate {
        /// Path of the escalate glob, e.g. `spec.rules.bash.escalate[0]`.
        field: String,
        /// The canonical tool (a `*` glob: the first tool that shadows it).
        tool: String,
        /// The escalate glob, escaped and capped.
        glob: String,
        /// Allow globs that allow the witness, as "`glob` (field)".
        allowed_by: Vec<String>,
        /// A match text the escalate glob matches and an allow glob
        /// allows, escaped and capped.
        witness: String,
    },
    /// Call arguments are not a JSON object or otherwise unusable.
    #[error("arguments: {0}")]
    InvalidArguments(String),
    /// A run id outside the run-id alphabet (see [`crate::ids`]).
    #[error("run_id: {message}")]
    InvalidRunId {
        /// What is wrong, with the refused text escaped and cut short.
        message: String,
    },
    /// An agent-supplied identifier that breaks the one id rule (see
    /// [`crate::ids::Id`]).
    #[error("{message}")]
    InvalidId {
        /// What is wrong, with the refused text escaped and cut short.
        message: String,
    },
    /// A cancellation scope that is not `pod NAME`, `profile NAME` or
    /// `namespace` (see [`crate::ids::Scope`]).
    #[error("scope: {message}")]
    InvalidScope {
        /// What is wrong.
        message: String,
    },
}

impl PolicyError {
    /// Stable snake_case code for `{error: {code, message}}` bodies.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Parse { .. } => "profile_parse",
            Self::UnknownField { .. } => "profile_unknown_field",
            Self::InvalidMode { .. } => "profile_invalid_mode",
            Self::IncompleteEffects { .. } => "profile_incomplete_effects",
            Self::InvalidGlob { .. } => "profile_invalid_glob",
            Self::InvalidCidr { .. } => "profile_invalid_cidr",
            Self::InvalidAlias { .. } => "profile_invalid_alias",
            Self::InvalidValue { .. } => "profile_invalid_value",
            Self::WrongKind { .. } => "profile_wrong_kind",
            Self::ShadowedEscalate { .. } => "shadowed_escalate",
            Self::InvalidArguments(_) => "invalid_arguments",
            Self::InvalidRunId { .. } => "invalid_run_id",
            Self::InvalidId { .. } => "invalid_request",
            Self::InvalidScope { .. } => "invalid_scope",
        }
    }

    /// Dotted path of the offending field, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Parse { field, .. }
            | Self::UnknownField { field, .. }
            | Self::InvalidMode { field, .. }
            | Self::IncompleteEffects { field, .. }
            | Self::InvalidGlob { field, .. }
            | Self::InvalidCidr { field, .. }
            | Self::InvalidAlias { field, .. }
            | Self::InvalidValue { field, .. }
            | Self::WrongKind { field, .. }
            | Self::ShadowedEscalate { field, .. } => Some(field),
            Self::InvalidArguments(_) => None,
            Self::InvalidRunId { .. } => Some("run_id"),
            Self::InvalidId { .. } => None,
            Self::InvalidScope { .. } => Some("scope"),
        }
    }

    /// The error as the JSON body every toolgate API returns.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}
