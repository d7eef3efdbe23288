//! What the decision log keeps of a call besides its digests
//! (`spec.audit`), so that a candidate policy can be replayed against what
//! agents actually asked.
//!
//! The log holds an arguments digest, which is enough to prove a record but
//! not to decide it again. With `recordInputs` a sidecar also stores the
//! call itself ([`RecordedCall`]) beside its decision: `full` as it was,
//! `masked` with secrets replaced ([`mask_arguments`]). The gate puts the
//! SHA-256 of the stored text in its decision's chained message, so the
//! chain vouches for every stored input, masked or not; a masked one that
//! masking changed is still not replayed: replay reports it instead of
//! deciding it on text the agent never sent.

use jiff::SignedDuration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::PolicyError;
use crate::flows::Provenance;
use crate::preview::{MASK, is_secret_name, mask_secrets};

/// How long an input is kept when `spec.audit.inputRetention` is not set.
pub const DEFAULT_INPUT_RETENTION: SignedDuration = SignedDuration::from_hours(30 * 24);

/// The longest `inputRetention` accepted (ten years).
pub const MAX_INPUT_RETENTION: SignedDuration = SignedDuration::from_hours(3650 * 24);

/// `spec.audit`: what the decision log records beyond digests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditSettings {
    /// `none` (default), `masked` or `full`: whether each decided call's
    /// input is stored beside its decision, for `toolgate replay`.
    #[serde(default)]
    pub record_inputs: RecordInputs,
    /// How long a recorded input is kept (`30d` by default; `7d`, `12h`,
    /// `PT48H`). Only inputs are pruned by it, never the decision chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_retention: Option<String>,
}

crate::wire_enum! {
    /// Whether and how a decided call's input is kept.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
    pub enum RecordInputs {
        /// Only the digests (the default).
        #[default]
        None = "none",
        /// The call with secrets masked: replayable where masking changed nothing.
        Masked = "masked",
        /// The call as the agent sent it.
        Full = "full",
    }
}

/// What a policy asks the sidecar to keep of each call it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputRecording {
    /// Store the masked call instead of the call.
    pub masked: bool,
    /// How long each input is kept.
    pub retention: SignedDuration,
}

/// Checks `spec.audit` and reads what it asks for; `None` when inputs are
/// not recorded.
pub(crate) fn input_recording(
    settings: Option<&AuditSettings>,
) -> Result<Option<InputRecording>, PolicyError> {
    let Some(settings) = settings else {
        return Ok(None);
    };
    let retention = match settings.input_retention.as_deref() {
        None => DEFAULT_INPUT_RETENTION,
        Some(text) => toolgate_contract::parse_duration(text)
            .map_err(|message| invalid("spec.audit.inputRetention", message))?,
    };
    if retention > MAX_INPUT_RETENTION {
        return Err(invalid(
            "spec.audit.inputRetention",
            "must be at most 3650d".into(),
        ));
    }
    if settings.record_inputs == RecordInputs::None && settings.input_retention.is_some() {
        return Err(invalid(
            "spec.audit.inputRetention",
            "is only meaningful with recordInputs masked or full".into(),
        ));
    }
    Ok(match settings.record_inputs {
        RecordInputs::None => None,
        mode => Some(InputRecording {
            masked: mode == RecordInputs::Masked,
            retention,
        }),
    })
}

fn invalid(field: &str, message: String) -> PolicyError {
    PolicyError::InvalidValue {
        field: field.into(),
        message,
    }
}

impl crate::CompiledPolicy {
    /// What this policy asks to keep of each decided call (`spec.audit`);
    /// `None` when it keeps only digests.
    pub fn input_recording(&self) -> Option<InputRecording> {
        self.input_recording
    }
}

/// One decided call as stored for replay: what the evaluator read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedCall {
    /// The tool as the agent named it.
    pub tool: String,
    /// The action, when the call had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The arguments (masked when recorded `masked`).
    pub arguments: Map<String, Value>,
    /// For a workspace read: the provenance of the file read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

impl RecordedCall {
    /// The stored text: RFC 8785 canonical JSON.
    pub fn to_canonical(&self) -> String {
        String::from_utf8(crate::digest::canonical_json(self)).unwrap_or_default()
    }

    /// Reads a stored input back.
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("unreadable recorded input: {e}"))
    }

    /// The call as evaluated.
    pub fn call(&self) -> crate::Call<'_> {
        crate::Call {
            tool: &self.tool,
            action: self.action.as_deref(),
            arguments: &self.arguments,
        }
    }

    /// Whether these arguments are the ones `args_digest` names: true for a
    /// full input, and for a masked one that masking left unchanged.
    pub fn matches_digest(&self, args_digest: &str) -> bool {
        crate::args_digest(&self.arguments) == args_digest
    }
}

