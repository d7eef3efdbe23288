//! Every call is decided, recorded and remembered exactly once, here:
//! `/v1/authorize`, the workspace operations, batches and the MCP gateway
//! all come through [`Decisions::authorize`], so none of them can be more
//! permissive than another.

use std::sync::Arc;
use std::time::Instant;

use jiff::Timestamp;
use toolgate_policy::{
    Call, Context, Decision, Enforcement, Id, LabelSet, Provenance, Reason, Risk, Verdict,
};
use toolgate_store::{DecisionRecord, RunLimits, ShadowOutcome};
use tracing::Instrument;

use super::Decisions;
use super::escalation::escalate;
use crate::Enforced;
use crate::allowed::AllowedCall;
use crate::flows::FlowState;
use crate::labels::{MAX_LABEL_CHARS, decision_labels, truncate};
use crate::runs::deny_audit;
use crate::trace::{self, traced};
use crate::{AuthorizeRequest, AuthorizeResponse, GateError, NO_POLICY, NO_STEP};

impl Decisions {
    /// Authorizes one call: decides it under the held bundle, records it
    /// (durably before answering for a high-risk tool), remembers an allow
    /// for its intent, and counts it.
    pub(crate) async fn authorize(
        &self,
        req: &AuthorizeRequest,
    ) -> Result<AuthorizeResponse, GateError> {
        self.authorize_read(req, None).await
    }

    /// [`Decisions::authorize`] for a workspace read whose file has
    /// `provenance` (known to the sidecar only, never taken from the agent).
    pub(crate) async fn authorize_read(
        &self,
        req: &AuthorizeRequest,
        provenance: Option<Provenance>,
    ) -> Result<AuthorizeResponse, GateError> {
        let span = trace::tool_call(req, &self.shared.tenant, self.shared.trace_arguments);
        let answer = authorize_call(self, req, provenance)
            .instrument(span.clone())
            .await;
        trace::decided(&span, &answer);
        answer
    }

    /// The one field of a call not checked when it was read (ids are
    /// [`toolgate_policy::Id`]s and the run a [`RunId`](toolgate_policy::RunId)): its tenant.
    pub(crate) fn validate_call(&self, req: &AuthorizeRequest) -> Result<(), GateError> {
        if let Some(t) = &req.tenant
            && *t != self.shared.tenant
        {
            return Err(GateError::InvalidRequest(format!(
                "tenant `{}` is not served by this sidecar",
                truncate(t, MAX_LABEL_CHARS)
            )));
        }
        Ok(())
    }
}

/// One call on its way through [`authorize_call`].
struct Decided {
    decision_id: String,
    /// The request's step, or [`NO_STEP`]: the log needs one.
    step_id: String,
    /// When the call was decided; every record of it carries this instant.
    now: Timestamp,
    /// The bundle that decided, if one is held.
    enforced: Option<Arc<Enforced>>,
    mode: Enforcement,
    limits: RunLimits,
    verdict: Verdict,
    approval_id: Option<String>,
    /// The labels the run carried when the call was decided (profiles with flows).
    flow: Option<FlowState>,
    /// The labels this call sets if it passes (only an allowed call sets any).
    labels_to_set: LabelSet,
    /// The labels this call set.
    flow_labels_set: Vec<String>,
    /// What the bundle's candidate decided, when it shadows one.
    shadow: Option<ShadowOutcome>,
    /// SHA-256 of the call's recorded input (`spec.audit.recordInputs`),
    /// chained in the record's message so the log vouches for the input.
    input_sha256: Option<String>,
}

/// Authorizes one call: [`decide`] it under the held bundle, [`record`] it
/// (durably before answering for a high-risk tool), [`remember`] an allow
/// for its intent, and count it.
async fn authorize_call(
    app: &Decisions,
    req: &AuthorizeRequest,
    provenance: Option<Provenance>,
) -> Result<AuthorizeResponse, GateError> {
    let started = Instant::now();
    app.validate_call(req)?;
    let mut decided = decide(app, req, Timestamp::now(), provenance).await;
    decided.labels_to_set = labels_to_set(req, &decided, provenance);
    let input = super::inputs::recorded_input(
        &decided.enforced,
        req,
        decided.now,
        &decided.decision_id,
        provenance,
    );
    decided.input_sha256 = input.as_ref().map(|(_, sha)| sha.clone());
    record(app, req, &mut decided).await?;
    if let Some((input, _)) = input
        && decided.verdict.reason != Reason::AuditUnavailable
    {
        app.log.enqueue_input(&app.shared.tenant, input);
    }
    remember(app, req, &decided);
    count(app, req, &decided, started);
    Ok(AuthorizeResponse {
        decision_id: decided.decision_id,
        verdict: decided.verdict,
        approval_id: decided.approval_id,
        flow_labels_set: decided.flow_labels_set,
    })
}

