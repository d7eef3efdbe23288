//! Trial modes at the gate (`enforcement: warn | dryRun`): a would-be
//! refusal is allowed and recorded with what enforcement would have
//! answered, while hardline rules, unknown tools, a changed definition, a
//! cancelled run and the fail-closed reasons bind in every mode.

use jiff::Timestamp;
use serde_json::{Value, json};
use toolgate_gate::runs::CancelRequest;
use toolgate_policy::{Decision, Reason};

use crate::common::*;

/// A would-be denial or escalation is allowed `not_enforced`, carrying
/// the would-fields and (under `warn`) a warning; the log's message holds
/// them; no human is asked. A used-up budget only reports too.
#[tokio::test]
async fn would_be_refusals_are_allowed_and_recorded() {
    let spec = format!("{SPEC}enforcement: warn\nbudgets: {{maxCallsPerRun: 2}}\n");
    each_backend!(|url| {
        let g = TestGate::start(url, Bundle::Live(&spec)).await;
        let run = unique("run");
        for (args, would_verdict, would_reason) in [
            (
                json!({"command": "rm -rf x"}),
                Decision::Deny,
                Reason::DenyRule,
            ),
            (
                json!({"command": "git push"}),
                Decision::Escalate,
                Reason::EscalateRule,
            ),
        ] {
            let v = g.authorize("bash", args, &run).await;
            assert_eq!(outcome(&v), (Decision::Allow, Reason::NotEnforced));
            assert!(!v.verdict.enforced);
            assert_eq!(v.verdict.would_verdict, Some(would_verdict));
            assert_eq!(v.verdict.would_reason, Some(would_reason));
            assert!(v.verdict.warning.is_some());
            assert!(
                v.verdict.intent_required,
                "an allowed high-risk call needs its intent"
            );
            assert!(v.approval_id.is_none());
            let rec = g.logged(&v.decision_id).await;
            assert_eq!(
                (rec.verdict.as_str(), rec.reason.as_str()),
                ("allow", "not_enforced")
            );
            let message: Value = serde_json::from_str(rec.message.as_deref().unwrap()).unwrap();
            assert_eq!(message["enforced"], false);
            assert_eq!(message["would_verdict"], would_verdict.as_str());
        }
        assert!(g.approvals().await.is_empty());
        // The budget (two calls, used by the first two) only reports.
        let v = g.authorize("reader", json!({"path": "a"}), &run).await;
        assert_eq!(outcome(&v), (Decision::Allow, Reason::NotEnforced));
        assert_eq!(v.verdict.would_reason, Some(Reason::BudgetExhausted));
    });
}

/// Hardline paths, unknown tools, a pinned tool's definition and a
/// cancelled run bind under `warn` and `dryRun` alike.
#[tokio::test]
async fn what_binds_in_every_mode_binds() {
    each_backend!(|url| {
        for mode in ["warn", "dryRun"] {
            let spec = format!("{SPEC}enforcement: {mode}\n");
            let g = TestGate::start(url, Bundle::Live(&spec)).await;
            let run = unique("run");
            for (tool, args, reason) in [
                ("reader", json!({"path": "a/.env"}), Reason::HardlinePath),
                (
                    "bash",
                    json!({"command": "mkfs x"}),
                    Reason::HardlineCommand,
                ),
                ("nosuch", json!({}), Reason::UnknownTool),
                (
                    "fs.read",
                    json!({"path": "a"}),
                    Reason::ToolDefinitionChanged,
                ),
            ] {
                let v = g.authorize(tool, args, &run).await;
                assert_eq!(outcome(&v), (Decision::Deny, reason), "{mode} {tool}");
                assert!(v.verdict.enforced, "{mode} {tool}");
            }
            let req = CancelRequest::default();
            g.gate.cancel_run(&run_id(&run), &req).await.unwrap();
            let v = g.authorize("reader", json!({"path": "a"}), &run).await;
            assert_eq!(
                outcome(&v),
                (Decision::Deny, Reason::RunCancelled),
                "{mode}"
            );
        }
        let g = TestGate::start(url, Bundle::Expired(&format!("{SPEC}enforcement: warn\n"))).await;
        let v = g
            .authorize("reader", json!({"path": "a"}), &unique("run"))
            .await;
        assert_eq!(outcome(&v), (Decision::Deny, Reason::BundleExpired));
    });
}

/// A run cancelled outside this sidecar (through the store, as the CLI or
/// another sidecar does) is refused `run_cancelled`, enforced, when a
/// trial mode would have let a denied high-risk call through: the
/// cancellation is read from the database and no trial mode softens it.
#[tokio::test]
async fn a_run_cancelled_elsewhere_binds_in_trial_modes() {
    each_backend!(|url| {
        for mode in ["warn", "dryRun"] {
            let spec = format!("{SPEC}enforcement: {mode}\n");
            let g = TestGate::start(url, Bundle::Live(&spec)).await;
            let rm = || json!({"command": "rm -rf /"});
            // Not cancelled, the denied call is only reported.
            let v = g.authorize("bash", rm(), &unique("run")).await;
            assert_eq!(outcome(&v), (Decision::Allow, Reason::NotEnforced));
            assert_eq!(v.verdict.would_reason, Some(Reason::DenyRule));
            let run = unique("run");
            g.store
                .runs()
                .cancel(
                    &g.tenant,
                    &run_id(&run),
                    None,
                    "user:alice",
                    Timestamp::now(),
                )
                .await
                .unwrap();
            let v = g.authorize("bash", rm(), &run).await;
            assert_eq!(
                outcome(&v),
                (Decision::Deny, Reason::RunCancelled),
                "{mode}"
            );
            assert!(v.verdict.enforced, "{mode}");
            assert_eq!(
                (v.verdict.would_verdict, v.verdict.would_reason),
                (None, None),
                "{mode}"
            );
            assert!(v.verdict.warning.is_none(), "{mode}");
            let rec = g.logged(&v.decision_id).await;
            assert_eq!(
                (rec.verdict.as_str(), rec.reason.as_str(), rec.message),
                ("deny", "run_cancelled", None),
                "{mode}"
            );
            // Seen once, the run is remembered: a low-risk call is refused too.
            let v = g.authorize("reader", json!({"path": "a"}), &run).await;
            assert_eq!(
                outcome(&v),
                (Decision::Deny, Reason::RunCancelled),
                "{mode}"
            );
            assert!(v.verdict.enforced, "{mode}");
        }
    });
}
