//! Prometheus metrics of one sidecar, on a registry of its own so that tests
//! (and several sidecars in one process) never share counters.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Declared tools whose decision series are pre-created (one per reason each).
const MAX_PRECREATED_TOOLS: usize = 256;

/// `risk` label values of `toolgate_decision_duration_seconds`.
pub const RISK_LABELS: [&str; 3] = toolgate_policy::Risk::NAMES;
/// `resume_class` label values of `toolgate_open_intents`.
pub const RESUME_CLASSES: [&str; 2] = toolgate_store::ResumeClass::NAMES;
/// Codes of `toolgate_workspace_refusals_total` created at 0 (any other
/// refusal code is still counted, from a fixed set of `&'static str`).
pub const WORKSPACE_REFUSAL_CODES: [&str; 9] = {
    use toolgate_contract::errors as codes;
    [
        codes::POLICY_DENIED,
        codes::APPROVAL_REQUIRED,
        codes::WORKSPACE_ESCAPE,
        codes::WORKSPACE_CHANGED,
        codes::WORKSPACE_INVALID_PATH,
        codes::WORKSPACE_HARDLINK,
        codes::WORKSPACE_NOT_REGULAR_FILE,
        codes::WORKSPACE_BUSY,
        codes::WORKSPACE_TIMEOUT,
    ]
};

/// Every metric the sidecar exports. Names are part of the dashboard contract.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Decisions by verdict, reason, tool and profile.
    pub decisions: IntCounterVec,
    /// Time to answer `/v1/authorize` by `risk`: `low` (and `write`) calls
    /// are decided in memory and logged in the background, `high` ones wait
    /// for the durable decision-log write.
    pub decision_duration: HistogramVec,
    /// 1 for the policy version being enforced (labels `policy_version`,
    /// `profile`; the sequence is not a label, so a re-sign of the same
    /// policy keeps the series).
    pub bundle_info: IntGaugeVec,
    /// `expiresAt` of the enforced bundle, in Unix seconds, by profile.
    pub bundle_expiry: GaugeVec,
    /// Open (pending) intents of this sidecar's tenant by resume class
    /// (`safe_to_retry`, `uncertain`), refreshed with every heartbeat.
    pub open_intents: IntGaugeVec,
    /// Workspace API requests refused, by error code.
    pub workspace_refusals: IntCounterVec,
    /// Bundles that failed to load, by error code.
    pub bundle_reload_failures: IntCounterVec,
    /// Intent transitions by status.
    pub intents: IntCounterVec,
    /// Low-risk decision records dropped because the batch queue was full.
    pub decision_log_dropped: IntCounter,
    /// Decision records written by the background batcher.
    pub decision_log_written: IntCounter,
    /// Time for the MCP upstream to answer a forwarded request, by server.
    pub mcp_forward_seconds: prometheus::HistogramVec,
    /// Forwarded MCP requests that failed or got a 5xx, by server.
    pub mcp_upstream_errors: IntCounterVec,
    /// Escalated MCP calls held as tasks, and how they ended, by server
    /// and outcome.
    pub mcp_tasks: IntCounterVec,
    /// Calls a flow rule denied or escalated, by rule, verdict and profile.
    pub flow_refusals: IntCounterVec,
    /// Calls the bundle's candidate (shadow mode) decided too, by profile,
    /// the active policy's verdict and the candidate's.
    pub shadow_decisions: IntCounterVec,
    /// The same, for the current candidate version only: what the
    /// heartbeat reports (not a Prometheus series).
    pub shadow_tallies: crate::shadow_tally::ShadowTallies,
    /// Reads of the stops recorded elsewhere, by what prompted them
    /// ([`STOP_READ_TRIGGERS`]): an idle fleet's database load.
    pub stop_reads: IntCounterVec,
}

/// `trigger` label values of `toolgate_stop_reads_total`: at start, woken
/// by a wake-up, or on the timer.
pub const STOP_READ_TRIGGERS: [&str; 3] = ["start", "wake", "timer"];

