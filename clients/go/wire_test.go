package toolgate_test

// Answers the real sidecar never gives (malformed ones) and the headers a
// request carries, from an httptest server standing in for it.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	toolgate "toolgate.dev/client"
)

const goodVerdict = `{"decision_id":"d1","verdict":"allow","reason":"allow_rule","matched_rule":null,
"policy_version":"p@1","risk":"low","intent_required":false,"args_digest":"sha256:a","call_digest":"sha256:c"`

// fake answers every request with status and body, and records the
// requests' headers.
func fake(t *testing.T, status int, body string) (*toolgate.Client, func() []http.Header) {
	t.Helper()
	var mu sync.Mutex
	var seen []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	c, err := toolgate.New(srv.URL, toolgate.WithTimeout(2*time.Second), toolgate.WithApprovalTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	return c, func() []http.Header { mu.Lock(); defer mu.Unlock(); return seen }
}

func TestMalformedAnswersFailClosed(t *testing.T) {
	cases := map[string]struct {
		status int
		body   string
	}{
		"not json":               {200, `<html>ok</html>`},
		"not an object":          {200, `["allow"]`},
		"missing call_digest":    {200, strings.Replace(goodVerdict, `"call_digest":"sha256:c"`, `"x":1`, 1) + "}"},
		"null verdict":           {200, strings.Replace(goodVerdict, `"allow"`, `null`, 1) + "}"},
		"unknown verdict":        {200, strings.Replace(goodVerdict, `"allow"`, `"allow_maybe"`, 1) + "}"},
		"wrong type":             {200, strings.Replace(goodVerdict, `false`, `"no"`, 1) + "}"},
		"error without envelope": {502, `bad gateway`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, _ := fake(t, tc.status, tc.body)
			ran := false
			err := c.Guard(bg(), "lookup", nil, func(context.Context) error { ran = true; return nil })
			if ran || !toolgate.IsCode(err, toolgate.CodeBadResponse) || !errors.Is(err, toolgate.ErrBadResponse) {
				t.Fatalf("ran %v: %v", ran, err)
			}
		})
	}
	// A well-formed answer with members this client does not know still reads.
	c, _ := fake(t, 200, goodVerdict+`,"shiny_new_field":7}`)
	d, err := c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: "lookup"})
	if err != nil || !d.Allowed() || !d.Enforced || string(d.Extra["shiny_new_field"]) != "7" {
		t.Fatalf("%+v %v", d, err)
	}
	// An envelope with an unknown code keeps that code.
	c, _ = fake(t, 503, `{"error":{"code":"brand_new_code","message":"m"}}`)
	_, err = c.Authorize(bg(), toolgate.AuthorizeRequest{Tool: "lookup"})
	asError(t, err, "brand_new_code", 503)
}

func TestTraceContextIsSent(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	c, seen := fake(t, 200, goodVerdict+"}")
	ctx := toolgate.WithTraceParent(bg(), parent, "vendor=abc")
	if err := c.Guard(ctx, "lookup", nil, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	plain := bg()
	if _, err := c.Authorize(plain, toolgate.AuthorizeRequest{Tool: "lookup"}); err != nil {
		t.Fatal(err)
	}
	bad := toolgate.WithTraceParent(bg(), "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "vendor=abc")
	if _, err := c.Authorize(bad, toolgate.AuthorizeRequest{Tool: "lookup"}); err != nil {
		t.Fatal(err)
	}
	h := seen()
	if len(h) != 3 {
		t.Fatalf("%d requests", len(h))
	}
	if h[0].Get("traceparent") != parent || h[0].Get("tracestate") != "vendor=abc" ||
		h[0].Get("Content-Type") != "application/json" || h[0].Get("Accept") != "application/json" {
		t.Fatalf("traced request headers: %v", h[0])
	}
	for i, hh := range h[1:] {
		if hh.Get("traceparent") != "" || hh.Get("tracestate") != "" {
			t.Fatalf("request %d sent trace headers: %v", i+1, hh)
		}
	}
}

func TestTraceParentAgainstTheRealSidecar(t *testing.T) {
	c := newClient(t)
	ctx := toolgate.WithTraceParent(bg(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	if d, err := c.Authorize(ctx, toolgate.AuthorizeRequest{Tool: "lookup"}); err != nil || !d.Allowed() {
		t.Fatalf("%+v %v", d, err)
	}
}

// The client knows every code of docs/sidecar.md's table, which a Rust test
// keeps equal to toolgate_contract::errors.
func TestTheClientKnowsEveryErrorCodeOfTheContract(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "docs", "sidecar.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(text), "<!-- error-codes:begin -->")
	table, _, ok := strings.Cut(rest, "<!-- error-codes:end -->")
	if !ok {
		t.Fatal("no error-codes table in docs/sidecar.md")
	}
	var docs []string
	for _, m := range regexp.MustCompile("(?m)^\\| \\d{3} \\| `([a-z_]+)` \\|").FindAllStringSubmatch(table, -1) {
		docs = append(docs, m[1])
	}
	known := toolgate.SidecarCodes()
	sort.Strings(docs)
	sort.Strings(known)
	if len(docs) < 30 || !reflect.DeepEqual(docs, known) {
		t.Fatalf("docs codes %v\nclient codes %v", docs, known)
	}
	// And the limits it shares with the sidecar.
	for _, row := range []string{"| `agent_api::MAX_WAIT_SECONDS` | `60` |", "| `env::URL` | `TOOLGATE_URL` |"} {
		if !strings.Contains(string(text), row) || toolgate.MaxWaitSeconds != 60 || toolgate.URLEnv != "TOOLGATE_URL" {
			t.Fatalf("limit row %q", row)
		}
	}
	if !strings.Contains(strings.ToLower(string(text)), "`"+strings.ToLower(toolgate.RunIDHeader)+"`") {
		t.Fatal("run id header differs from the docs")
	}
}
