package toolgate

import (
	"context"
	"fmt"
)

// Guard runs fn only if the sidecar allows the call of tool with args
// (in the client's run). See GuardRequest.
func (c *Client) Guard(ctx context.Context, tool string, args map[string]any, fn func(context.Context) error) error {
	return c.GuardRequest(ctx, AuthorizeRequest{Tool: tool, Arguments: args}, fn)
}

// GuardRequest runs fn only if the sidecar allows req, and returns fn's
// error unchanged. Otherwise fn does not run and the error is an *Error:
// CodePolicyDenied (Reason says why: deny_rule, approval_denied,
// run_cancelled, ...), CodeApprovalRequired when an escalation was not
// approved within the approval timeout, or any failure to decide
// (CodeSidecarUnreachable, CodeBadResponse, a sidecar code).
//
// A high-risk call gets an intent, durable and marked effect-sent before
// fn runs, then closed completed, or error when fn fails or panics.
func (c *Client) GuardRequest(ctx context.Context, req AuthorizeRequest, fn func(context.Context) error) error {
	if fn == nil {
		return &Error{Code: CodeInvalidRequest, Message: "Guard needs the function to run"}
	}
	adm, err := c.Admit(ctx, req)
	if err != nil {
		return err
	}
	if adm.IntentID == "" {
		return fn(ctx)
	}
	return c.runWithIntent(ctx, adm.IntentID, fn)
}

// Admit is the first half of GuardRequest, for frameworks that run the
// call themselves: it returns the allowing verdict and, for a high-risk
// call, the begun and effect-sent intent, which the caller closes with
// CompleteIntent. An escalation is waited on for the client's approval
// timeout (WithApprovalTimeout), then the call is asked about again: the
// sidecar lets an approved call through once.
func (c *Client) Admit(ctx context.Context, req AuthorizeRequest) (*Admission, error) {
	// One run for the first question, the second and the intent.
	req.RunID = c.run(req.RunID)
	d, err := c.Authorize(ctx, req)
	if err != nil {
		return nil, err
	}
	if d.Escalated() && c.approvalTimeout > 0 && d.ApprovalID != "" {
		status, err := c.WaitForApproval(ctx, d.ApprovalID, c.approvalTimeout)
		if err != nil {
			return nil, err
		}
		if status == ApprovalPending {
			return nil, refusal(d, status)
		}
		// Approved: the re-authorization it grants answers allow. Denied:
		// the sidecar answers approval_denied. Expired or cancelled: it
		// decides again. The sidecar decides, never this client.
		if d, err = c.Authorize(ctx, req); err != nil {
			return nil, err
		}
	}
	if !d.Allowed() {
		return nil, refusal(d, "")
	}
	adm := &Admission{Decision: d}
	if d.IntentRequired {
		in, err := c.BeginIntent(ctx, d, IntentRequest{Tool: req.Tool, StepID: req.StepID, RunID: req.RunID})
		if err != nil {
			return nil, err
		}
		if _, err := c.MarkEffectSent(ctx, in.IntentID); err != nil {
			return nil, err
		}
		adm.IntentID = in.IntentID
	}
	return adm, nil
}

// runWithIntent runs fn and closes its intent by the outcome. Once fn has
// run, a failure to record the outcome must not make the caller think the
// effect did not happen (and run it again): it is logged, and the intent
// stays effect-sent, which a resume reports as uncertain.
func (c *Client) runWithIntent(ctx context.Context, intentID string, fn func(context.Context) error) (err error) {
	closed := false
	defer func() {
		if closed {
			return
		}
		if p := recover(); p != nil {
			c.closeIntent(ctx, intentID, OutcomeError, fmt.Sprintf("panic: %v", p))
			panic(p)
		}
	}()
	err = fn(ctx)
	closed = true
	if err != nil {
		c.closeIntent(ctx, intentID, OutcomeError, err.Error())
		return err
	}
	c.closeIntent(ctx, intentID, OutcomeCompleted, "")
	return nil
}

func (c *Client) closeIntent(ctx context.Context, intentID, outcome, detail string) {
	// Recorded even when the caller's context ended with the effect.
	ctx = context.WithoutCancel(ctx)
	if _, err := c.CompleteIntent(ctx, intentID, outcome, detail); err != nil {
		c.logger.Warn("toolgate: could not close intent (it stays effect-sent, uncertain on resume)",
			"intent_id", intentID, "outcome", outcome, "error", err)
	}
}
