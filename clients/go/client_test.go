package toolgate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	toolgate "toolgate.dev/client"
)

func newClient(t *testing.T, opts ...toolgate.Option) *toolgate.Client {
	t.Helper()
	c, err := toolgate.New(sidecar.url, append([]toolgate.Option{toolgate.WithRunID(runID(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// asError is err as a *toolgate.Error with the code, or a test failure.
func asError(t *testing.T, err error, code string, status int) *toolgate.Error {
	t.Helper()
	var e *toolgate.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *toolgate.Error %s, got %T %v", code, err, err)
	}
	if e.Code != code || e.Status != status || !toolgate.IsCode(err, code) {
		t.Fatalf("want %s (HTTP %d), got %s (HTTP %d): %v", code, status, e.Code, e.Status, e)
	}
	return e
}

func authorize(t *testing.T, c *toolgate.Client, tool string, args map[string]any) *toolgate.Decision {
	t.Helper()
	d, err := c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: tool, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestURLAndRunIDDefaults(t *testing.T) {
	t.Setenv("TOOLGATE_URL", sidecar.url+"/")
	a, err := toolgate.New("")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := toolgate.New("")
	if a.URL() != sidecar.url || a.RunID() == "" || a.RunID() == b.RunID() {
		t.Fatalf("url %q run ids %q %q", a.URL(), a.RunID(), b.RunID())
	}
	if !authorize(t, a, "lookup", map[string]any{"q": "x"}).Allowed() {
		t.Fatal("lookup not allowed through $TOOLGATE_URL")
	}
	t.Setenv("TOOLGATE_URL", "")
	if _, err := toolgate.New(""); err == nil || !strings.Contains(err.Error(), "TOOLGATE_URL") {
		t.Fatalf("no URL: %v", err)
	}
	if _, err := toolgate.New("127.0.0.1:15031"); err == nil {
		t.Fatal("a URL without http(s):// was taken")
	}
}

func TestAuthorizeVerdicts(t *testing.T) {
	var logged strings.Builder
	c := newClient(t, toolgate.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	low, err := c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: "lookup", Arguments: map[string]any{"q": "weather"}, StepID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if low.Verdict != "allow" || low.Reason != "allow_rule" || low.Risk != "low" || low.IntentRequired ||
		!low.Enforced || low.MatchedRule != "allow:lookup:*" || low.ApprovalID != "" || low.DecisionID == "" ||
		!strings.HasPrefix(low.PolicyVersion, "go-client@") || !strings.HasPrefix(low.ArgsDigest, "sha256:") ||
		!strings.HasPrefix(low.CallDigest, "sha256:") {
		t.Fatalf("low: %+v", low)
	}
	// An alias resolves to its canonical tool; bash is high risk.
	high := authorize(t, c, "Bash", map[string]any{"command": "echo hi"})
	if !high.Allowed() || high.Risk != "high" || !high.IntentRequired {
		t.Fatalf("high: %+v", high)
	}
	deny := authorize(t, c, "bash", map[string]any{"command": "rm -rf /"})
	if !deny.Denied() || deny.Reason != "deny_rule" || deny.MatchedRule != "deny:bash:rm *" {
		t.Fatalf("deny: %+v", deny)
	}
	esc, err := c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: "publish", Arguments: map[string]any{"package": "x"}, Action: "release"})
	if err != nil || !esc.Escalated() || esc.Reason != "escalate_rule" || esc.ApprovalID == "" {
		t.Fatalf("escalate: %+v %v", esc, err)
	}
	if unknown := authorize(t, c, "format_disk", nil); !unknown.Denied() || unknown.Reason != "unknown_tool" {
		t.Fatalf("unknown tool: %+v", unknown)
	}
	// Under warn the call is allowed, and says what enforcement would answer.
	trial := authorize(t, c, "shout", map[string]any{"text": "boo"})
	if !trial.Allowed() || trial.Enforced || trial.Reason != "not_enforced" || trial.WouldVerdict != "deny" ||
		trial.Warning == "" {
		t.Fatalf("warn: %+v", trial)
	}
	// The warning reaches the operator's log.
	if !strings.Contains(logged.String(), trial.Warning) || !strings.Contains(logged.String(), trial.DecisionID) {
		t.Fatalf("log: %q", logged.String())
	}
}

func TestGuardAllowRunsFnWithoutIntent(t *testing.T) {
	c := newClient(t)
	ran := 0
	if err := c.Guard(bg(), "lookup", map[string]any{"q": "x"}, func(context.Context) error { ran++; return nil }); err != nil {
		t.Fatal(err)
	}
	if ran != 1 {
		t.Fatalf("fn ran %d times", ran)
	}
	if open, err := c.PendingIntents(bg(), ""); err != nil || len(open) != 0 {
		t.Fatalf("intents of a low-risk call: %v %v", open, err)
	}
}

func TestGuardHighRiskRecordsAndClosesIntent(t *testing.T) {
	c := newClient(t)
	var during []toolgate.Intent
	err := c.GuardRequest(bg(), toolgate.AuthorizeRequest{Tool: "transfer", Arguments: map[string]any{"amount": 5}, StepID: "s1"},
		func(ctx context.Context) error {
			// By the time the effect runs, its intent is durable and effect-sent.
			var err error
			during, err = c.PendingIntents(ctx, "")
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 || during[0].Tool != "transfer" || during[0].Resume != "uncertain" ||
		during[0].EffectSentAt.IsZero() || during[0].StepID != "s1" {
		t.Fatalf("intent while fn ran: %+v", during)
	}
	if open, err := c.PendingIntents(bg(), ""); err != nil || len(open) != 0 {
		t.Fatalf("intent left open: %+v %v", open, err)
	}
	// It was closed completed: repeating that outcome reads the row back,
	// another outcome is a conflict.
	closed, err := c.CompleteIntent(bg(), during[0].IntentID, toolgate.OutcomeCompleted, "")
	if err != nil || closed.Status != "completed" || closed.CompletedAt.IsZero() {
		t.Fatalf("closed: %+v %v", closed, err)
	}
	_, err = c.CompleteIntent(bg(), during[0].IntentID, toolgate.OutcomeError, "")
	asError(t, err, toolgate.CodeConflict, 409)
}

func TestGuardFnErrorClosesIntentAsError(t *testing.T) {
	c := newClient(t)
	boom := errors.New("disk on fire")
	var intentID string
	err := c.Guard(bg(), "bash", map[string]any{"command": "echo deploying"}, func(ctx context.Context) error {
		open, _ := c.PendingIntents(ctx, "")
		if len(open) == 1 {
			intentID = open[0].IntentID
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("fn's error not returned: %v", err)
	}
	if open, _ := c.PendingIntents(bg(), ""); intentID == "" || len(open) != 0 {
		t.Fatalf("intent %q, open after: %+v", intentID, open)
	}
	// It was closed as error, with fn's error as its detail.
	closed, err := c.CompleteIntent(bg(), intentID, toolgate.OutcomeError, "")
	if err != nil || closed.Status != "error" || closed.Detail != "disk on fire" {
		t.Fatalf("closed: %+v %v", closed, err)
	}
	_, err = c.CompleteIntent(bg(), intentID, toolgate.OutcomeCompleted, "")
	asError(t, err, toolgate.CodeConflict, 409)
	// The detail is bounded.
	long := errors.New(strings.Repeat("x", 5000))
	intentID = ""
	err = c.Guard(bg(), "transfer", map[string]any{"amount": 1}, func(ctx context.Context) error {
		open, _ := c.PendingIntents(ctx, "")
		if len(open) == 1 {
			intentID = open[0].IntentID
		}
		return long
	})
	if !errors.Is(err, long) || intentID == "" {
		t.Fatalf("%q: %v", intentID, err)
	}
	if closed, err = c.CompleteIntent(bg(), intentID, toolgate.OutcomeError, ""); err != nil || len(closed.Detail) != 1000 {
		t.Fatalf("detail of %d chars: %v", len(closed.Detail), err)
	}
}

func TestGuardPanicClosesIntentAsError(t *testing.T) {
	c := newClient(t)
	var intentID string
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("panic not passed on: %v", p)
			}
		}()
		_ = c.Guard(bg(), "transfer", map[string]any{"amount": 2}, func(ctx context.Context) error {
			open, _ := c.PendingIntents(ctx, "")
			if len(open) == 1 {
				intentID = open[0].IntentID
			}
			panic("boom")
		})
	}()
	closed, err := c.CompleteIntent(bg(), intentID, toolgate.OutcomeError, "")
	if err != nil || closed.Status != "error" || closed.Detail != "panic: boom" {
		t.Fatalf("closed: %+v %v", closed, err)
	}
}

func TestGuardDenyNeverRunsFn(t *testing.T) {
	c := newClient(t)
	ran := false
	err := c.Guard(bg(), "bash", map[string]any{"command": "rm -rf /"}, func(context.Context) error { ran = true; return nil })
	if ran {
		t.Fatal("denied fn ran")
	}
	e := asError(t, err, toolgate.CodePolicyDenied, 0)
	if e.Reason != "deny_rule" || e.Decision == nil || e.Decision.MatchedRule != "deny:bash:rm *" ||
		!errors.Is(err, toolgate.ErrDenied) || errors.Is(err, toolgate.ErrRunCancelled) {
		t.Fatalf("deny error: %+v", e)
	}
	if open, _ := c.PendingIntents(bg(), ""); len(open) != 0 {
		t.Fatalf("a denied call has intents: %+v", open)
	}
}

func TestGuardEscalateWithoutWaitingIsApprovalRequired(t *testing.T) {
	c := newClient(t, toolgate.WithApprovalTimeout(0))
	ran := false
	err := c.Guard(bg(), "publish", map[string]any{"package": "toolgate"}, func(context.Context) error { ran = true; return nil })
	e := asError(t, err, toolgate.CodeApprovalRequired, 0)
	if ran || e.Decision == nil || e.Decision.ApprovalID == "" || e.ApprovalStatus != "pending" ||
		!errors.Is(err, toolgate.ErrApprovalRequired) {
		t.Fatalf("ran %v, %+v", ran, e)
	}
	a, err := c.Approval(bg(), e.Decision.ApprovalID, 0)
	if err != nil || a.Status != "pending" || a.Tool != "publish" || a.RunID != c.RunID() || a.ExpiresAt.IsZero() {
		t.Fatalf("approval: %+v %v", a, err)
	}
	if status, err := c.WaitForApproval(bg(), a.ApprovalID, 0); err != nil || status != "pending" {
		t.Fatalf("wait 0: %q %v", status, err)
	}
}

func TestGuardWaitsForAnApprovalThenRuns(t *testing.T) {
	c := newClient(t, toolgate.WithApprovalTimeout(20*time.Second))
	req := toolgate.AuthorizeRequest{Tool: "bash", Arguments: map[string]any{"command": "deploy prod"}, StepID: "s9"}
	first, err := c.Authorize(bg(), req)
	if err != nil || !first.Escalated() {
		t.Fatalf("%+v %v", first, err)
	}
	done := answerLater(t, first.ApprovalID, "approve", 500*time.Millisecond)
	ran := 0
	err = c.GuardRequest(bg(), req, func(context.Context) error { ran++; return nil })
	done()
	if err != nil || ran != 1 {
		t.Fatalf("ran %d: %v", ran, err)
	}
	a, err := c.Approval(bg(), first.ApprovalID, 0)
	if err != nil || a.Status != "approved" || a.ResolvedBy != "alice" || a.Reason != "gotest" || a.ConsumedAt.IsZero() {
		t.Fatalf("approval: %+v %v", a, err)
	}
	// The approved call was high risk: its intent is closed.
	if open, _ := c.PendingIntents(bg(), ""); len(open) != 0 {
		t.Fatalf("open intents: %+v", open)
	}
	// One approval, one use: the same call asks again.
	if again, _ := c.Authorize(bg(), req); again == nil || !again.Escalated() {
		t.Fatalf("second use: %+v", again)
	}
}

func TestGuardDeniedApprovalNeverRuns(t *testing.T) {
	c := newClient(t, toolgate.WithApprovalTimeout(20*time.Second))
	first := authorize(t, c, "publish", map[string]any{"package": "evil"})
	done := answerLater(t, first.ApprovalID, "deny", 300*time.Millisecond)
	ran := false
	err := c.Guard(bg(), "publish", map[string]any{"package": "evil"}, func(context.Context) error { ran = true; return nil })
	done()
	if e := asError(t, err, toolgate.CodePolicyDenied, 0); ran || e.Reason != "approval_denied" {
		t.Fatalf("ran %v: %+v", ran, e)
	}
	if status, err := c.WaitForApproval(bg(), first.ApprovalID, time.Second); err != nil || status != "denied" {
		t.Fatalf("status %q %v", status, err)
	}
}

func TestGuardWaitEndsWithTheCallersDeadline(t *testing.T) {
	c := newClient(t, toolgate.WithApprovalTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(bg(), 3*time.Second)
	defer cancel()
	start := time.Now()
	ran := false
	err := c.Guard(ctx, "publish", map[string]any{"package": "nobody-answers"}, func(context.Context) error { ran = true; return nil })
	e := asError(t, err, toolgate.CodeApprovalRequired, 0)
	if ran || e.ApprovalStatus != "pending" || time.Since(start) > 3*time.Second {
		t.Fatalf("ran %v after %v: %+v", ran, time.Since(start), e)
	}
	if err := c.Guard(bg(), "lookup", nil, nil); !toolgate.IsCode(err, toolgate.CodeInvalidRequest) {
		t.Fatalf("nil fn: %v", err)
	}
}

func TestWaitForApprovalLongPolls(t *testing.T) {
	c := newClient(t)
	v := authorize(t, c, "publish", map[string]any{"package": "wait"})
	done := answerLater(t, v.ApprovalID, "approve", 1500*time.Millisecond)
	start := time.Now()
	status, err := c.WaitForApproval(bg(), v.ApprovalID, 20*time.Second)
	done()
	if err != nil || status != "approved" {
		t.Fatalf("%q %v", status, err)
	}
	if took := time.Since(start); took < time.Second || took > 15*time.Second {
		t.Fatalf("long-poll took %v", took)
	}
}

func TestAuthorizeBatch(t *testing.T) {
	c := newClient(t)
	reads := []toolgate.BatchCall{
		{Tool: "lookup", Arguments: map[string]any{"q": "a"}},
		{Tool: "lookup", Arguments: map[string]any{"q": "b"}, StepID: "s2"},
	}
	b, err := c.AuthorizeBatch(bg(), toolgate.BatchRequest{Calls: reads})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Parallel || b.Reason != "batch_parallel" || b.CallIndex != nil || len(b.Decisions) != 2 ||
		!b.Decisions[0].Allowed() || !b.Decisions[1].Allowed() || b.Decisions[0].DecisionID == b.Decisions[1].DecisionID {
		t.Fatalf("parallel batch: %+v", b)
	}
	mixed := append(reads, toolgate.BatchCall{Tool: "drop_table", Arguments: map[string]any{"name": "users"}})
	b, err = c.AuthorizeBatch(bg(), toolgate.BatchRequest{Calls: mixed})
	if err != nil {
		t.Fatal(err)
	}
	if b.Parallel || b.Reason != "batch_denied" || b.CallIndex == nil || *b.CallIndex != 2 ||
		!b.Decisions[2].Denied() || !b.Decisions[0].Allowed() {
		t.Fatalf("mixed batch: %+v", b)
	}
	write := []toolgate.BatchCall{{Tool: "lookup", Arguments: map[string]any{}}, {Tool: "transfer", Arguments: map[string]any{"amount": 1}}}
	if b, err = c.AuthorizeBatch(bg(), toolgate.BatchRequest{Calls: write}); err != nil || b.Parallel ||
		b.Reason != "batch_not_read_only" || *b.CallIndex != 1 || !b.Decisions[1].IntentRequired {
		t.Fatalf("write batch: %+v %v", b, err)
	}
	// An empty batch is malformed: refused before anything is decided.
	_, err = c.AuthorizeBatch(bg(), toolgate.BatchRequest{})
	asError(t, err, toolgate.CodeInvalidRequest, 400)
}

func TestIntentsAndResume(t *testing.T) {
	c := newClient(t)
	v, err := c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: "transfer", Arguments: map[string]any{"amount": 10}, StepID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.BeginIntent(bg(), v, toolgate.IntentRequest{Tool: "transfer", StepID: "s1",
		VerificationProbe: map[string]any{"ledger": "acct-1"}})
	if err != nil || in.Status != "pending" || in.IntentID == "" {
		t.Fatalf("begin: %+v %v", in, err)
	}
	open, err := c.PendingIntents(bg(), "")
	if err != nil || len(open) != 1 || open[0].IntentID != in.IntentID || open[0].Resume != "safe_to_retry" ||
		open[0].DecisionID != v.DecisionID || open[0].CallDigest != v.CallDigest ||
		!strings.Contains(string(open[0].VerificationProbe), "acct-1") {
		t.Fatalf("pending: %+v %v", open, err)
	}
	sent, err := c.MarkEffectSent(bg(), in.IntentID)
	if err != nil || sent.IntentID != in.IntentID || sent.EffectSentAt.IsZero() {
		t.Fatalf("effect-sent: %+v %v", sent, err)
	}
	if open, _ = c.PendingIntents(bg(), c.RunID()); len(open) != 1 || open[0].Resume != "uncertain" {
		t.Fatalf("after effect-sent: %+v", open)
	}
	done, err := c.CompleteIntent(bg(), in.IntentID, toolgate.OutcomeNotCompleted, "cancelled by user")
	if err != nil || done.Status != "not_completed" || done.Detail != "cancelled by user" || done.CompletedAt.IsZero() {
		t.Fatalf("complete: %+v %v", done, err)
	}
	if open, _ = c.PendingIntents(bg(), ""); len(open) != 0 {
		t.Fatalf("still open: %+v", open)
	}
	// One intent per decision.
	_, err = c.BeginIntent(bg(), v, toolgate.IntentRequest{Tool: "transfer", StepID: "s1"})
	if asError(t, err, toolgate.CodeIntentExists, 409); !errors.Is(err, toolgate.ErrIntentExists) {
		t.Fatal("errors.Is(ErrIntentExists) false")
	}
	// A decision that did not allow cannot get an intent.
	deny := authorize(t, c, "drop_table", map[string]any{"name": "users"})
	_, err = c.BeginIntent(bg(), deny, toolgate.IntentRequest{Tool: "drop_table"})
	asError(t, err, toolgate.CodeDecisionNotAllowed, 403)
	// Nor another call than the one its decision allowed.
	other := authorize(t, c, "transfer", map[string]any{"amount": 11})
	_, err = c.BeginIntent(bg(), other, toolgate.IntentRequest{Tool: "bash"})
	asError(t, err, toolgate.CodeIntentDigestMismatch, 403)
}

func TestRunStatusAndCancel(t *testing.T) {
	c := newClient(t)
	authorize(t, c, "lookup", map[string]any{"q": "1"})
	pending := authorize(t, c, "publish", map[string]any{"package": "later"})
	s, err := c.RunStatus(bg(), "")
	if err != nil || s.RunID != c.RunID() || s.CancelRequested || !s.CancelRequestedAt.IsZero() ||
		s.Budgets.Calls.Limit != nil || len(s.OpenIntents) != 0 || s.FlowLabels != nil {
		t.Fatalf("status: %+v %v", s, err)
	}
	cancelled, err := c.CancelRun(bg(), "", "operator said stop")
	if err != nil || !cancelled.NewlyCancelled || cancelled.RunID != c.RunID() || cancelled.ApprovalsCancelled != 1 ||
		cancelled.CancelRequestedAt.IsZero() {
		t.Fatalf("cancel: %+v %v", cancelled, err)
	}
	if again, err := c.CancelRun(bg(), "", ""); err != nil || again.NewlyCancelled || !again.CancelRequestedAt.Equal(cancelled.CancelRequestedAt) {
		t.Fatalf("second cancel: %+v %v", again, err)
	}
	if a, err := c.Approval(bg(), pending.ApprovalID, 0); err != nil || a.Status != "cancelled" {
		t.Fatalf("approval of a cancelled run: %+v %v", a, err)
	}
	s, err = c.RunStatus(bg(), "")
	if err != nil || !s.CancelRequested || s.CancelReason != "operator said stop" || s.CancelRequestedAt.IsZero() {
		t.Fatalf("status after cancel: %+v %v", s, err)
	}
	// Every later call of the run is refused run_cancelled; fn never runs.
	if d := authorize(t, c, "lookup", map[string]any{"q": "2"}); !d.Denied() || d.Reason != "run_cancelled" {
		t.Fatalf("call of a cancelled run: %+v", d)
	}
	ran := false
	err = c.Guard(bg(), "lookup", map[string]any{"q": "3"}, func(context.Context) error { ran = true; return nil })
	if e := asError(t, err, toolgate.CodePolicyDenied, 0); ran || e.Reason != "run_cancelled" || !errors.Is(err, toolgate.ErrRunCancelled) {
		t.Fatalf("ran %v: %+v", ran, e)
	}
	// Another run of the same client is unaffected.
	other, err := c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: "lookup", RunID: c.RunID() + "-b"})
	if err != nil || !other.Allowed() {
		t.Fatalf("other run: %+v %v", other, err)
	}
}

func TestSidecarErrorsCarryTheirCode(t *testing.T) {
	c := newClient(t)
	_, err := c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: "lookup", RunID: "Not A Run!"})
	asError(t, err, toolgate.CodeInvalidRunID, 400)
	_, err = c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: "lookup", StepID: "bad\nstep"})
	if e := asError(t, err, toolgate.CodeInvalidRequest, 400); e.Message == "" || !errors.Is(err, toolgate.ErrInvalidRequest) {
		t.Fatalf("%+v", e)
	}
	_, err = c.Approval(bg(), "no-such-approval", 0)
	if asError(t, err, toolgate.CodeNotFound, 404); !errors.Is(err, toolgate.ErrNotFound) {
		t.Fatal("errors.Is(ErrNotFound) false")
	}
	_, err = c.WaitForApproval(bg(), "no-such-approval", time.Second)
	asError(t, err, toolgate.CodeNotFound, 404)
	_, err = c.CompleteIntent(bg(), "no-such-intent", toolgate.OutcomeCompleted, "")
	asError(t, err, toolgate.CodeNotFound, 404)
	_, err = c.RunStatus(bg(), "run/with/slashes")
	asError(t, err, toolgate.CodeInvalidRunID, 400)
	// An id the client would send as another endpoint is refused before sending.
	_, err = c.MarkEffectSent(bg(), "")
	asError(t, err, toolgate.CodeInvalidRequest, 0)
	// A failure inside Guard is the same typed error, and fn does not run.
	ran := false
	err = c.GuardRequest(bg(), toolgate.AuthorizeRequest{Tool: "lookup", RunID: "bad run"}, func(context.Context) error { ran = true; return nil })
	if asError(t, err, toolgate.CodeInvalidRunID, 400); ran {
		t.Fatal("fn ran on a refused request")
	}
	if msg := err.Error(); !strings.Contains(msg, "invalid_run_id") || !strings.Contains(msg, "HTTP 400") {
		t.Fatalf("message %q", msg)
	}
}

func TestUnreachableSidecarFailsClosed(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	c, err := toolgate.New(fmt.Sprintf("http://127.0.0.1:%d", port), toolgate.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: "lookup"})
	if e := asError(t, err, toolgate.CodeSidecarUnreachable, 0); e.Err == nil || !errors.Is(err, toolgate.ErrUnreachable) {
		t.Fatalf("%+v", e)
	}
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	asError(t, c.Guard(bg(), "lookup", nil, fn), toolgate.CodeSidecarUnreachable, 0)
	asError(t, c.Guard(bg(), "publish", nil, fn), toolgate.CodeSidecarUnreachable, 0)
	if ran {
		t.Fatal("fn ran with the sidecar down")
	}
	// A caller's cancelled context fails closed too, and says so.
	ctx, cancel := context.WithCancel(bg())
	cancel()
	good := newClient(t)
	err = good.Guard(ctx, "lookup", nil, fn)
	if asError(t, err, toolgate.CodeSidecarUnreachable, 0); ran || !errors.Is(err, context.Canceled) {
		t.Fatalf("ran %v: %v", ran, err)
	}
}

