package toolgate

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// AuthorizeRequest is one call to decide. RunID "" is the client's run;
// Action, StepID, Tenant and DefinitionDigest "" are left out.
type AuthorizeRequest struct {
	Tool      string
	Arguments map[string]any // nil is {}
	Action    string
	RunID     string
	StepID    string
	// Tenant must equal the sidecar's own when given.
	Tenant string
	// DefinitionDigest is for MCP gateways: the tool definition's digest.
	DefinitionDigest string
}

type authorizeBody struct {
	Tool             string         `json:"tool"`
	Action           string         `json:"action,omitempty"`
	Arguments        map[string]any `json:"arguments"`
	RunID            string         `json:"run_id,omitempty"`
	StepID           string         `json:"step_id,omitempty"`
	Tenant           string         `json:"tenant,omitempty"`
	DefinitionDigest string         `json:"definition_digest,omitempty"`
}

func (r AuthorizeRequest) body(runID string) authorizeBody {
	return authorizeBody{Tool: r.Tool, Action: r.Action, Arguments: orEmpty(r.Arguments), RunID: runID, StepID: r.StepID,
		Tenant: r.Tenant, DefinitionDigest: r.DefinitionDigest}
}

// orEmpty sends nil arguments as {}: the sidecar takes an object only.
func orEmpty(args map[string]any) map[string]any {
	if args == nil {
		return map[string]any{}
	}
	return args
}

// Authorize asks whether the call may run: the verdict. A deny or an
// escalation is a Decision, not an error; errors are failures to decide.
func (c *Client) Authorize(ctx context.Context, req AuthorizeRequest) (*Decision, error) {
	data, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/authorize", body: req.body(c.run(req.RunID))})
	if err != nil {
		return nil, err
	}
	d, err := decodeDecision(data)
	if err != nil {
		return nil, err
	}
	c.surfaceWarning(req.Tool, d)
	return d, nil
}

func (c *Client) surfaceWarning(tool string, d *Decision) {
	if d.Warning != "" {
		c.logger.Warn("toolgate: "+d.Warning, "tool", tool, "decision_id", d.DecisionID)
	}
}

// BatchCall is one call of a batch (the batch names the run).
type BatchCall struct {
	Tool             string
	Arguments        map[string]any
	Action           string
	StepID           string
	DefinitionDigest string
}

// BatchRequest is 1 to MaxBatchCalls calls of one run (RunID "" is the
// client's) the agent would like to run at once.
type BatchRequest struct {
	RunID  string
	Tenant string
	Calls  []BatchCall
}

// AuthorizeBatch decides each call as Authorize would; run them
// concurrently only when Batch.Parallel, else one by one, each by its own
// verdict.
func (c *Client) AuthorizeBatch(ctx context.Context, req BatchRequest) (*Batch, error) {
	type call struct {
		Tool             string         `json:"tool"`
		Action           string         `json:"action,omitempty"`
		Arguments        map[string]any `json:"arguments"`
		StepID           string         `json:"step_id,omitempty"`
		DefinitionDigest string         `json:"definition_digest,omitempty"`
	}
	calls := make([]call, 0, len(req.Calls))
	for _, bc := range req.Calls {
		calls = append(calls, call{Tool: bc.Tool, Action: bc.Action, Arguments: orEmpty(bc.Arguments), StepID: bc.StepID,
			DefinitionDigest: bc.DefinitionDigest})
	}
	body := struct {
		RunID  string `json:"run_id"`
		Tenant string `json:"tenant,omitempty"`
		Calls  []call `json:"calls"`
	}{c.run(req.RunID), req.Tenant, calls}
	data, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/authorize/batch", body: body})
	if err != nil {
		return nil, err
	}
	b := &Batch{}
	extra, err := decodeObject(data, b, "Batch", "parallel", "reason", "verdicts")
	if err != nil {
		return nil, err
	}
	var verdicts struct {
		Verdicts []json.RawMessage `json:"verdicts"`
	}
	if err := json.Unmarshal(data, &verdicts); err != nil {
		return nil, badResponse(0, "`verdicts` is not a list (Batch)")
	}
	if len(verdicts.Verdicts) != len(req.Calls) {
		return nil, badResponse(0, "%d verdicts for %d calls (Batch)", len(verdicts.Verdicts), len(req.Calls))
	}
	for i, raw := range verdicts.Verdicts {
		d, err := decodeDecision(raw)
		if err != nil {
			return nil, err
		}
		c.surfaceWarning(req.Calls[i].Tool, d)
		b.Decisions = append(b.Decisions, *d)
	}
	b.Extra = extra
	return b, nil
}

