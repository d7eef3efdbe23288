//! The order a call is decided in: hardline before every rule, the tiers
//! as the profile defines them, and no live bundle denying everything.

use serde_json::json;
use toolgate_gate::NO_POLICY;
use toolgate_policy::{Decision, Reason, Risk};

use crate::common::*;

/// Hardline paths and commands deny a call an allow rule (or `allowAll`)
/// would let through.
#[tokio::test]
async fn hardline_beats_every_rule() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let v = g
            .authorize("bash", json!({"command": "mkfs /dev/sda"}), &run)
            .await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::HardlineCommand));
        assert_eq!(
            v.verdict.matched_rule.as_deref(),
            Some("hardline:commands:mkfs*")
        );
        let v = g
            .authorize("reader", json!({"path": "app/.env"}), &run)
            .await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::HardlinePath));
        // The same tools pass where no hardline glob matches.
        let v = g
            .authorize("reader", json!({"path": "app/main.rs"}), &run)
            .await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));

        let all = "mode: allowAll\nhardline: {paths: [\"**/.env\"]}\neffects:\n  \
                   reader: {sideEffect: WORKSPACE_READ, risk: low}\n";
        let g = TestGate::start(url, Bundle::Live(all)).await;
        let v = g.authorize("reader", json!({"path": ".env"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::HardlinePath));
        let v = g.authorize("reader", json!({"path": "x"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::ModeAllowAll));
    });
}

/// For one match text the first matching tier wins, deny before allow
/// before escalate; over several match texts (an array argument) the
/// strictest answer stands: deny beats escalate beats allow.
#[tokio::test]
async fn tiers_decide_in_the_profiles_order() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let bash = async |command: serde_json::Value| {
            g.authorize("bash", json!({ "command": command }), &run)
                .await
        };
        // `escalate: ["*"]` matches all three; the earlier tiers win.
        let v = bash(json!("rm -rf build")).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::DenyRule));
        assert_eq!(v.verdict.matched_rule.as_deref(), Some("deny:bash:rm *"));
        let v = bash(json!("ls -la")).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        let v = bash(json!("git push")).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::EscalateRule));
        // Several texts: the strictest.
        let v = bash(json!(["ls", "git push"])).await;
        assert_eq!(outcome(&v), (Decision::Escalate, Reason::EscalateRule));
        let v = bash(json!(["ls", "git push", "rm x"])).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::DenyRule));
        let v = bash(json!(["ls", "git status"])).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
        // Shell control is refused before any allow rule.
        let v = bash(json!("ls; rm -rf /")).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::ShellControl));
        // A tool the profile does not declare is denied.
        let v = g.authorize("curl", json!({"url": "x"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::UnknownTool));
    });
}

/// A pinned tool is decided only for the definition that was reviewed:
/// without it, or with another, the call is `tool_definition_changed`.
#[tokio::test]
async fn a_pinned_tool_needs_its_definition() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let run = unique("run");
        let pinned = format!("sha256:{}", "a".repeat(64));
        let other = format!("sha256:{}", "b".repeat(64));
        for digest in [None, Some(other)] {
            let mut req = call("fs.read", json!({"path": "a"}), &run);
            req.definition_digest = digest.map(|d| toolgate_policy::Id::parse(d).unwrap());
            let v = g.gate.authorize(&req).await.unwrap();
            assert_eq!(outcome(&v), (Decision::Deny, Reason::ToolDefinitionChanged));
            assert_eq!(
                v.verdict.matched_rule.as_deref(),
                Some(format!("definition:{pinned}").as_str())
            );
        }
        let mut req = call("fs.read", json!({"path": "a"}), &run);
        req.definition_digest = Some(toolgate_policy::Id::parse(pinned.clone()).unwrap());
        let v = g.gate.authorize(&req).await.unwrap();
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
    });
}

