"""The chart's `tracing` values: off by default (no OTEL_* variable, no
sidecar tracing flag anywhere); with an endpoint, the controller and the
webhook export themselves and the webhook is told what to set on sidecars."""
import pytest

# The chart helpers (importing them checks that the chart tools are
# installed, and fails under CI=true when they are not); the `chart`
# fixture is in conftest.py.
from chart_helpers import ROOT, clap_flags, container, flag, helm, render  # noqa: F401


def env(c) -> dict:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def test_tracing_is_off_by_default(chart):
    objects = render(chart)
    for name in ("controller", "webhook"):
        c = container(objects, name)
        assert not [k for k in env(c) if k.startswith("OTEL_")], env(c)
        assert not [a for a in c["args"] if "otlp" in a or "trace" in a], c["args"]


def test_an_endpoint_turns_tracing_on_everywhere(chart):
    endpoint = "http://otel-collector.observability:4318"
    objects = render(chart, {"tracing": {"otlpEndpoint": endpoint, "sampleRatio": 0.1}})
    for name in ("controller", "webhook"):
        vars = env(container(objects, name))
        assert vars["OTEL_EXPORTER_OTLP_ENDPOINT"] == endpoint
        assert vars["OTEL_SERVICE_NAME"] == f"toolgate-{name}"
        assert (vars["OTEL_TRACES_SAMPLER"], vars["OTEL_TRACES_SAMPLER_ARG"]) == ("parentbased_traceidratio", "0.1")
    args = container(objects, "webhook")["args"]
    assert flag(args, "--sidecar-otlp-endpoint") == endpoint
    assert flag(args, "--sidecar-trace-sample-ratio") == "0.1"
    known = clap_flags(ROOT / "crates" / "toolgate-webhook" / "src" / "config.rs", "WebhookArgs")
    assert {"--sidecar-otlp-endpoint", "--sidecar-trace-sample-ratio"} <= known


@pytest.mark.parametrize("bad", [{"otlpEndpoint": "collector:4318"}, {"sampleRatio": 2}, {"sampler": "x"}])
def test_bad_tracing_values_fail_the_schema(chart, bad):
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"tracing": bad})
