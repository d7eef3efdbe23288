//! Approval fixtures: pending rows in the store, the mirrored request
//! objects deciding them, grant objects, and the profile versions the
//! approvers check looks up.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate_controller::approval;
use toolgate_controller::crd::Approval;
use toolgate_store::{DecisionRecord, NewApproval};

use super::NS;

pub fn grant(name: &str, decision: Option<&str>, expires: &str) -> Value {
    grant_by(name, decision, expires, "bob", &["platform-oncall"])
}

/// A grant decided by `user` in `groups` (safe-coding's approvers are
/// `group:platform-oncall`).
pub fn grant_by(
    name: &str,
    decision: Option<&str>,
    expires: &str,
    user: &str,
    groups: &[&str],
) -> Value {
    let mut spec = json!({"grant": {"profile": "safe-coding", "tool": "bash", "glob": "make *", "subjects": ["*"], "expiresAt": expires}});
    if let Some(d) = decision {
        spec["decision"] = json!(d);
        spec["decidedBy"] = json!(user);
        spec["decidedByGroups"] = json!(groups);
    }
    json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
           "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "resourceVersion": "1"},
           "spec": spec})
}

/// The escalating decision of `pending_row`: a flow rule asked because
/// run-1 carries `private`, set by an earlier `read_file` call.
pub const FLOW_RULE: &str = "flow:no-exfil when private";
pub const POLICY_VERSION: &str = "safe-coding@0123456789ab+h01234567";

fn record(
    id: &str,
    tool: &str,
    verdict: &str,
    reason: &str,
    rule: Option<&str>,
    at: jiff::Timestamp,
) -> DecisionRecord {
    DecisionRecord {
        decision_id: id.into(),
        run_id: "run-1".into(),
        step_id: "-".into(),
        tool: tool.into(),
        verdict: verdict.into(),
        reason: reason.into(),
        message: None,
        matched_rule: rule.map(Into::into),
        policy_version: POLICY_VERSION.into(),
        risk: "low".into(),
        args_digest: "sha256:abc".into(),
        call_digest: None,
        definition_digest: None,
        created_at: at,
    }
}

/// A pending approval of run-1 (tenant team-a) as a sidecar leaves it: the
/// row, its escalating decision (a flow rule) in the decision log, the
/// flow label that rule required and the run's earlier decisions, one of
/// them with a token in its rule (masked on the way to the Approval).
pub async fn pending_row(store: &toolgate_store::Store, ttl: Duration) -> toolgate_store::Approval {
    let now = jiff::Timestamp::from_millisecond(jiff::Timestamp::now().as_millisecond()).unwrap();
    let earlier = now - jiff::SignedDuration::from_secs(60);
    let set_at = now - jiff::SignedDuration::from_secs(30);
    let decisions = store.decisions();
    for r in [
        record(
            "dec-0",
            "shell",
            "deny",
            "deny_rule",
            Some("token=ghp_abcdefghijklmnopqrstuvwxyz"),
            earlier,
        ),
        record(
            "dec-label",
            "read_file",
            "allow",
            "allow_rule",
            Some("rules[0]"),
            set_at,
        ),
        record(
            "dec-1",
            "bash",
            "escalate",
            "flow_escalate",
            Some(FLOW_RULE),
            now,
        ),
    ] {
        decisions
            .append("team-a", "agent-0/stream", r)
            .await
            .unwrap();
    }
    store
        .flow_labels()
        .add(
            "team-a",
            toolgate_policy::FlowScope::Run,
            "run-1",
            &["private"],
            "dec-label",
            set_at,
        )
        .await
        .unwrap();
    store
        .approvals()
        .request(
            NewApproval {
                approval_id: Some("01J0APPROVAL".into()),
                invocation_id: "inv-1".into(),
                tenant: "team-a".into(),
                run_id: "run-1".into(),
                tool: "bash".into(),
                args_digest: "sha256:abc".into(),
                call_digest: None,
                policy_version: POLICY_VERSION.into(),
                decision_id: "dec-1".into(),
                requested_by: "sidecar/agent-0".into(),
                ttl,
                action: None,
                preview: None,
            },
            now,
        )
        .await
        .unwrap()
}

pub fn as_object(a: &Approval) -> Value {
    let mut v = serde_json::to_value(a).unwrap();
    v["metadata"]["uid"] = json!("uid-apr");
    v["metadata"]["resourceVersion"] = json!("1");
    v["metadata"]["generation"] = json!(1);
    v
}

/// The profile every escalation of `pending_row` (tenant team-a) answers to.
pub const TEAM_A_PROFILE: &str =
    "/apis/toolgate.dev/v1alpha1/namespaces/team-a/policyprofiles/safe-coding";

/// Records that the controller published `version` of safe-coding in `ns`.
pub async fn record_version(store: &toolgate_store::Store, ns: &str, version: &str) {
    store
        .profiles()
        .record_profile_load(
            toolgate_store::ProfileLoad {
                profile: "safe-coding".into(),
                namespace: ns.into(),
                policy_version: version.into(),
                spec_sha256: "0".repeat(64),
                hardline_sha256: "1".repeat(64),
                bundle_digest: None,
                loaded_by: "toolgate-controller".into(),
            },
            jiff::Timestamp::now(),
        )
        .await
        .unwrap();
}

/// The mirrored request object for `row`, decided by `by` in `groups`.
pub fn decided(row: &toolgate_store::Approval, by: Option<&str>, groups: &[&str]) -> Approval {
    let mut obj = approval::object_for(row, NS);
    obj.spec.decision = Some(toolgate_controller::crd::Decision::Approved);
    obj.spec.decided_by = by.map(Into::into);
    obj.spec.decided_by_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    serde_json::from_value(as_object(&obj)).unwrap()
}
