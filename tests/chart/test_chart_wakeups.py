"""The chart's wake-up relay (`wakeupsRelay`): off by default; on, a
Deployment and Service of `toolgate wakeups serve` on the controller's
database, whose URL the webhook hands every injected sidecar unless
`sidecar.wakeupsUrl` names another relay."""
import re

import pytest

# The chart helpers (importing them checks that the chart tools are
# installed, and fails under CI=true when they are not); the `chart`
# fixture is in conftest.py.
from chart_helpers import (KUBE_VERSION, NAMESPACE, RELEASE, ROOT, clap_flags, flag, helm,  # noqa: F401
                           kubernetes_validate, only, render)


def webhook_args(objects):
    """The webhook container's args, in the controller's Deployment (the
    relay's is a second Deployment)."""
    pod = only(objects, "Deployment", RELEASE)["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "webhook")["args"]


def relay_objects(objects):
    return [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "wakeups"]


def test_the_relay_is_off_by_default(chart):
    objects = render(chart)
    assert relay_objects(objects) == []
    assert "--sidecar-wakeups-url" not in webhook_args(objects)


def test_an_enabled_relay_serves_the_fleet_and_the_sidecars_are_told(chart):
    objects = render(chart, {"wakeupsRelay": {"enabled": True, "replicas": 3},
                             "networkPolicy": {"enabled": True}})
    relay = relay_objects(objects)
    assert sorted(o["kind"] for o in relay) == ["Deployment", "NetworkPolicy", "Service"]
    for obj in relay:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    deploy = only(relay, "Deployment")
    assert deploy["spec"]["replicas"] == 3
    pod = deploy["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (c,) = pod["containers"]
    assert c["args"][:2] == ["wakeups", "serve"]
    assert flag(c["args"], "--listen") == "0.0.0.0:8790"
    assert flag(c["args"], "--database") == "$(TOOLGATE_DATABASE_URL)"
    assert int(flag(c["args"], "--max-subscribers")) == 20000
    # Every flag the chart passes is one the command declares.
    source = (ROOT / "crates" / "toolgate" / "src" / "cmd" / "wakeups.rs").read_text()
    declared = {"--" + f.replace("_", "-") for f in re.findall(r"^\s+(\w+): \w", source, re.M)}
    declared |= clap_flags(ROOT / "crates" / "toolgate-sidecar" / "src" / "database.rs", "DatabaseArgs")
    assert {a for a in c["args"] if a.startswith("--")} <= declared, declared
    # The controller's (direct) database Secret, not a tenant's or a pooler's.
    (url,) = [e for e in c["env"] if e["name"] == "TOOLGATE_DATABASE_URL"]
    assert url["valueFrom"]["secretKeyRef"]["key"] == "url"
    service = only(relay, "Service")
    selector = service["spec"]["selector"]
    assert all(deploy["spec"]["template"]["metadata"]["labels"][k] == v for k, v in selector.items())
    name = service["metadata"]["name"]
    expected = f"http://{name}.{NAMESPACE}.svc:8790"
    assert flag(webhook_args(objects), "--sidecar-wakeups-url") == expected
    # A relay named explicitly wins over the chart's own.
    other = "http://relay.elsewhere:9000"
    objects = render(chart, {"wakeupsRelay": {"enabled": True}, "sidecar": {"wakeupsUrl": other}})
    assert flag(webhook_args(objects), "--sidecar-wakeups-url") == other


@pytest.mark.parametrize("bad", [{"wakeupsRelay": {"port": 0}}, {"wakeupsRelay": {"replicas": 0}},
                                 {"wakeupsRelay": {"listen": "0.0.0.0:1"}}])
def test_bad_relay_values_are_refused(chart, bad):
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)
