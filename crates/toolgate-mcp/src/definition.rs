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

#[cfg(test)]
mod schema_fuzz {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::Definition;

    fn schema() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!({"type": "string"})),
            Just(json!({"type": "integer", "minimum": 0})),
            Just(json!({"pattern": "^(a+)+$"})),
            Just(json!({"$ref": "#/definitions/missing"})),
            Just(json!({"$ref": "https://example.com/remote.json"})),
            Just(json!({"format": "email"})),
            Just(json!({"type": "nonsense"})),
            Just(json!(true)),
            Just(json!(7)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::btree_map("[a-z]{1,6}", inner.clone(), 0..4).prop_map(|props| {
                    json!({"type": "object", "properties": props, "required": ["a"]})
                }),
                prop::collection::vec(inner.clone(), 0..3).prop_map(|all| json!({"allOf": all})),
                inner.prop_map(|items| json!({"type": "array", "items": items})),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("TOOLGATE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(128)
        ))]

        /// A hostile server's schema compiles or is refused, and arguments
        /// are checked against it, without a panic or a remote fetch.
        #[test]
        fn any_announced_schema_is_usable_or_refused(s in schema(), arg in ".{0,20}", n in any::<i64>()) {
            let tool = json!({"name": "t", "inputSchema": s});
            let definition = Definition::of(&tool);
            let args = json!({"a": arg, "b": n, "c": [arg]});
            let result = definition.check(args.as_object().unwrap());
            if definition.validator.is_err() {
                prop_assert!(result.is_err());
            }
        }
    }
}
