package toolgate

import (
	"context"
	"net/http"
	"strings"
)

type traceKey struct{}

type traceContext struct{ parent, state string }

// WithTraceParent carries the caller's W3C trace context (the
// `traceparent` and optional `tracestate` header values): every request
// made with the returned context sends them, so the sidecar's decision
// spans join the caller's trace, as the Python client does through
// OpenTelemetry. A traceparent that is not well formed is not sent (nor
// its tracestate).
func WithTraceParent(ctx context.Context, traceparent, tracestate string) context.Context {
	return context.WithValue(ctx, traceKey{}, traceContext{parent: traceparent, state: tracestate})
}

func setTraceHeaders(ctx context.Context, h http.Header) {
	tc, ok := ctx.Value(traceKey{}).(traceContext)
	if !ok || !validTraceparent(tc.parent) {
		return
	}
	h.Set("traceparent", tc.parent)
	if tc.state != "" && validTracestate(tc.state) {
		h.Set("tracestate", tc.state)
	}
}

// validTraceparent checks the W3C form version-traceid-parentid-flags:
// lowercase hex, ids not all zero, version ff invalid, version 00 exactly
// 55 characters (a later version may append fields after a dash).
func validTraceparent(s string) bool {
	if len(s) < 55 || (len(s) > 55 && s[55] != '-') || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	version, trace, parent, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if !lowerHex(version) || version == "ff" || (version == "00" && len(s) != 55) {
		return false
	}
	return lowerHex(trace) && lowerHex(parent) && lowerHex(flags) &&
		strings.Trim(trace, "0") != "" && strings.Trim(parent, "0") != ""
}

// validTracestate admits at most 512 printable ASCII characters (the
// header's vendor entries are opaque to the client).
func validTracestate(s string) bool {
	if len(s) > 512 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}
