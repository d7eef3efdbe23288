//! The sidecar's answers with no Rust type of their own: those written as
//! `json!` literals (`POST /v1/intents`, `POST /v1/tools/visible`).

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

/// Answer of `POST /v1/tools/visible`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VisibleTools {
    /// The asked names the policy lets the run see.
    pub tools: Vec<String>,
}
