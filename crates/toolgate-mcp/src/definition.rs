//! One announced tool as the gateway holds it: the digest a profile can
//! pin, its argument validator, and its `x-mcp-header` declarations.

use std::sync::Arc;

use serde_json::{Map, Value};
use toolgate_policy::Reason;

use crate::message;

/// Why the gateway refused a call on its own, before (or instead of) the
/// policy: the reason it is recorded with and the text the client reads.
pub(crate) type EdgeProblem = (Reason, String);

/// One announced tool: its pinnable digest and its argument validator.
#[derive(Clone)]
pub(crate) struct Definition {
    pub(crate) digest: String,
    /// Its `x-mcp-header` declarations.
    pub(crate) params: Vec<crate::param_headers::ParamHeader>,
    /// `Err` when the `inputSchema` is missing or unusable: calls are refused.
    pub(crate) validator: Result<Arc<jsonschema::Validator>, EdgeProblem>,
}

impl Definition {
    pub(crate) fn of(tool: &Value) -> Self {
        let unusable = |why: String| {
            (
                Reason::InvalidArguments,
                format!("invalid_arguments: {why}"),
            )
        };
        let validator = match tool.get("inputSchema") {
            Some(schema) => jsonschema::validator_for(schema)
                .map(Arc::new)
                .map_err(|e| unusable(format!("its inputSchema cannot be used: {e}"))),
            None => Err(unusable("it announced no inputSchema".to_owned())),
        };
        Self {
            digest: message::definition_digest(tool),
            params: tool
                .get("inputSchema")
                .map(crate::param_headers::declarations)
                .unwrap_or_default(),
            validator,
        }
    }

    /// A listed tool the gateway will not offer (`why`): which definition
    /// the client would act on is unknown, so it is treated as changed.
    pub(crate) fn withheld(why: &str) -> Self {
        Self {
            digest: "sha256:withheld".to_owned(),
            params: Vec::new(),
            validator: Err((
                Reason::ToolDefinitionChanged,
                format!("tool_definition_changed: {why}"),
            )),
        }
    }

    /// `Err` with the refusal when `arguments` do not fit the schema or the
    /// definition is unusable.
    pub(crate) fn check(&self, arguments: &Map<String, Value>) -> Result<(), EdgeProblem> {
        let validator = self.validator.as_ref().map_err(Clone::clone)?;
        validator
            .validate(&Value::Object(arguments.clone()))
            .map_err(|e| {
                let at = e.instance_path().to_string();
                let text = if at.is_empty() {
                    format!("invalid_arguments: {e}")
                } else {
                    format!("invalid_arguments: {at}: {e}")
                };
                (Reason::InvalidArguments, text)
            })
    }
}