// Approval reads an approval, after waiting up to wait (at most
// MaxWaitSeconds, whole seconds) for it to be resolved.
func (c *Client) Approval(ctx context.Context, approvalID string, wait time.Duration) (*Approval, error) {
	id, err := seg(approvalID, "approval id")
	if err != nil {
		return nil, err
	}
	r := request{method: http.MethodGet, path: "/v1/approvals/" + id}
	if wait > 0 {
		secs := int(math.Min(MaxWaitSeconds, math.Max(1, math.Ceil(wait.Seconds()))))
		r.query = url.Values{"wait": {strconv.Itoa(secs)}}
		r.wait = time.Duration(secs) * time.Second
	}
	data, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	a := &Approval{}
	extra, err := decodeObject(data, a, "Approval", "approval_id", "status")
	if err != nil {
		return nil, err
	}
	a.Extra = extra
	return a, nil
}

// WaitForApproval long-polls (at most MaxWaitSeconds a request) until the
// approval is resolved or timeout passed: approved, denied, expired,
// cancelled, or pending when the time ran out.
//
// The wait ends a second before ctx's deadline, so that a caller's
// deadline reads as an unanswered approval, not as a sidecar that is down.
func (c *Client) WaitForApproval(ctx context.Context, approvalID string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(max(0, timeout))
	if dl, ok := ctx.Deadline(); ok && dl.Add(-time.Second).Before(deadline) {
		deadline = dl.Add(-time.Second)
	}
	for {
		remaining := time.Until(deadline)
		// Whole seconds (the granularity of ?wait=), never past the deadline;
		// under one second, one plain read.
		wait := remaining.Truncate(time.Second)
		a, err := c.Approval(ctx, approvalID, wait)
		if err != nil {
			return "", err
		}
		if a.Status != ApprovalPending || remaining < time.Second || time.Until(deadline) <= 0 {
			return a.Status, nil
		}
	}
}

// IntentRequest names the call an intent records. RunID "" is the
// client's run; StepID "" is NoStep.
type IntentRequest struct {
	Tool              string
	StepID            string
	RunID             string
	VerificationProbe any // optional: how resume may check the effect
}

// BeginIntent records, durably, that the call d allowed is about to happen.
func (c *Client) BeginIntent(ctx context.Context, d *Decision, in IntentRequest) (*Intent, error) {
	if d == nil {
		return nil, &Error{Code: CodeInvalidRequest, Message: "an intent needs the decision that allowed its call"}
	}
	step := in.StepID
	if step == "" {
		step = NoStep
	}
	body := map[string]any{
		"decision_id": d.DecisionID, "run_id": c.run(in.RunID), "step_id": step, "tool": in.Tool,
		"args_digest": d.ArgsDigest, "call_digest": d.CallDigest,
	}
	if in.VerificationProbe != nil {
		body["verification_probe"] = in.VerificationProbe
	}
	return c.intentCall(ctx, http.MethodPost, "/v1/intents", body)
}

// MarkEffectSent records that the effect is being sent: from now on a
// resume treats the intent as uncertain.
func (c *Client) MarkEffectSent(ctx context.Context, intentID string) (*Intent, error) {
	id, err := seg(intentID, "intent id")
	if err != nil {
		return nil, err
	}
	return c.intentCall(ctx, http.MethodPost, "/v1/intents/"+id+"/effect-sent", map[string]any{})
}