/// The labels an allowed call would add to its run (or pod): what it sets
/// and the run does not carry yet. They are written only once the call
/// passes its run's checks (cancellation, budgets), with its charge
/// ([`record`]).
fn labels_to_set(req: &AuthorizeRequest, d: &Decided, provenance: Option<Provenance>) -> LabelSet {
    match (&d.flow, &d.enforced) {
        (Some(state), Some(enforced)) if d.verdict.verdict == Decision::Allow => enforced
            .policy
            .flow_labels_set_by(&req.call(), provenance)
            .minus(state.labels),
        _ => LabelSet::EMPTY,
    }
}

/// Writes the labels of a call that passes without a charge (no budgets),
/// after its cancellation check; one that cannot store them is denied
/// (`audit_unavailable`), as one that cannot be recorded is.
async fn store_labels(app: &Decisions, d: &mut Decided) {
    let (Some(state), Some(enforced)) = (&d.flow, &d.enforced) else {
        return;
    };
    if d.verdict.verdict != Decision::Allow || d.labels_to_set.is_empty() {
        return;
    }
    let write = app.flows.set_flow_labels(
        &enforced.policy,
        state,
        d.labels_to_set,
        &d.decision_id,
        d.now,
    );
    match traced("toolgate.flow.labels", write).await {
        Ok(names) => d.flow_labels_set = names,
        Err(err) => {
            tracing::error!(error = %err, "flow labels not stored; denying");
            deny_audit(&mut d.verdict);
            d.approval_id = None;
        }
    }
}

/// Decides the call at `now`: [`evaluate`] it, then resolve an escalation
/// through its approval.
async fn decide(
    app: &Decisions,
    req: &AuthorizeRequest,
    now: Timestamp,
    provenance: Option<Provenance>,
) -> Decided {
    let step_id = req
        .step_id
        .as_ref()
        .map_or_else(|| NO_STEP.to_owned(), Id::to_string);
    let decision_id = uuid::Uuid::now_v7().to_string();
    let enforced = app.policy.current();
    // The run's flow labels, for a live profile that declares flows; a
    // store that cannot say which labels the run carries denies the call.
    let (flow, flow_unknown) = match enforced.as_deref().filter(|e| e.is_live(now)) {
        Some(e) => match traced(
            "toolgate.flow.read",
            app.flows.call_flow_state(&e.policy, req, provenance),
        )
        .await
        {
            Ok(state) => (state, false),
            Err(err) => {
                tracing::error!(error = %err, "flow labels unreadable; denying");
                (None, true)
            }
        },
        None => (None, false),
    };
    let labels = flow.as_ref().map_or(LabelSet::EMPTY, |f| f.labels);
    let (mut verdict, shadow) = evaluate(app, req, enforced.as_deref(), now, labels, provenance);
    if flow_unknown {
        deny_audit(&mut verdict);
    }
    let (mode, limits) = match &enforced {
        Some(e) => (
            e.policy.enforcement(&req.tool),
            crate::runs::limits(&e.policy),
        ),
        None => Default::default(),
    };
    let mut approval_id = None;
    if verdict.verdict == Decision::Escalate {
        // No approval is asked for (nor used) for a run cancelled elsewhere
        // or one whose budget could not pay for the call: a human is never
        // asked about a call that would be refused anyway. An approved call
        // is charged once, when it passes (in `record`).
        let enforced = enforced.as_deref();
        app.runs
            .refuse_if_unpayable(enforced, &req.run_id, &limits, mode, &mut verdict, now)
            .await;
    }
    if verdict.verdict == Decision::Escalate {
        // An escalation only comes from a live bundle.
        if let Some(e) = &enforced {
            let request = escalate(
                &app.shared,
                e,
                req,
                &step_id,
                &decision_id,
                &mut verdict,
                now,
            );
            match traced("toolgate.approval.request", request).await {
                Ok(id) => approval_id = id,
                Err(err) => {
                    tracing::error!(error = %err, "approval request failed; denying");
                    deny_audit(&mut verdict);
                }
            }
        }
    }
    Decided {
        decision_id,
        step_id,
        now,
        enforced,
        mode,
        limits,
        verdict,
        approval_id,
        flow,
        labels_to_set: LabelSet::EMPTY,
        flow_labels_set: Vec::new(),
        shadow,
        input_sha256: None,
    }
}

