// Command crossclient runs tests/cross_client/scenario.json through the Go
// client (clients/go) and prints one normalized JSON row per step.
// Usage: TOOLGATE_URL=... TOOLGATE_BIN=... TOOLGATE_DATABASE=... go run . SCENARIO RUN_ID
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	toolgate "toolgate.dev/client"
)

type call struct {
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
}

type step struct {
	Step      string         `json:"step"`
	Op        string         `json:"op"`
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
	StepID    string         `json:"step_id"`
	Calls     []call         `json:"calls"`
	Of        string         `json:"of"`
	Reason    string         `json:"reason"`
}

// row is the normalized outcome every client prints; nil fields are null.
type row struct {
	Step      string  `json:"step"`
	Verdict   *string `json:"verdict"`
	Reason    *string `json:"reason"`
	ErrorCode *string `json:"error_code"`
	Ran       bool    `json:"ran"`
}

func str(s string) *string { return &s }

func main() {
	if len(os.Args) != 3 {
		fail(errors.New("usage: go run . SCENARIO RUN_ID"))
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail(err)
	}
	var scenario struct {
		Steps []step `json:"steps"`
	}
	if err := json.Unmarshal(raw, &scenario); err != nil {
		fail(err)
	}
	// No waiting on an escalation: it is an approval_required error at once.
	c, err := toolgate.New("", toolgate.WithRunID(os.Args[2]), toolgate.WithApprovalTimeout(0))
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	approvals := map[string]string{}
	out := json.NewEncoder(os.Stdout)
	for _, s := range scenario.Steps {
		switch s.Op {
		case "approve":
			approve(approvals[s.Of])
			continue
		case "cancel":
			if _, err := c.CancelRun(ctx, "", s.Reason); err != nil {
				fail(err)
			}
			continue
		}
		var r row
		if s.Op == "batch" {
			r = batchRow(ctx, c, s)
		} else {
			r = callRow(ctx, c, s, approvals)
		}
		if err := out.Encode(r); err != nil {
			fail(err)
		}
	}
}

func callRow(ctx context.Context, c *toolgate.Client, s step, approvals map[string]string) row {
	req := toolgate.AuthorizeRequest{Tool: s.Tool, Arguments: s.Arguments, StepID: s.StepID}
	ran := false
	var err error
	if s.Op == "guard" {
		err = c.GuardRequest(ctx, req, func(context.Context) error { ran = true; return nil })
		if err == nil {
			return row{Step: s.Step, Verdict: str(toolgate.VerdictAllow), Ran: ran}
		}
	} else {
		// admit: the caller runs the call and closes its intent.
		var adm *toolgate.Admission
		if adm, err = c.Admit(ctx, req); err == nil {
			ran = true
			if adm.IntentID != "" {
				if _, err := c.CompleteIntent(ctx, adm.IntentID, toolgate.OutcomeCompleted, ""); err != nil {
					fail(err)
				}
			}
			return row{Step: s.Step, Verdict: str(adm.Decision.Verdict), Reason: str(adm.Decision.Reason), Ran: ran}
		}
	}
	var te *toolgate.Error
	if !errors.As(err, &te) {
		fail(err)
	}
	if ran {
		fail(fmt.Errorf("%s: the call ran although it was refused", s.Step))
	}
	if te.Decision == nil {
		return row{Step: s.Step, ErrorCode: str(te.Code)}
	}
	if te.Code == toolgate.CodeApprovalRequired {
		approvals[s.Step] = te.Decision.ApprovalID
	}
	return row{Step: s.Step, Verdict: str(te.Decision.Verdict), Reason: str(te.Decision.Reason), ErrorCode: str(te.Code)}
}

func batchRow(ctx context.Context, c *toolgate.Client, s step) row {
	req := toolgate.BatchRequest{}
	for _, bc := range s.Calls {
		req.Calls = append(req.Calls, toolgate.BatchCall{Tool: bc.Tool, Arguments: bc.Arguments})
	}
	b, err := c.AuthorizeBatch(ctx, req)
	if err != nil {
		fail(err)
	}
	verdicts, reasons := make([]string, 0, len(b.Decisions)), make([]string, 0, len(b.Decisions))
	for _, d := range b.Decisions {
		verdicts = append(verdicts, d.Verdict)
		reasons = append(reasons, d.Reason)
	}
	at := ""
	if b.CallIndex != nil {
		at = fmt.Sprintf("@%d", *b.CallIndex)
	}
	return row{Step: s.Step, Verdict: str(strings.Join(verdicts, ",")),
		Reason: str(b.Reason + at + ";" + strings.Join(reasons, ","))}
}

// approve grants the approval as an operator would: the real CLI on the database.
func approve(approvalID string) {
	cmd := exec.Command(os.Getenv("TOOLGATE_BIN"), "approvals", "approve", approvalID,
		"--database", os.Getenv("TOOLGATE_DATABASE"), "--by", "alice", "--reason", "cross-client")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fail(fmt.Errorf("approving %q: %w", approvalID, err))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "crossclient:", err)
	os.Exit(1)
}
