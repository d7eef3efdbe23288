//! Builders of the records the store suites write (intents, approvals,
//! decisions, profile loads) and the call an approval is consumed for.

use std::time::Duration;

use toolgate_store::{
    ApprovedCall, ChainedDecision, Checkpoint, DecisionRecord, NewApproval, NewIntent, ProfileLoad,
};

use super::unique;

/// The decision stream most tests append to (a sidecar's `{pod}/{nonce}`).
pub const S: &str = "pod-a/0190a000-0000-7000-8000-000000000001";

pub fn new_intent(run_id: &str, step: &str) -> NewIntent {
    NewIntent {
        tenant: "acme".into(),
        run_id: run_id.into(),
        step_id: step.into(),
        tool: "email.send".into(),
        args_digest: "sha256:abc".into(),
        call_digest: Some("sha256:call-abc".into()),
        decision_id: unique("dec"),
        risk: "high".into(),
        verification_probe: Some(serde_json::json!({"kind": "imap_sent", "message_id": "m1"})),
    }
}

/// Call digest of every approval `new_approval` makes.
pub const CALL: &str = "sha256:call";

/// The call `consume` is asked about, with [`CALL`] as its call digest.
pub fn call<'a>(tool: &'a str, args_digest: &'a str, policy_version: &'a str) -> ApprovedCall<'a> {
    ApprovedCall {
        tool,
        args_digest,
        call_digest: CALL,
        policy_version,
    }
}

pub fn new_approval(tenant: &str, invocation: &str, ttl: Duration) -> NewApproval {
    NewApproval {
        approval_id: None,
        invocation_id: invocation.into(),
        tenant: tenant.into(),
        run_id: "run-1".into(),
        tool: "fs.delete".into(),
        args_digest: "sha256:args".into(),
        call_digest: Some(CALL.into()),
        policy_version: "default@0123456789ab+h01234567".into(),
        decision_id: unique("dec"),
        requested_by: "agent@acme".into(),
        ttl,
        action: None,
        preview: None,
    }
}

pub fn record(i: usize) -> DecisionRecord {
    DecisionRecord {
        decision_id: format!("dec-{i}"),
        run_id: "run-1".into(),
        step_id: format!("step-{i}"),
        tool: "shell.exec".into(),
        verdict: if i.is_multiple_of(3) { "deny" } else { "allow" }.into(),
        reason: "rule_matched".into(),
        message: i.is_multiple_of(2).then(|| format!("message {i}")),
        matched_rule: Some("r1".into()),
        policy_version: "default@0123456789ab+h01234567".into(),
        risk: "low".into(),
        args_digest: format!("sha256:{i}"),
        call_digest: Some(format!("sha256:call-{i}")),
        definition_digest: (i % 4 == 1).then(|| format!("sha256:def-{i}")),
        created_at: jiff::Timestamp::now(),
    }
}

pub fn profile_load(version: &str, by: &str) -> ProfileLoad {
    ProfileLoad {
        profile: "default".into(),
        namespace: "agents".into(),
        policy_version: version.into(),
        spec_sha256: "a".repeat(64),
        hardline_sha256: "b".repeat(64),
        bundle_digest: Some("sha256:bundle".into()),
        loaded_by: by.into(),
    }
}

/// A checkpoint of `row`'s position as `toolgate audit archive` stores it
/// (the store keeps the envelope verbatim; signatures are the CLI's).
pub fn checkpoint_of(row: &ChainedDecision) -> Checkpoint {
    Checkpoint {
        tenant: row.tenant.clone(),
        stream: row.stream.clone(),
        seq: row.seq,
        hash: row.hash.clone(),
        at: jiff::Timestamp::now(),
        keyid: "test-key".into(),
        envelope: format!("{{\"test\":{}}}", row.seq),
    }
}