/// The held bundle's verdict at `now` (fail closed without a live one),
/// refused when the tool's pinned definition differs or the run is known
/// to be cancelled; and its candidate's verdict on the same call, when the
/// bundle shadows one (compared with the policy's verdict, before the
/// run's state refuses anything).
fn evaluate(
    app: &Decisions,
    req: &AuthorizeRequest,
    enforced: Option<&Enforced>,
    now: Timestamp,
    labels: LabelSet,
    provenance: Option<Provenance>,
) -> (Verdict, Option<ShadowOutcome>) {
    let call = req.call();
    let mut shadow = None;
    let mut verdict = match enforced {
        None => sidecar_verdict(Reason::NoBundle, NO_POLICY, &call),
        Some(e) if !e.is_live(now) => {
            sidecar_verdict(Reason::BundleExpired, &e.policy_version, &call)
        }
        Some(e) => {
            let context = Context {
                now,
                subject: Some(&app.shared.tenant),
                labels,
                provenance,
            };
            let verdict = e.policy.evaluate(&call, &context);
            shadow = super::shadow::shadow_of(e, req, &verdict, &context);
            verdict
        }
    };
    // A pinned tool is decided only for the definition that was reviewed.
    if verdict.verdict != Decision::Deny
        && let Some(e) = enforced
        && let Some(pinned) = e.policy.pinned_definition(&req.tool)
        && req.definition_digest.as_deref() != Some(pinned)
    {
        crate::runs::refuse(
            &mut verdict,
            Reason::ToolDefinitionChanged,
            Some(format!("definition:{pinned}")),
        );
    }
    // A cancelled run, or one of a cancelled scope, gets nothing more, in
    // every mode.
    if verdict.verdict != Decision::Deny
        && app
            .runs
            .known_stopped(&req.run_id, enforced.map(|e| e.profile.as_str()))
    {
        crate::runs::refuse(&mut verdict, Reason::RunCancelled, None);
    }
    (verdict, shadow)
}

/// The decision log's record of `verdict` for this call.
fn record_of(req: &AuthorizeRequest, d: &Decided, verdict: &Verdict) -> DecisionRecord {
    record_with_labels(req, d, verdict, &d.flow_labels_set)
}

/// [`record_of`], naming `labels` as the ones the call set.
fn record_with_labels(
    req: &AuthorizeRequest,
    d: &Decided,
    verdict: &Verdict,
    labels: &[String],
) -> DecisionRecord {
    DecisionRecord {
        decision_id: d.decision_id.clone(),
        run_id: req.run_id.as_str().to_owned(),
        step_id: d.step_id.clone(),
        tool: req.tool.to_string(),
        verdict: verdict.verdict.as_str().to_owned(),
        reason: verdict.reason.as_str().to_owned(),
        message: super::message::record_message(
            verdict,
            labels,
            d.shadow.as_ref(),
            d.input_sha256.as_deref(),
        ),
        // Labels come from the profile; a very long glob must not make the
        // log refuse the record.
        matched_rule: verdict
            .matched_rule
            .as_deref()
            .map(|r| truncate(r, toolgate_store::MAX_FIELD_LEN / 4).to_owned()),
        policy_version: verdict.policy_version.clone(),
        risk: verdict.risk.as_str().to_owned(),
        args_digest: verdict.args_digest.clone(),
        call_digest: Some(verdict.call_digest.clone()),
        definition_digest: req.definition_digest.as_ref().map(Id::to_string),
        created_at: d.now,
    }
}

