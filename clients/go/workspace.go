package toolgate

import (
	"context"
	"net/http"
)

// The workspace API: files under the run's own directory, each operation
// decided as the tool workspace.<op> (a refusal is a CodePolicyDenied or
// CodeApprovalRequired error carrying its Decision).

// FileContent is a UTF-8 file read from the run's workspace.
type FileContent struct {
	DecisionID string `json:"decision_id"`
	Path       string `json:"path"`
	Content    string `json:"content"`
	Provenance string `json:"provenance"` // INTERNAL_TOOL or EXTERNAL_UNTRUSTED
	Extra      Extra  `json:"-"`
}

// Written is a file written to the run's workspace.
type Written struct {
	DecisionID string `json:"decision_id"`
	Path       string `json:"path"`
	Bytes      int64  `json:"bytes"`
	Provenance string `json:"provenance"`
	Extra      Extra  `json:"-"`
}

// Entry is one directory entry.
type Entry struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"` // file or dir
	Provenance string `json:"provenance"`
}

// Listing is a directory's entries, sorted by name.
type Listing struct {
	DecisionID     string  `json:"decision_id"`
	Path           string  `json:"path"`
	Entries        []Entry `json:"entries"`
	Provenance     string  `json:"provenance"`
	Truncated      bool    `json:"truncated"`
	SkippedNonUTF8 int     `json:"skipped_non_utf8"`
	Extra          Extra   `json:"-"`
}

// FileStat describes a workspace path.
type FileStat struct {
	DecisionID string `json:"decision_id"`
	Path       string `json:"path"`
	Kind       string `json:"kind"`
	Size       int64  `json:"size"`
	Provenance string `json:"provenance"`
	Extra      Extra  `json:"-"`
}

// WorkspaceRequest names a path of a run's workspace ("" is its root, for
// List and Stat). RunID "" is the client's run.
type WorkspaceRequest struct {
	Path   string
	RunID  string
	StepID string
}

func (c *Client) workspace(ctx context.Context, op string, req WorkspaceRequest, content *string, out any,
	required ...string) (Extra, error) {
	body := map[string]any{"run_id": c.run(req.RunID), "path": req.Path}
	if content != nil {
		body["content"] = *content
	}
	if req.StepID != "" {
		body["step_id"] = req.StepID
	}
	data, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/workspace/" + op, body: body})
	if err != nil {
		return nil, err
	}
	return decodeObject(data, out, "workspace."+op, append([]string{"decision_id", "path", "provenance"}, required...)...)
}

// Read reads a UTF-8 file.
func (c *Client) Read(ctx context.Context, req WorkspaceRequest) (*FileContent, error) {
	out := &FileContent{}
	extra, err := c.workspace(ctx, "read", req, nil, out, "content")
	if err != nil {
		return nil, err
	}
	out.Extra = extra
	return out, nil
}

// Write writes content (UTF-8 text) to a file, creating its directories.
func (c *Client) Write(ctx context.Context, req WorkspaceRequest, content string) (*Written, error) {
	out := &Written{}
	extra, err := c.workspace(ctx, "write", req, &content, out, "bytes")
	if err != nil {
		return nil, err
	}
	out.Extra = extra
	return out, nil
}

// List lists a directory.
func (c *Client) List(ctx context.Context, req WorkspaceRequest) (*Listing, error) {
	out := &Listing{}
	extra, err := c.workspace(ctx, "list", req, nil, out, "entries")
	if err != nil {
		return nil, err
	}
	out.Extra = extra
	return out, nil
}

// Stat describes a path.
func (c *Client) Stat(ctx context.Context, req WorkspaceRequest) (*FileStat, error) {
	out := &FileStat{}
	extra, err := c.workspace(ctx, "stat", req, nil, out, "kind", "size")
	if err != nil {
		return nil, err
	}
	out.Extra = extra
	return out, nil
}
