package toolgate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"time"
)

// Verdicts, risks and the reasons a client acts on.
const (
	VerdictAllow    = "allow"
	VerdictDeny     = "deny"
	VerdictEscalate = "escalate"

	RiskLow   = "low"
	RiskWrite = "write"
	RiskHigh  = "high"

	ReasonRunCancelled   = "run_cancelled"
	ReasonApprovalDenied = "approval_denied"
	ReasonNotEnforced    = "not_enforced"
)

// Approval statuses (only pending is open), intent outcomes and resume classes.
const (
	ApprovalPending   = "pending"
	ApprovalApproved  = "approved"
	ApprovalDenied    = "denied"
	ApprovalExpired   = "expired"
	ApprovalCancelled = "cancelled"

	OutcomeCompleted    = "completed"
	OutcomeNotCompleted = "not_completed"
	OutcomeError        = "error"

	ResumeSafeToRetry = "safe_to_retry"
	ResumeUncertain   = "uncertain"
)

// Extra holds the members of an answer this client does not know (a newer
// sidecar's additions), so they are kept rather than breaking the parse.
type Extra map[string]json.RawMessage

// Decision is the answer of POST /v1/authorize. Optional members the
// sidecar leaves out are "" (or nil).
type Decision struct {
	DecisionID    string `json:"decision_id"`
	Verdict       string `json:"verdict"` // allow, deny or escalate
	Reason        string `json:"reason"`
	MatchedRule   string `json:"matched_rule"` // {tier}:{tool}:{glob}, "" when no rule decided
	PolicyVersion string `json:"policy_version"`
	Risk          string `json:"risk"` // low, write or high
	// IntentRequired: allowed and high risk, so an intent is recorded first.
	IntentRequired bool   `json:"intent_required"`
	ArgsDigest     string `json:"args_digest"`
	CallDigest     string `json:"call_digest"`
	// ApprovalID is set on escalate (and on a call an approval decided).
	ApprovalID string `json:"approval_id"`
	// Enforced is false under a warn or dryRun profile: the call is
	// allowed and the Would* fields say what enforcement would answer.
	Enforced     bool   `json:"enforced"`
	WouldVerdict string `json:"would_verdict"`
	WouldReason  string `json:"would_reason"`
	WouldRule    string `json:"would_rule"`
	// Warning: under warn, what enforcement would not have allowed.
	Warning string `json:"warning"`
	// FlowLabelsSet: flow labels this allowed call set on its run.
	FlowLabelsSet []string `json:"flow_labels_set"`
	Extra         Extra    `json:"-"`
}

// Allowed reports an allow verdict; only then may the call run.
func (d *Decision) Allowed() bool { return d.Verdict == VerdictAllow }

// Denied reports a deny verdict.
func (d *Decision) Denied() bool { return d.Verdict == VerdictDeny }

// Escalated reports an escalate verdict: a human must approve first.
func (d *Decision) Escalated() bool { return d.Verdict == VerdictEscalate }

// Batch is the answer of POST /v1/authorize/batch.
type Batch struct {
	// Parallel: every call may run concurrently with the others.
	Parallel bool `json:"parallel"`
	// Reason is batch_parallel, or why not (batch_denied, batch_escalated,
	// batch_budget, batch_not_read_only, batch_not_enforced).
	Reason string `json:"reason"`
	// CallIndex is the first call that keeps the batch sequential.
	CallIndex *int `json:"call_index"`
	// Decisions holds each call's own verdict, in the order of the calls.
	Decisions []Decision `json:"-" wire:"verdicts"`
	Extra     Extra      `json:"-"`
}

