//! Recorded inputs (`spec.audit.recordInputs`): the call itself, kept
//! beside its decision for `toolgate replay`. The input's SHA-256 goes in
//! the decision's chained message, so the log vouches for every part of
//! the stored input (action, provenance, a masked text), not only for the
//! arguments its `args_digest` names.

use std::sync::Arc;

use jiff::Timestamp;
use toolgate_policy::Provenance;
use toolgate_policy::audit::{RecordedCall, mask_arguments};
use toolgate_store::{DecisionInput, MAX_INPUT_BYTES};

use crate::{AuthorizeRequest, Enforced};

/// The input to record for a call and its SHA-256, when the enforced
/// profile records inputs; `None` otherwise, or when the input is larger
/// than [`MAX_INPUT_BYTES`] (replay then reports the call as having none).
pub(super) fn recorded_input(
    enforced: &Option<Arc<Enforced>>,
    req: &AuthorizeRequest,
    now: Timestamp,
    decision_id: &str,
    provenance: Option<Provenance>,
) -> Option<(DecisionInput, String)> {
    let recording = enforced.as_ref()?.policy.input_recording()?;
    let arguments = if recording.masked {
        mask_arguments(&req.arguments)
    } else {
        req.arguments.clone()
    };
    let call = RecordedCall {
        tool: req.tool.to_string(),
        action: req.action.as_ref().map(ToString::to_string),
        arguments,
        provenance,
    }
    .to_canonical();
    if call.len() > MAX_INPUT_BYTES {
        tracing::warn!(decision = %decision_id, bytes = call.len(), "input too large to record");
        return None;
    }
    let sha = toolgate_policy::digest::sha256_hex(call.as_bytes());
    let input = DecisionInput {
        decision_id: decision_id.to_owned(),
        call,
        masked: recording.masked,
        recorded_at: now,
        expires_at: now.checked_add(recording.retention).unwrap_or(now),
    };
    Some((input, sha))
}