/// Metric names, for dashboards and the test that checks them.
pub const METRIC_NAMES: &[&str] = &[
    "toolgate_decisions_total",
    "toolgate_decision_duration_seconds",
    "toolgate_bundle_info",
    "toolgate_bundle_expiry_timestamp_seconds",
    "toolgate_open_intents",
    "toolgate_workspace_refusals_total",
    "toolgate_build_info",
    "toolgate_bundle_reload_failures_total",
    "toolgate_intents_total",
    "toolgate_decision_log_dropped_total",
    "toolgate_decision_log_written_total",
    "toolgate_mcp_forward_duration_seconds",
    "toolgate_mcp_upstream_errors_total",
    "toolgate_mcp_tasks_total",
    "toolgate_flow_refusals_total",
    "toolgate_stop_reads_total",
    "toolgate_shadow_decisions_total",
];

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new();
        let decisions = IntCounterVec::new(
            Opts::new(
                "toolgate_decisions_total",
                "Tool-call decisions. With enforced=\"false\" (warn and dryRun), verdict and \
                 reason are what enforcement would have answered; the call was allowed.",
            ),
            &["verdict", "reason", "tool", "profile", "enforced"],
        )
        .expect("static metric definition");
        let decision_duration = HistogramVec::new(
            HistogramOpts::new(
                "toolgate_decision_duration_seconds",
                "Time to answer an authorize request, by risk (high: waits for the durable decision log).",
            )
            .buckets(vec![
                0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01,
                0.025, 0.05, 0.1, 0.25, 1.0,
            ]),
            &["risk"],
        )
        .expect("static metric definition");
        let bundle_info = IntGaugeVec::new(
            Opts::new(
                "toolgate_bundle_info",
                "The policy bundle being enforced (value 1).",
            ),
            &["policy_version", "profile"],
        )
        .expect("static metric definition");
        let bundle_expiry = GaugeVec::new(
            Opts::new(
                "toolgate_bundle_expiry_timestamp_seconds",
                "When the enforced bundle expires (Unix seconds); after it every call is denied.",
            ),
            &["profile"],
        )
        .expect("static metric definition");
        let open_intents = IntGaugeVec::new(
            Opts::new(
                "toolgate_open_intents",
                "Pending intents of this sidecar's tenant by resume class (uncertain: the effect may have happened).",
            ),
            &["resume_class"],
        )
        .expect("static metric definition");
        let workspace_refusals = IntCounterVec::new(
            Opts::new(
                "toolgate_workspace_refusals_total",
                "Workspace API requests refused, by error code.",
            ),
            &["code"],
        )
        .expect("static metric definition");
        let bundle_reload_failures = IntCounterVec::new(
            Opts::new(
                "toolgate_bundle_reload_failures_total",
                "Bundles rejected at load or reload.",
            ),
            &["code"],
        )
        .expect("static metric definition");
        let intents = IntCounterVec::new(
            Opts::new(
                "toolgate_intents_total",
                "Intent records by resulting status.",
            ),
            &["status"],
        )
        .expect("static metric definition");
        let decision_log_dropped = IntCounter::new(
            "toolgate_decision_log_dropped_total",
            "Decision records dropped because the batch queue was full.",
        )
        .expect("static metric definition");
        let decision_log_written = IntCounter::new(
            "toolgate_decision_log_written_total",
            "Decision records written by the batcher.",
        )
        .expect("static metric definition");
        let mcp_forward_seconds = prometheus::HistogramVec::new(
            HistogramOpts::new(
                "toolgate_mcp_forward_duration_seconds",
                "Time for an MCP upstream to answer a request the gateway forwarded.",
            )
            .buckets(vec![
                0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
            ]),
            &["server"],
        )
        .expect("static metric definition");
        let mcp_upstream_errors = IntCounterVec::new(
            Opts::new(
                "toolgate_mcp_upstream_errors_total",
                "Forwarded MCP requests that failed or got a 5xx answer.",
            ),
            &["server"],
        )
        .expect("static metric definition");
        let mcp_tasks = IntCounterVec::new(
            Opts::new(
                "toolgate_mcp_tasks_total",
                "Escalated MCP calls held as tasks for clients of the tasks extension: created, \
                 refused for want of room (no_room), and ended completed, failed or cancelled.",
            ),
            &["server", "outcome"],
        )
        .expect("static metric definition");
        let shadow_decisions = IntCounterVec::new(
            Opts::new(
                "toolgate_shadow_decisions_total",
                "Calls the bundle's candidate policy decided beside the active one (never \
                 enforced), by the active policy's verdict and the candidate's.",
            ),
            &["profile", "active", "candidate"],
        )
        .expect("static metric definition");
        let flow_refusals = IntCounterVec::new(
            Opts::new(
                "toolgate_flow_refusals_total",
                "Calls a flow rule (spec.flows) denied or escalated because of what their run had \
                 touched, by rule; with warn or dryRun, what it would have done.",
            ),
            &["rule", "verdict", "profile"],
        )
        .expect("static metric definition");
        let stop_reads = IntCounterVec::new(
            Opts::new(
                "toolgate_stop_reads_total",
                "Reads of the stops (run and scope cancellations) recorded elsewhere, by trigger: \
                 a sidecar that hears wake-ups reads on a wake and once a minute, one that \
                 cannot every second.",
            ),
            &["trigger"],
        )
        .expect("static metric definition");
        for trigger in STOP_READ_TRIGGERS {
            stop_reads.with_label_values(&[trigger]);
        }
        // Every series an alert may watch exists at 0 before its first event,
        // so `increase()` sees the first failure.
        for code in toolgate_bundle::BundleError::CODES
            .iter()
            .chain(&["bundle_unreadable"])
        {
            bundle_reload_failures.with_label_values(&[code]);
        }
        for risk in RISK_LABELS {
            decision_duration.with_label_values(&[risk]);
        }
        for class in RESUME_CLASSES {
            open_intents.with_label_values(&[class]);
        }
        for code in WORKSPACE_REFUSAL_CODES {
            workspace_refusals.with_label_values(&[code]);
        }
        decisions.with_label_values(&[
            "deny",
            toolgate_policy::Reason::NoBundle.as_str(),
            crate::labels::OTHER_TOOL,
            crate::labels::NO_PROFILE,
            "true",
        ]);
        for collector in [
            Box::new(decisions.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(decision_duration.clone()),
            Box::new(bundle_info.clone()),
            Box::new(bundle_expiry.clone()),
            Box::new(open_intents.clone()),
            Box::new(workspace_refusals.clone()),
            Box::new(bundle_reload_failures.clone()),
            Box::new(intents.clone()),
            Box::new(decision_log_dropped.clone()),
            Box::new(decision_log_written.clone()),
            Box::new(mcp_forward_seconds.clone()),
            Box::new(mcp_upstream_errors.clone()),
            Box::new(mcp_tasks.clone()),
            Box::new(flow_refusals.clone()),
            Box::new(shadow_decisions.clone()),
            Box::new(stop_reads.clone()),
        ] {
            registry.register(collector).expect("unique metric names");
        }
        Self {
            registry,
            decisions,
            decision_duration,
            bundle_info,
            bundle_expiry,
            open_intents,
            workspace_refusals,
            bundle_reload_failures,
            intents,
            decision_log_dropped,
            decision_log_written,
            mcp_forward_seconds,
            mcp_upstream_errors,
            mcp_tasks,
            flow_refusals,
            shadow_decisions,
            shadow_tallies: Default::default(),
            stop_reads,
        }
    }

    /// The registry every metric here is registered in (the sidecar adds
    /// the build-info and process metrics every component exports).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Creates, at 0, the MCP series of each configured upstream (the task
    /// series are the gateway's, created where it is).
    pub fn precreate_mcp<'a>(&self, servers: impl Iterator<Item = &'a str>) {
        for server in servers {
            let server = crate::labels::truncate(server, crate::labels::MAX_LABEL_CHARS);
            self.mcp_upstream_errors.with_label_values(&[server]);
            self.mcp_forward_seconds.with_label_values(&[server]);
        }
    }

    /// Creates, at 0, the decision series of every (verdict, reason) pair
    /// for each tool the profile declares (and for [`crate::labels::OTHER_TOOL`]).
    pub fn precreate_decisions(&self, profile: &str, policy: &toolgate_policy::CompiledPolicy) {
        let profile = crate::labels::truncate(profile, crate::labels::MAX_LABEL_CHARS);
        let declared = policy.spec().effects.keys().take(MAX_PRECREATED_TOOLS);
        let reporting = policy.reports_only_somewhere();
        for (rule, verdict) in policy.flow_rules() {
            let rule = crate::labels::truncate(rule, crate::labels::MAX_LABEL_CHARS);
            self.flow_refusals
                .with_label_values(&[rule, verdict.as_str(), profile]);
        }
        for tool in declared
            .map(|t| crate::labels::truncate(t, crate::labels::MAX_LABEL_CHARS))
            .chain([crate::labels::OTHER_TOOL])
        {
            for reason in toolgate_policy::Reason::ALL {
                if reason == toolgate_policy::Reason::NotEnforced {
                    continue; // counted by its would-reason
                }
                let (verdict, reason) = (reason.decision().as_str(), reason.as_str());
                self.decisions
                    .with_label_values(&[verdict, reason, tool, profile, "true"]);
                if reporting {
                    self.decisions
                        .with_label_values(&[verdict, reason, tool, profile, "false"]);
                }
            }
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The series every long-running component registers (build info and the
/// process collector), defined once in the contract; the sidecar calls it
/// on its registry.
pub use toolgate_contract::telemetry::register_common;
