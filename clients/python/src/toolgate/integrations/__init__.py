"""Adapters that put agent frameworks' tool calls behind the sidecar. Each
imports its framework lazily, so the base package needs none of them."""
