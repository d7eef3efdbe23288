"""Shared by the chart tests (test_chart*.py): the chart tools (real Helm
v4, embedded through helm-python-sdk, and kubernetes-validate with offline
Kubernetes OpenAPI schemas), rendering with duplicate keys refused, and the
lookups the tests use. The session fixtures `chart` and `rendered` are in
conftest.py.

Importing this module skips the importing test module when the chart tools
are missing (`pip install -r tests/chart/requirements.txt`), and fails under
CI=true.
"""
from __future__ import annotations

import os
import pathlib
import re
from typing import Any

import pytest
import yaml

try:
    import helm_python as helm
    import kubernetes_validate  # noqa: F401  (used by the test modules)
except ImportError as missing:  # pragma: no cover - environment check
    message = f"{missing.name} is not installed: pip install -r tests/chart/requirements.txt"
    if os.environ.get("CI") == "true":
        raise ImportError(message) from missing
    pytest.skip(message, allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
CHART = ROOT / "charts" / "toolgate"
KUBE_VERSION = "1.33.0"
RELEASE = "toolgate"
NAMESPACE = "toolgate-system"

# Kinds whose schema is not in kubernetes-validate (CRDs of other projects).
EXTERNAL_KINDS = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}

VALUE_SETS = {
    "default": {},
    "full": yaml.safe_load((HERE / "values-full.yaml").read_text()),
}


class StrictLoader(yaml.SafeLoader):
    """Refuses duplicate mapping keys (PyYAML keeps the last one silently;
    kubectl and the API server's YAML decoding do not)."""


def _no_duplicates(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {sorted(dupes)}", node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    manifests = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.load_all(text, Loader=StrictLoader):
            if doc:
                doc.setdefault("metadata", {})
                objects.append(doc)
    return objects


def only(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def all_of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def deployment(objects):
    return only(objects, "Deployment")


def container(objects, name: str) -> dict[str, Any]:
    containers = deployment(objects)["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def flag(args: list[str], name: str) -> str:
    assert name in args, f"{name} missing from {args}"
    return args[args.index(name) + 1]


def clap_flags(source: pathlib.Path, struct: str) -> set[str]:
    """`--kebab-case` flags of a clap `#[derive(Args)]` struct, read from its source."""
    text = source.read_text()
    body = re.search(r"pub struct " + struct + r"\s*\{(.*?)\n\}", text, re.S)
    assert body, f"struct {struct} not found in {source}"
    fields = re.findall(r"pub (\w+):", body.group(1))
    return {"--" + f.replace("_", "-") for f in fields}


def label_selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Kubernetes LabelSelector semantics (matchLabels AND matchExpressions)."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels[key] in values,
            "NotIn": not present or labels[key] not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[op]
        if not ok:
            return False
    return True