/// Records the decision: a high-risk one durably before it is answered (in
/// the transaction that charges its run, when the profile sets budgets),
/// any other through the background log. A decision that cannot be
/// recorded, or a run that cannot be charged, turns into a denial
/// (`audit_unavailable`).
async fn record(app: &Decisions, req: &AuthorizeRequest, d: &mut Decided) -> Result<(), GateError> {
    if let Err(e) = record_of(req, d, &d.verdict).validate() {
        // Every agent field was checked above, so this is a sidecar bug;
        // refuse rather than answer with a decision the log cannot hold.
        return Err(GateError::InvalidRequest(e.to_string()));
    }
    let high_risk = d.verdict.risk == Risk::High;
    let durable = if crate::runs::needs_admission(&d.verdict, &d.limits) {
        traced("toolgate.run.charge", charge(app, req, d, high_risk))
            .await
            .map_err(|e| (e, "run not charged or decision not recorded; denying"))
    } else if high_risk {
        // Nothing to count without budgets, but a high-risk call still sees
        // a cancellation made anywhere: one read by key before the append,
        // and before it labels the run.
        if d.verdict.verdict == Decision::Allow {
            app.runs
                .refuse_if_cancelled(d.enforced.as_deref(), &req.run_id, &mut d.verdict)
                .await;
        }
        store_labels(app, d).await;
        let decisions = app.shared.store.decisions();
        let record = record_of(req, d, &d.verdict);
        let append = decisions.append(&app.shared.tenant, &app.shared.stream, record);
        traced("toolgate.decision.append", append)
            .await
            .map(|_| ())
            .map_err(|e| (e, "high-risk decision not recorded; denying"))
    } else {
        store_labels(app, d).await;
        Ok(())
    };
    if let Err((err, what)) = durable {
        tracing::error!(error = %err, "{what}");
        deny_audit(&mut d.verdict);
        d.approval_id = None;
    }
    if !high_risk {
        app.log
            .enqueue(&app.shared.tenant, record_of(req, d, &d.verdict));
    }
    Ok(())
}

/// Charges the run (and sees whether it was cancelled) where every sidecar
/// of the run sees it, and applies the answer; a high-risk call in the
/// transaction that records its decision.
async fn charge(
    app: &Decisions,
    req: &AuthorizeRequest,
    d: &mut Decided,
    high_risk: bool,
) -> Result<(), toolgate_store::StoreError> {
    let runs = app.shared.store.runs();
    let caller = app.shared.caller(d.enforced.as_deref());
    let (admission, labelled) =
        {
            let d = &*d;
            // The labels go in with the charge, and only when the call passes
            // with the run's answer (in a trial mode an over-budget call still
            // runs, and labels its run).
            let names: Vec<&str> = match (&d.flow, &d.enforced) {
                (Some(_), Some(e)) if d.verdict.verdict == Decision::Allow => {
                    e.policy.flow_label_names(d.labels_to_set)
                }
                _ => Vec::new(),
            };
            let labels = d.flow.as_ref().filter(|_| !names.is_empty()).map(|s| {
                toolgate_store::LabelsOnPass {
                    scope: s.scope,
                    subject: &s.subject,
                    other: (s.other.0, &s.other.1),
                    names: &names,
                    decision_id: &d.decision_id,
                }
            });
            // The verdict as the run's answer leaves it: what the record
            // says, and whether the call passes (and labels its run).
            let answered = |a: &toolgate_store::Admission| {
                let mut answered = d.verdict.clone();
                crate::runs::apply_admission(&mut answered, a, d.mode);
                answered
            };
            let passes = |a: &toolgate_store::Admission| answered(a).verdict == Decision::Allow;
            let (admission, added) = if high_risk {
                let mut written = Vec::new();
                let (admission, _) = runs
                    .admit_and_record(
                        caller,
                        &app.shared.stream,
                        &req.run_id,
                        true,
                        &d.limits,
                        d.now,
                        labels
                            .as_ref()
                            .map(|l| (l, &passes as &(dyn Fn(&_) -> bool + Sync))),
                        |a, added| {
                            written = added.to_vec();
                            record_with_labels(req, d, &answered(a), added)
                        },
                    )
                    .await?;
                (admission, written)
            } else if let Some(l) = &labels {
                runs.admit_labelled(caller, &req.run_id, false, &d.limits, d.now, l, passes)
                    .await?
            } else {
                let admission = runs
                    .admit(caller, &req.run_id, false, &d.limits, d.now)
                    .await?;
                (admission, Vec::new())
            };
            (admission, labels.is_some().then_some(added))
        };
    app.runs
        .apply_answer(&req.run_id, &admission, &mut d.verdict, d.mode);
    // The run's answer applied is what `passes` judged in the transaction:
    // an allow now means the labels were written.
    let passed = d.verdict.verdict == Decision::Allow;
    if let (Some(added), Some(state), Some(enforced), true) =
        (labelled, &d.flow, &d.enforced, passed)
    {
        app.flows
            .learned_labels(&enforced.policy, state, d.labels_to_set);
        d.flow_labels_set = added;
    }
    Ok(())
}