// CompleteIntent closes an intent: OutcomeCompleted, OutcomeNotCompleted
// or OutcomeError, with an optional detail (bounded to MaxDetailChars).
func (c *Client) CompleteIntent(ctx context.Context, intentID, outcome, detail string) (*Intent, error) {
	id, err := seg(intentID, "intent id")
	if err != nil {
		return nil, err
	}
	body := map[string]any{"outcome": outcome}
	if detail != "" {
		body["detail"] = truncate(detail, MaxDetailChars)
	}
	return c.intentCall(ctx, http.MethodPost, "/v1/intents/"+id+"/complete", body)
}

func (c *Client) intentCall(ctx context.Context, method, path string, body any) (*Intent, error) {
	data, err := c.do(ctx, request{method: method, path: path, body: body})
	if err != nil {
		return nil, err
	}
	return decodeIntent(data)
}

// PendingIntents lists the open intents of a run ("" is the client's), for
// resuming after a crash: each safe_to_retry or uncertain.
func (c *Client) PendingIntents(ctx context.Context, runID string) ([]Intent, error) {
	q := url.Values{"run_id": {c.run(runID)}, "status": {"pending"}}
	data, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/intents", query: q})
	if err != nil {
		return nil, err
	}
	var list struct {
		Intents json.RawMessage `json:"intents"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, badResponse(0, "GET /v1/intents did not answer {intents: [...]}")
	}
	return decodeIntents(list.Intents, "intents")
}

// RunStatus is a run's heartbeat ("" is the client's run): cancellation,
// budgets used and left, open intents.
func (c *Client) RunStatus(ctx context.Context, runID string) (*RunStatus, error) {
	id, err := seg(c.run(runID), "run id")
	if err != nil {
		return nil, err
	}
	data, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/runs/" + id})
	if err != nil {
		return nil, err
	}
	s := &RunStatus{}
	extra, err := decodeObject(data, s, "RunStatus", "run_id", "cancel_requested", "budgets", "open_intents")
	if err != nil {
		return nil, err
	}
	var open struct {
		OpenIntents json.RawMessage `json:"open_intents"`
	}
	_ = json.Unmarshal(data, &open)
	if s.OpenIntents, err = decodeIntents(open.OpenIntents, "RunStatus"); err != nil {
		return nil, err
	}
	s.Extra = extra
	return s, nil
}

// CancelRun cancels a run ("" is the client's) durably: every later call
// of it is refused run_cancelled. Idempotent.
func (c *Client) CancelRun(ctx context.Context, runID, reason string) (*Cancellation, error) {
	id, err := seg(c.run(runID), "run id")
	if err != nil {
		return nil, err
	}
	data, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/runs/" + id + "/cancel", body: reasonBody(reason)})
	if err != nil {
		return nil, err
	}
	out := &Cancellation{}
	extra, err := decodeObject(data, out, "Cancellation", "run_id", "cancel_requested_at", "newly_cancelled",
		"approvals_cancelled")
	if err != nil {
		return nil, err
	}
	out.Extra = extra
	return out, nil
}

// CancelPod stops every run of this sidecar's pod, whatever run id it
// uses: a stop the agent cannot step around by starting another run.
func (c *Client) CancelPod(ctx context.Context, reason string) (*PodCancellation, error) {
	data, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/pod/cancel", body: reasonBody(reason)})
	if err != nil {
		return nil, err
	}
	out := &PodCancellation{}
	extra, err := decodeObject(data, out, "PodCancellation", "scope", "cancel_requested_at", "newly_cancelled",
		"approvals_cancelled")
	if err != nil {
		return nil, err
	}
	out.Extra = extra
	return out, nil
}

func reasonBody(reason string) map[string]any {
	if reason == "" {
		return map[string]any{}
	}
	return map[string]any{"reason": reason}
}

// truncate keeps the first n characters (not bytes) of s.
func truncate(s string, n int) string {
	count := 0
	for i := range s {
		if count == n {
			return s[:i]
		}
		count++
	}
	return s
}