// Intent is an intent row (POST /v1/intents answers only its id and status).
type Intent struct {
	IntentID          string          `json:"intent_id"`
	Status            string          `json:"status"` // pending, completed, not_completed or error
	Tenant            string          `json:"tenant"`
	RunID             string          `json:"run_id"`
	StepID            string          `json:"step_id"`
	Tool              string          `json:"tool"`
	DecisionID        string          `json:"decision_id"`
	ArgsDigest        string          `json:"args_digest"`
	CallDigest        string          `json:"call_digest"`
	Risk              string          `json:"risk"`
	Detail            string          `json:"detail"`
	VerificationProbe json.RawMessage `json:"verification_probe"`
	CreatedAt         time.Time       `json:"created_at"`
	EffectSentAt      time.Time       `json:"effect_sent_at"` // zero until effect-sent
	CompletedAt       time.Time       `json:"completed_at"`
	// Resume, for open intents: safe_to_retry (the effect was never sent)
	// or uncertain (it may have happened).
	Resume string `json:"resume"`
	// LegacyID is the row's own "id", kept one release by the sidecar.
	LegacyID string `json:"id"`
	Extra    Extra  `json:"-"`
}

// Approval is an approval row, as GET /v1/approvals/{id} answers it.
type Approval struct {
	ApprovalID    string    `json:"approval_id"`
	Status        string    `json:"status"` // pending, approved, denied, expired or cancelled
	Tenant        string    `json:"tenant"`
	InvocationID  string    `json:"invocation_id"`
	RunID         string    `json:"run_id"`
	Tool          string    `json:"tool"`
	Action        string    `json:"action"`
	ArgsDigest    string    `json:"args_digest"`
	CallDigest    string    `json:"call_digest"`
	PolicyVersion string    `json:"policy_version"`
	DecisionID    string    `json:"decision_id"`
	RequestedBy   string    `json:"requested_by"`
	ResolvedBy    string    `json:"resolved_by"`
	Reason        string    `json:"reason"`
	Preview       string    `json:"preview"`
	CreatedAt     time.Time `json:"created_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	ResolvedAt    time.Time `json:"resolved_at"`
	ConsumedAt    time.Time `json:"consumed_at"`
	LegacyID      string    `json:"id"`
	Extra         Extra     `json:"-"`
}

// Budget is one budget of a run: Limit and Left are nil when unlimited.
type Budget struct {
	Used  uint64  `json:"used"`
	Limit *uint64 `json:"limit"`
	Left  *uint64 `json:"left"`
}

// RunBudgets are a run's budgets, and its pod's (nil when not reported).
type RunBudgets struct {
	Calls            Budget  `json:"calls"`
	HighRiskCalls    Budget  `json:"high_risk_calls"`
	RunSeconds       Budget  `json:"run_seconds"`
	PodCalls         *Budget `json:"pod_calls"`
	PodHighRiskCalls *Budget `json:"pod_high_risk_calls"`
}

// FlowLabel is a flow label a run carries and the decision that set it.
type FlowLabel struct {
	Label      string    `json:"label"`
	DecisionID string    `json:"decision_id"`
	SetAt      time.Time `json:"set_at"`
}

// RunStatus is GET /v1/runs/{run_id}: check it between steps and stop
// when CancelRequested.
type RunStatus struct {
	RunID             string    `json:"run_id"`
	CancelRequested   bool      `json:"cancel_requested"`
	CancelRequestedAt time.Time `json:"cancel_requested_at"`
	CancelReason      string    `json:"cancel_reason"`
	CancelledBy       string    `json:"cancelled_by"`
	// CancelledScope names a wider stop holding the run: "pod NAME",
	// "profile NAME" or "namespace".
	CancelledScope string     `json:"cancelled_scope"`
	Budgets        RunBudgets `json:"budgets"`
	OpenIntents    []Intent   `json:"-" wire:"open_intents"`
	// FlowLabels is nil when the profile declares no flows.
	FlowLabels []FlowLabel `json:"flow_labels"`
	Extra      Extra       `json:"-"`
}

// Cancellation is the answer of POST /v1/runs/{run_id}/cancel.
type Cancellation struct {
	RunID              string    `json:"run_id"`
	CancelRequestedAt  time.Time `json:"cancel_requested_at"`
	NewlyCancelled     bool      `json:"newly_cancelled"`
	ApprovalsCancelled uint64    `json:"approvals_cancelled"`
	Extra              Extra     `json:"-"`
}

// PodCancellation is the answer of POST /v1/pod/cancel.
type PodCancellation struct {
	Scope              string    `json:"scope"`
	CancelRequestedAt  time.Time `json:"cancel_requested_at"`
	NewlyCancelled     bool      `json:"newly_cancelled"`
	ApprovalsCancelled uint64    `json:"approvals_cancelled"`
	Extra              Extra     `json:"-"`
}

// Admission is a call that may run now: its allowing verdict and, for a
// high-risk call, its intent (begun and marked effect-sent), which the
// caller closes with CompleteIntent after the effect.
type Admission struct {
	Decision *Decision
	IntentID string
}

// decodeObject reads the JSON object raw into v (a pointer to a struct),
// failing with CodeBadResponse when it is not an object, a required member
// is missing or null, or a member has the wrong type. It returns the
// members v has no field for.
func decodeObject(raw []byte, v any, what string, required ...string) (Extra, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return nil, badResponse(0, "expected a JSON object for %s", what)
	}
	for _, name := range required {
		if m, ok := members[name]; !ok || bytes.Equal(bytes.TrimSpace(m), []byte("null")) {
			return nil, badResponse(0, "sidecar answer lacks `%s` (%s)", name, what)
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, badResponse(0, "sidecar answer does not read as %s: %v", what, err)
	}
	known := jsonNames(reflect.TypeOf(v).Elem())
	var extra Extra
	for name, m := range members {
		if !known[name] {
			if extra == nil {
				extra = Extra{}
			}
			extra[name] = m
		}
	}
	return extra, nil
}

// jsonNames is the member names a struct type's fields read: their json
// names, and the wire names of the lists the decoders read by hand. The
// contract test compares them with docs/agent-api.openapi.json.
func jsonNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		field := t.Field(i)
		name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			name = field.Tag.Get("wire")
		}
		if name != "" {
			names[name] = true
		}
	}
	return names
}

func decodeDecision(raw []byte) (*Decision, error) {
	// Enforced defaults to true when absent, as the sidecar's own reading does.
	d := &Decision{Enforced: true}
	extra, err := decodeObject(raw, d, "Decision", "decision_id", "verdict", "reason", "policy_version",
		"risk", "intent_required", "args_digest", "call_digest")
	if err != nil {
		return nil, err
	}
	switch d.Verdict {
	case VerdictAllow, VerdictDeny, VerdictEscalate:
	default:
		// A verdict this client cannot read is never taken for an allow.
		return nil, badResponse(0, "unknown verdict %q", d.Verdict)
	}
	d.Extra = extra
	return d, nil
}

func decodeIntent(raw []byte) (*Intent, error) {
	var probe struct {
		IntentID *string `json:"intent_id"`
		ID       *string `json:"id"`
	}
	_ = json.Unmarshal(raw, &probe)
	// Older answers name the intent only as "id".
	required := "intent_id"
	if probe.IntentID == nil && probe.ID != nil {
		required = "id"
	}
	in := &Intent{}
	extra, err := decodeObject(raw, in, "Intent", required, "status")
	if err != nil {
		return nil, err
	}
	if in.IntentID == "" {
		in.IntentID = in.LegacyID
	}
	in.Extra = extra
	return in, nil
}

func decodeIntents(raw json.RawMessage, what string) ([]Intent, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return nil, badResponse(0, "sidecar answer lacks a list of intents (%s)", what)
	}
	out := make([]Intent, 0, len(items))
	for _, item := range items {
		in, err := decodeIntent(item)
		if err != nil {
			return nil, err
		}
		out = append(out, *in)
	}
	return out, nil
}
