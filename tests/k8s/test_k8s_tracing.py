"""Traces of the controller and the webhook on the real API server: with
OTEL_EXPORTER_OTLP_ENDPOINT set (conftest points it at a real Jaeger), a
PolicyProfile's reconcile and its bundle publish, and the review of a pod's
admission, arrive in Jaeger with what they were about."""
import json
import time
import urllib.parse
import urllib.request

import pytest

from k8s_env import profile, wait_for


def spans_of(jaeger, service: str, operation: str) -> list[dict]:
    """Every span `operation` of `service` Jaeger holds, with its tags as a
    dict and the names of its children."""
    query = urllib.parse.urlencode({"service": service, "operation": operation, "limit": 200, "lookback": "1h"})
    with urllib.request.urlopen(f"{jaeger['query']}/api/traces?{query}", timeout=5) as r:
        traces = json.load(r)["data"] or []
    out = []
    for t in traces:
        for s in t["spans"]:
            if s["operationName"] == operation:
                children = [c["operationName"] for c in t["spans"]
                            if any(ref["spanID"] == s["spanID"] for ref in c["references"])]
                out.append({"tags": {x["key"]: x["value"] for x in s["tags"]}, "children": children})
    return out


def test_a_profile_reconcile_and_its_publish_are_traced(kube, jaeger):
    ns = kube.namespace("traced")
    kube.apply(profile("traced-profile", ns))
    wait_for("bundle ConfigMap", lambda: kube.get("configmap", "toolgate-bundle-traced-profile", "-n", ns))

    def reconciled():
        return [s for s in spans_of(jaeger, "toolgate-controller", "reconcile PolicyProfile")
                if s["tags"].get("toolgate.object") == "traced-profile"
                and "toolgate.bundle.publish" in s["children"]]
    found = wait_for("the reconcile that published, in Jaeger", reconciled, timeout=30)
    assert found[0]["tags"]["k8s.namespace.name"] == ns
    assert found[0]["tags"]["toolgate.kind"] == "PolicyProfile"
    # The approval mirror and the checkpoint pass run on their own timers.
    assert wait_for("a mirror pass", lambda: spans_of(jaeger, "toolgate-controller", "toolgate.approvals.mirror"),
                    timeout=60)


def test_admission_reviews_are_traced(kube, jaeger):
    ns = kube.namespace("traced-admission")
    bad = {"apiVersion": "toolgate.dev/v1alpha1", "kind": "PolicyProfile",
           "metadata": {"name": "bad-glob", "namespace": ns},
           "spec": {"mode": "rules", "rules": {"bash": {"allow": ["[unclosed"]}}}}
    out = kube.apply(bad, check=False)
    assert out.returncode != 0, "the webhook refuses the profile"

    def refused():
        return [s for s in spans_of(jaeger, "toolgate-webhook", "admission validate-policyprofiles")
                if s["tags"].get("k8s.namespace.name") == ns and s["tags"].get("k8s.object.name") == "bad-glob"]
    span = wait_for("the refused review, in Jaeger", refused, timeout=30)[0]
    assert span["tags"]["toolgate.admission.allowed"] is False
    assert span["tags"]["toolgate.admission.reason"].startswith("profile_"), span["tags"]
    assert span["tags"]["toolgate.admission.operation"] == "CREATE"