/// Without a bundle every call is denied `no_bundle` (policy version
/// `none`, high risk, so durably in the log before the answer).
#[tokio::test]
async fn no_bundle_denies_everything() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::None).await;
        let run = unique("run");
        for tool in ["reader", "bash", "deploy", "anything"] {
            let v = g.authorize(tool, json!({"command": "ls"}), &run).await;
            assert_eq!(outcome(&v), (Decision::Deny, Reason::NoBundle), "{tool}");
            assert_eq!(v.verdict.policy_version, NO_POLICY);
            assert_eq!(v.verdict.risk, Risk::High);
            assert!(v.approval_id.is_none());
            // Recorded before the answer: no waiting for the writer.
            let log = g.log().await;
            let row = log.iter().find(|r| r.record.decision_id == v.decision_id);
            let row = row.unwrap_or_else(|| panic!("{tool}: not in the log"));
            assert_eq!(row.record.reason, "no_bundle");
            assert_eq!(row.record.verdict, "deny");
        }
        assert!(g.approvals().await.is_empty());
        assert_eq!(g.verified_rows().await, 4);
    });
}

/// A held bundle past its `expiresAt` denies every call `bundle_expired`,
/// under its own policy version; nothing is escalated.
#[tokio::test]
async fn an_expired_bundle_denies_everything() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Expired(SPEC)).await;
        let held = g.gate.enforced().expect("the expired bundle is still held");
        let run = unique("run");
        for (tool, args) in [
            ("reader", json!({"path": "a"})),
            ("bash", json!({"command": "ls"})),
            ("deploy", json!({"env": "prod"})),
        ] {
            let v = g.authorize(tool, args, &run).await;
            assert_eq!(
                outcome(&v),
                (Decision::Deny, Reason::BundleExpired),
                "{tool}"
            );
            assert_eq!(v.verdict.policy_version, held.policy_version);
            let row = g.logged(&v.decision_id).await;
            assert_eq!(row.reason, "bundle_expired");
        }
        assert!(
            g.approvals().await.is_empty(),
            "an expired bundle asked a human"
        );
    });
}

/// A call naming another tenant than the gate's is refused before it is
/// decided, and nothing is recorded.
#[tokio::test]
async fn another_tenants_call_is_refused_unrecorded() {
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let mut req = call("bash", json!({"command": "ls"}), &unique("run"));
        req.tenant = Some(unique("other"));
        let err = g.gate.authorize(&req).await.unwrap_err();
        assert_eq!(err.code(), "invalid_request");
        assert!(g.log().await.is_empty());
        req.tenant = Some(g.tenant.clone());
        let v = g.gate.authorize(&req).await.unwrap();
        assert_eq!(outcome(&v), (Decision::Allow, Reason::AllowRule));
    });
}

/// The tools a listing may show are those the live profile could allow or
/// escalate, a pinned one only with its reviewed definition; none without
/// a live bundle.
#[tokio::test]
async fn only_tools_that_could_pass_are_visible() {
    each_backend!(|url| {
        let asked: Vec<String> = ["reader", "deploy", "fs.read", "nosuch"]
            .map(String::from)
            .into();
        let mut definitions = std::collections::HashMap::new();
        let g = TestGate::start(url, Bundle::Live(SPEC)).await;
        let visible = g.gate.visible_tools(&asked, &definitions).unwrap();
        assert_eq!(visible, ["reader", "deploy"]);
        definitions.insert("fs.read".to_owned(), format!("sha256:{}", "a".repeat(64)));
        let visible = g.gate.visible_tools(&asked, &definitions).unwrap();
        assert_eq!(visible, ["reader", "deploy", "fs.read"]);
        for bundle in [Bundle::None, Bundle::Expired(SPEC)] {
            let g = TestGate::start(url, bundle).await;
            assert!(
                g.gate
                    .visible_tools(&asked, &definitions)
                    .unwrap()
                    .is_empty()
            );
        }
    });
}
