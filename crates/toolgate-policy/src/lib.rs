//! toolgate's policy engine: the PolicyProfile model, a strict loader, a
//! compiler that builds every matcher once, and a total evaluator that turns
//! a tool call into a typed [`Verdict`].
//!
//! Pure by design: no I/O, no async, no clock. Callers pass text in and the
//! current time as a value, so every rule is testable as a plain function.
//!
//! ```
//! use toolgate_policy::{load, CompiledPolicy, Call, Context, Decision};
//! let manifest = load::parse_manifest(r#"
//! apiVersion: toolgate.dev/v1alpha1
//! kind: PolicyProfile
//! metadata: {name: demo}
//! spec:
//!   mode: rules
//!   rules: {bash: {allow: ["git status"]}}
//!   effects: {bash: {sideEffect: PROCESS_EXEC, risk: high}}
//! "#).unwrap();
//! let policy = CompiledPolicy::compile(&manifest.metadata.name, &manifest.spec, &[]).unwrap();
//! let args = serde_json::json!({"command": "git status"});
//! let call = Call { tool: "bash", action: None, arguments: args.as_object().unwrap() };
//! let verdict = policy.evaluate(&call, &Context::at(jiff::Timestamp::UNIX_EPOCH));
//! assert_eq!(verdict.verdict, Decision::Allow);
//! assert!(verdict.intent_required);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod analyze;
pub mod args;
pub mod audit;
mod cidr_table;
mod compile;
pub mod digest;
mod error;
mod eval;
pub mod flows;
mod fnmatch;
mod glob_index;
pub mod ids;
pub mod load;
pub mod model;
pub mod network;
pub mod notify;
pub mod paths;
pub mod preview;
mod verdict;

pub use compile::{ANY_TOOL, CompiledPolicy, MAX_RUN_SECONDS};
pub use digest::{PolicyVersion, args_digest, call_digest, invocation_digest};
pub use error::PolicyError;
pub use eval::{Call, Context};
pub use flows::{
    FlowRule, FlowScope, FlowSelector, Flows, LabelSet, MAX_FLOW_LABELS, PastCall, Provenance,
};
pub use ids::{Id, RunId, Scope, ScopeKind, Stop};
pub use model::{
    Budgets, CandidateRef, Enforcement, Grant, Mode, NotifyChannel, NotifyFormat, PodBudgets,
    PolicyManifest, PolicySpec, Risk, SideEffect, ToolEffect, WebhookChannel,
};
pub use toolgate_contract::{ApprovalDecision, wire_enum};
pub use verdict::{Decision, Reason, Verdict, intent_required};

/// Parses a manifest and compiles it without standing grants.
pub fn compile_manifest(text: &str) -> Result<CompiledPolicy, PolicyError> {
    let manifest = load::parse_manifest(text)?;
    CompiledPolicy::compile(&manifest.metadata.name, &manifest.spec, &[])
}
