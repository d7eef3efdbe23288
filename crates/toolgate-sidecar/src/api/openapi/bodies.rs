//! The sidecar's own bodies with no Rust type of their own: the answers
//! written as `json!` literals (`POST /v1/intents`, `POST
//! /v1/tools/visible`), and the visible-tools request, whose type in
//! [`crate::api`] derives no `JsonSchema` yet (held to it by the test
//! below until it does).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Answer of `POST /v1/intents`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BegunIntent {
    /// The new intent's id.
    pub intent_id: String,
    /// `pending`.
    pub status: String,
}

/// Body of `POST /v1/tools/visible`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VisibleToolsRequest {
    /// Policy tool names (aliases apply), e.g. `fs.read_file`.
    #[schemars(length(max = crate::api::MAX_VISIBLE_QUERY))]
    pub tools: Vec<String>,
    /// Definition digests the server announced, by policy tool name.
    #[serde(default)]
    pub definitions: std::collections::BTreeMap<String, String>,
}

/// Answer of `POST /v1/tools/visible`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VisibleTools {
    /// The asked names the policy lets the run see.
    pub tools: Vec<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// A full request reads as the sidecar's type and as this one, and
    /// this one writes it back unchanged.
    #[test]
    fn the_visible_tools_request_is_the_sidecar_s() {
        let value = json!({"tools": ["fs.read"], "definitions": {"fs.read": "sha256:d"}});
        let _: crate::api::VisibleToolsRequest = serde_json::from_value(value.clone()).unwrap();
        let here: super::VisibleToolsRequest = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&here).unwrap(), value);
    }
}
