//go:build tools

// Package tools pins the command scripts/jaeger.py builds from this module.
package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