/// `arguments` with secrets masked: every string value through the
/// approval preview's masking; the whole value of an argument whose name
/// says secret (`password`, `api_key`, `DB_TOKEN`, ...) at any depth; the
/// array element after a secret flag (`["--password", "x"]`); and the
/// `value` of a `{name, value}` pair whose name says secret (environment
/// lists).
pub fn mask_arguments(arguments: &Map<String, Value>) -> Map<String, Value> {
    let pair_is_secret = ["name", "key"]
        .iter()
        .filter_map(|k| arguments.get(*k).and_then(Value::as_str))
        .any(is_secret_name);
    arguments
        .iter()
        .map(|(name, value)| {
            let secret = is_secret_name(name)
                || (pair_is_secret && matches!(name.as_str(), "value" | "val"));
            let value = if secret {
                Value::String(MASK.into())
            } else {
                mask_value(value)
            };
            (name.clone(), value)
        })
        .collect()
}

fn mask_value(value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(mask_secrets(text)),
        Value::Array(items) => {
            let mut after_secret_flag = false;
            let masked = items
                .iter()
                .map(|item| {
                    let out = if after_secret_flag {
                        Value::String(MASK.into())
                    } else {
                        mask_value(item)
                    };
                    after_secret_flag = item
                        .as_str()
                        .and_then(|t| t.strip_prefix("--").or_else(|| t.strip_prefix('-')))
                        .is_some_and(|flag| !flag.contains('=') && is_secret_name(flag));
                    out
                })
                .collect();
            Value::Array(masked)
        }
        Value::Object(map) => Value::Object(mask_arguments(map)),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(mode: RecordInputs, retention: Option<&str>) -> AuditSettings {
        AuditSettings {
            record_inputs: mode,
            input_retention: retention.map(str::to_owned),
        }
    }

    #[test]
    fn retention_is_checked_and_defaults_to_thirty_days() {
        let full = input_recording(Some(&settings(RecordInputs::Full, None))).unwrap();
        assert_eq!(
            full,
            Some(InputRecording {
                masked: false,
                retention: DEFAULT_INPUT_RETENTION
            })
        );
        let masked = input_recording(Some(&settings(RecordInputs::Masked, Some("7d")))).unwrap();
        assert_eq!(masked.unwrap().retention, SignedDuration::from_hours(168));
        assert_eq!(input_recording(None).unwrap(), None);
        for (mode, bad) in [
            (RecordInputs::Full, "forever"),
            (RecordInputs::Full, "3651d"),
            (RecordInputs::Full, "0s"),
            (RecordInputs::None, "7d"),
        ] {
            let err = input_recording(Some(&settings(mode, Some(bad)))).unwrap_err();
            assert!(
                err.to_string().contains("spec.audit.inputRetention"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn masking_hides_secrets_by_shape_and_by_name_at_any_depth() {
        let args = json!({
            "command": "curl -H 'Authorization: Bearer abcdefghijkl' https://x",
            "env": {"API_KEY": "plain", "list": ["ghp_abcdefghijklmnopqrstuvwx", 3]},
            "password": {"nested": "value"},
            "path": "/src/lib.rs",
        });
        let masked = mask_arguments(args.as_object().unwrap());
        let text = serde_json::to_string(&masked).unwrap();
        for secret in ["abcdefghijkl", "plain", "ghp_", "value"] {
            assert!(!text.contains(secret), "{secret} left in {text}");
        }
        assert_eq!(masked["path"], "/src/lib.rs");
        assert_eq!(masked["env"]["list"][1], 3);
        assert_eq!(masked["password"], MASK);
        let more = json!({
            "argv": ["mysql", "--password", "s3cr3t-a", "--user", "bob"],
            "env": [{"name": "DB_PASSWORD", "value": "s3cr3t-b"}, {"name": "HOME", "value": "/root"}],
            "auth": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3In0.s3cr3t-c-signature",
            "max_tokens": 512,
            "X-Api-Key": "s3cr3t-d",
        });
        let masked = mask_arguments(more.as_object().unwrap());
        let text = serde_json::to_string(&masked).unwrap();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert_eq!(
            masked["max_tokens"], 512,
            "a word containing `token` is not a secret"
        );
        assert_eq!(masked["argv"][4], "bob");
        assert_eq!(masked["env"][1]["value"], "/root");
    }

    #[test]
    fn a_recorded_call_reads_back_and_matches_its_digest_only_unmasked() {
        let args = json!({"command": "echo token=s3cr3t"});
        let args = args.as_object().unwrap();
        let digest = crate::args_digest(args);
        let full = RecordedCall {
            tool: "bash".into(),
            action: None,
            arguments: args.clone(),
            provenance: None,
        };
        let back = RecordedCall::parse(&full.to_canonical()).unwrap();
        assert_eq!(back, full);
        assert!(back.matches_digest(&digest));
        let masked = RecordedCall {
            arguments: mask_arguments(args),
            ..full
        };
        assert!(!masked.matches_digest(&digest));
        assert!(RecordedCall::parse(r#"{"tool":"x","arguments":{},"extra":1}"#).is_err());
    }
}
