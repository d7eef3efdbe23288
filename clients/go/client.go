// Package toolgate is the Go client of the toolgate sidecar: it asks the
// sidecar whether an agent's tool call may run, and runs it only then.
//
// Every failure is an *Error carrying the sidecar's stable code; no
// failure (a sidecar that is down, an answer that does not read) ever
// lets a guarded call run.
package toolgate

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

const (
	// URLEnv is the environment variable the admission webhook sets in
	// agent containers: the sidecar's URL.
	URLEnv = "TOOLGATE_URL"
	// RunIDHeader names the run on the sidecar's MCP gateway
	// ($TOOLGATE_URL/mcp/NAME): an MCP client sending it joins the run.
	RunIDHeader = "X-Toolgate-Run-Id"
	// MaxWaitSeconds is the longest approval long-poll the sidecar serves.
	MaxWaitSeconds = 60
	// MaxBatchCalls is the most calls one batch may hold.
	MaxBatchCalls = 64
	// MaxDetailChars bounds the detail sent when an intent closes with an error.
	MaxDetailChars = 1000
	// NoStep is the step id recorded for an intent outside any step.
	NoStep = "-"

	// DefaultTimeout bounds each request (a long-poll gets its wait on top).
	DefaultTimeout = 10 * time.Second
	// DefaultApprovalTimeout is how long Guard waits for a human.
	DefaultApprovalTimeout = 5 * time.Minute

	// maxAnswerBytes bounds what is read of one answer.
	maxAnswerBytes = 8 << 20
)

// Client talks to one sidecar on behalf of one agent run. It is safe for
// concurrent use.
type Client struct {
	url             string
	runID           string
	http            *http.Client
	timeout         time.Duration
	approvalTimeout time.Duration
	logger          *slog.Logger
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends requests through hc (its Timeout, if set, also
// bounds long-polls). The default client ignores proxy settings from the
// environment: the sidecar is on loopback, and these requests must never
// be routed elsewhere.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithTimeout bounds each request (default DefaultTimeout).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithRunID names the run the client's calls belong to (default: a fresh
// UUID). A request's own RunID overrides it.
func WithRunID(id string) Option { return func(c *Client) { c.runID = id } }

// WithApprovalTimeout is how long Guard and Admit wait for a human to
// answer an escalation (default DefaultApprovalTimeout; 0 does not wait:
// an escalation is a CodeApprovalRequired error at once).
func WithApprovalTimeout(d time.Duration) Option { return func(c *Client) { c.approvalTimeout = d } }

// WithLogger receives the client's warnings (a warn-mode verdict, an
// intent that could not be closed); default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.logger = l } }

// New is a client of the sidecar at rawURL, or at $TOOLGATE_URL when
// rawURL is "".
func New(rawURL string, opts ...Option) (*Client, error) {
	if rawURL == "" {
		rawURL = os.Getenv(URLEnv)
	}
	if rawURL == "" {
		return nil, fmt.Errorf("toolgate: no sidecar URL: pass one or set $%s", URLEnv)
	}
	if !strings.HasPrefix(rawURL, "http://") && !strings.HasPrefix(rawURL, "https://") {
		return nil, fmt.Errorf("toolgate: sidecar URL must be http(s)://host:port, got %q", rawURL)
	}
	if _, err := url.Parse(rawURL); err != nil {
		return nil, fmt.Errorf("toolgate: sidecar URL %q: %w", rawURL, err)
	}
	c := &Client{
		url:             strings.TrimRight(rawURL, "/"),
		timeout:         DefaultTimeout,
		approvalTimeout: DefaultApprovalTimeout,
	}
	for _, opt := range opts {
		opt(c)
	}
	if c.http == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.Proxy = nil
		c.http = &http.Client{Transport: transport}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.runID == "" {
		c.runID = newUUID()
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	return c, nil
}

// URL is the sidecar's URL, without a trailing slash.
func (c *Client) URL() string { return c.url }

// RunID is the run the client's calls belong to unless a request names another.
func (c *Client) RunID() string { return c.runID }

func (c *Client) run(id string) string {
	if id != "" {
		return id
	}
	return c.runID
}

// newUUID is a random (version 4) UUID, as the Python client's run ids.
func newUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("toolgate: no randomness for a run id: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// request is one call of the agent API.
type request struct {
	method string
	path   string
	query  url.Values
	body   any // nil: no body
	wait   time.Duration
}

// do sends r and returns the JSON of a 2xx answer; any other outcome is
// an *Error.
func (c *Client) do(ctx context.Context, r request) (json.RawMessage, error) {
	var body io.Reader
	if r.body != nil {
		data, err := json.Marshal(r.body)
		if err != nil {
			return nil, &Error{Code: CodeInvalidRequest, Message: "request does not encode as JSON: " + err.Error(), Err: err}
		}
		body = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout+r.wait)
	defer cancel()
	target := c.url + r.path
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return nil, &Error{Code: CodeInvalidRequest, Message: err.Error(), Err: err}
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	setTraceHeaders(ctx, req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &Error{
			Code:    CodeSidecarUnreachable,
			Message: fmt.Sprintf("no answer from the toolgate sidecar at %s: %v", c.url, err),
			Err:     err,
		}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, &Error{
			Code:    CodeSidecarUnreachable,
			Status:  resp.StatusCode,
			Message: fmt.Sprintf("answer from the toolgate sidecar at %s broke off: %v", c.url, err),
			Err:     err,
		}
	}
	if len(data) > maxAnswerBytes {
		return nil, badResponse(resp.StatusCode, "answer over %d bytes", maxAnswerBytes)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if !json.Valid(data) {
			return nil, badResponse(resp.StatusCode, "HTTP %d answer is not JSON", resp.StatusCode)
		}
		return data, nil
	}
	return nil, errorFromAnswer(resp.StatusCode, data)
}

// errorFromAnswer reads a refusal's {"error": {"code", "message"}} (plus
// the refusing verdict of a governed operation).
func errorFromAnswer(status int, data []byte) *Error {
	var envelope struct {
		Error *struct {
			Code    *string `json:"code"`
			Message string  `json:"message"`
		} `json:"error"`
		Verdict json.RawMessage `json:"verdict"`
	}
	if err := json.Unmarshal(data, &envelope); err != nil || envelope.Error == nil || envelope.Error.Code == nil {
		snippet := string(data)
		if len(snippet) > 200 {
			snippet = snippet[:200]
		}
		return badResponse(status, "HTTP %d without an error envelope: %s", status, snippet)
	}
	e := &Error{Code: *envelope.Error.Code, Message: envelope.Error.Message, Status: status}
	if len(envelope.Verdict) > 0 && (e.Code == CodePolicyDenied || e.Code == CodeApprovalRequired) {
		if d, err := decodeDecision(envelope.Verdict); err == nil {
			e.Decision, e.Reason = d, d.Reason
		}
	}
	return e
}

// seg is an id as one path segment; an empty id is refused here, since it
// would name another endpoint.
func seg(id, what string) (string, error) {
	if id == "" {
		return "", &Error{Code: CodeInvalidRequest, Message: what + " must not be empty"}
	}
	return url.PathEscape(id), nil
}