/// Remembers an allowed decision, so that its intent can be checked
/// against exactly the call it allowed.
/// Only a decision that needs an intent is remembered for one: the map then
/// grows with high-risk traffic, not with every allowed read.
fn remember(app: &Decisions, req: &AuthorizeRequest, d: &Decided) {
    if d.verdict.verdict != Decision::Allow || !d.verdict.intent_required {
        return;
    }
    app.intents.remember(
        d.decision_id.clone(),
        AllowedCall {
            run_id: req.run_id.clone(),
            tool: req.tool.to_string(),
            canonical_tool: d
                .enforced
                .as_ref()
                .map(|e| e.policy.canonical_tool(&req.tool).to_owned())
                .unwrap_or_else(|| req.tool.to_string()),
            args_digest: d.verdict.args_digest.clone(),
            call_digest: d.verdict.call_digest.clone(),
            risk: d.verdict.risk,
        },
    );
}

/// Counts the decision and its latency.
fn count(app: &Decisions, req: &AuthorizeRequest, d: &Decided, started: Instant) {
    let verdict = &d.verdict;
    let (tool_label, profile_label) = decision_labels(d.enforced.as_deref(), &req.tool);
    if let Some(shadow) = &d.shadow {
        let active_version = d
            .enforced
            .as_deref()
            .map_or("", |e| e.policy_version.as_str());
        super::shadow::count(&app.shared.metrics, profile_label, active_version, shadow);
    }
    // A decision that only reports is counted by what enforcement would
    // have answered, so a trial profile's would-denials are visible.
    let (counted_verdict, counted_reason) = match (verdict.would_verdict, verdict.would_reason) {
        (Some(v), Some(r)) if !verdict.enforced => (v, r),
        _ => (verdict.verdict, verdict.reason),
    };
    app.shared
        .metrics
        .decisions
        .with_label_values(&[
            counted_verdict.as_str(),
            counted_reason.as_str(),
            tool_label,
            profile_label,
            if verdict.enforced { "true" } else { "false" },
        ])
        .inc();
    app.shared
        .metrics
        .decision_duration
        .with_label_values(&[verdict.risk.as_str()])
        .observe(started.elapsed().as_secs_f64());
    if matches!(counted_reason, Reason::FlowRule | Reason::FlowEscalate) {
        let rule = if verdict.enforced {
            verdict.matched_rule.as_deref()
        } else {
            verdict.would_rule.as_deref()
        };
        if let Some(rule) = rule.and_then(toolgate_policy::flows::rule_name) {
            app.shared
                .metrics
                .flow_refusals
                .with_label_values(&[
                    truncate(rule, MAX_LABEL_CHARS),
                    counted_verdict.as_str(),
                    profile_label,
                ])
                .inc();
        }
    }
}

fn sidecar_verdict(reason: Reason, policy_version: &str, call: &Call<'_>) -> Verdict {
    Verdict {
        verdict: Decision::Deny,
        reason,
        matched_rule: None,
        policy_version: policy_version.to_owned(),
        risk: Risk::High,
        intent_required: false,
        args_digest: toolgate_policy::args_digest(call.arguments),
        call_digest: toolgate_policy::call_digest(call.tool, call.action, call.arguments),
        enforced: true,
        would_verdict: None,
        would_reason: None,
        would_rule: None,
        warning: None,
    }
}