func TestWorkspaceRoundTripAndRefusals(t *testing.T) {
	c := newClient(t)
	ws := func(path string) toolgate.WorkspaceRequest { return toolgate.WorkspaceRequest{Path: path} }
	w, err := c.Write(bg(), ws("notes/plan.md"), "# plan\n")
	if err != nil || w.Path != "notes/plan.md" || w.Bytes != 7 || w.Provenance != "INTERNAL_TOOL" || w.DecisionID == "" {
		t.Fatalf("write: %+v %v", w, err)
	}
	r, err := c.Read(bg(), ws("notes/plan.md"))
	if err != nil || r.Content != "# plan\n" || r.Provenance != "INTERNAL_TOOL" {
		t.Fatalf("read: %+v %v", r, err)
	}
	l, err := c.List(bg(), ws(""))
	if err != nil || len(l.Entries) != 1 || l.Entries[0].Name != "notes" || l.Entries[0].Kind != "dir" || l.Truncated {
		t.Fatalf("list: %+v %v", l, err)
	}
	s, err := c.Stat(bg(), ws("notes/plan.md"))
	if err != nil || s.Kind != "file" || s.Size != 7 {
		t.Fatalf("stat: %+v %v", s, err)
	}
	_, err = c.Read(bg(), ws("a//b"))
	asError(t, err, toolgate.CodeWorkspaceInvalidPath, 400)
	_, err = c.Stat(bg(), ws("missing.txt"))
	asError(t, err, toolgate.CodeWorkspaceNotFound, 404)
	// A hardline path is a policy denial carrying its verdict.
	_, err = c.Write(bg(), ws(".env"), "TOKEN=x")
	if e := asError(t, err, toolgate.CodePolicyDenied, 403); e.Reason != "hardline_path" || e.Decision == nil || e.Decision.DecisionID == "" {
		t.Fatalf("%+v", e)
	}
}
