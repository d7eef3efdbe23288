"""`kubectl toolgate replay PROFILE-FILE` on a real API server: a real
sidecar, run from an injected pod's spec with the tenant credential the
controller wrote into the namespace, records a decision log with its
inputs (`spec.audit.recordInputs: full`); the plugin finds that database
through the namespace's `toolgate-database` Secret and replays the log
against a candidate file: the exact transition matrix and exit 3, the
active profile itself exit 0; `--database` overrides the Secret; a missing
Secret, an unreachable database or a namespace the file contradicts are
errors (exit 1) saying what to do."""
import json
import subprocess

import yaml

from k8s_env import free_port, post_json, ready, start_injected_sidecar, stop_sidecar, wait_for

RULES = {"bash": {"deny": ["rm *"], "allow": ["echo *", "git *", "curl *"], "escalate": ["deploy *"]},
         "reader": {"allow": ["*"]}}
EFFECTS = {"bash": {"sideEffect": "PROCESS_EXEC", "risk": "low", "matchArgs": ["command"]},
           "reader": {"sideEffect": "WORKSPACE_READ", "risk": "low", "readOnly": True, "matchArgs": ["path"]}}

# The agent's calls: (run, tool, argument, verdict under the active profile).
CALLS = [
    ("r1", "bash", "echo hi", "allow"),
    ("r1", "bash", "rm -rf build", "deny"),
    ("r1", "bash", "deploy prod", "escalate"),
    ("r1", "reader", "notes/key.pem", "allow"),
    ("r1", "bash", "curl https://example.com", "allow"),
    ("r2", "bash", "curl https://example.com", "allow"),
    ("r2", "bash", "git status", "allow"),
]

# What the candidate changes: `rm` allowed (the loosening), `deploy` denied,
# and `curl` denied in a run that read something (only r1's history makes
# its curl a flip).
MATRIX = {"allow→allow": 4, "deny→allow": 1, "escalate→deny": 1, "allow→deny": 1}


def _active(ns):
    return {"apiVersion": "toolgate.dev/v1alpha1", "kind": "PolicyProfile",
            "metadata": {"name": "replayed", "namespace": ns},
            "spec": {"mode": "rules", "rules": RULES, "effects": EFFECTS, "audit": {"recordInputs": "full"}}}


def _candidate(ns):
    obj = _active(ns)
    if ns is None:
        del obj["metadata"]["namespace"]
    obj["spec"]["rules"] = {**RULES, "bash": {"deny": ["deploy *"], "allow": ["echo *", "git *", "curl *", "rm *"]}}
    obj["spec"]["flows"] = {"labels": {"private": {"tools": ["reader"]}},
                            "rules": [{"name": "no-exfiltration", "when": ["private"],
                                       "deny": {"tools": ["bash"], "match": ["curl *"]}}]}
    return obj


def _file(tmp_path, name, obj):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(obj, allow_unicode=True))
    return str(path)


def _replay(kube, *args):
    return kube("toolgate", "replay", *args, check=False, timeout=60)


def _report(out):
    assert out.stdout, f"no report (exit {out.returncode}): {out.stderr}"
    return json.loads(out.stdout)


def _record_calls(kube, ns, tmp_path):
    """Runs CALLS through the injected pod's sidecar (as a kubelet would
    start it); returns once the log holds every decision with its input."""
    url, _, proc = start_injected_sidecar(kube, ns, "agent-0", "replayed", tmp_path)
    try:
        for i, (run, tool, arg, verdict) in enumerate(CALLS):
            name = "command" if tool == "bash" else "path"
            _, answer = post_json(f"{url}/v1/authorize",
                                  {"tool": tool, "arguments": {name: arg}, "run_id": run, "step_id": f"s{i}"})
            assert answer.get("verdict") == verdict, (tool, arg, answer)
        # The log is written behind the answers: replay the active profile
        # until every decision is there with its input.
        active = _file(tmp_path, "settle.yaml", _active(ns))
        wait_for("every decision logged with its input",
                 lambda: _report(_replay(kube, active, "--format", "json"))["replayed"] == len(CALLS), 30)
    finally:
        stop_sidecar(proc)


def test_replay_reads_the_namespace_log_through_its_tenant_secret(kube, cluster, tmp_path):
    ns = kube.namespace("replay-e2e", {"toolgate.dev/inject": "true"})
    kube.apply(_active(ns))
    wait_for("profile Ready and tenant Secret", lambda: ready((kube.get("tgp", "replayed", "-n", ns) or {})
                                                            .get("status")) and kube.get("secret", "toolgate-database",
                                                                                         "-n", ns))
    _record_calls(kube, ns, tmp_path)

    # The candidate: the exact matrix, loosenings listed first, exit 3.
    candidate = _file(tmp_path, "candidate.yaml", _candidate(ns))
    out = _replay(kube, candidate, "--format", "json")
    report = _report(out)
    assert out.returncode == 3, (out.stderr, report)
    assert (report["decisions"], report["replayed"], report["changed"], report["loosened"]) == (7, 7, 3, 1), report
    assert report["transitions"] == MATRIX, report
    first = report["changes"][0]
    assert (first["old"]["verdict"], first["new"]["verdict"], first["tenant"]) == ("deny", "allow", ns), first
    curl = next(c for c in report["changes"] if c["new"]["reason"] == "flow_rule")
    assert curl["run_id"] == "r1", curl

    # The table for people, same exit status.
    out = _replay(kube, candidate)
    assert out.returncode == 3, out.stderr
    assert "decisions read 7, replayed 7, unchanged 4, changed 3 (1 loosened), not replayed 0" in out.stdout
    lines = out.stdout.splitlines()
    assert "  deny→allow           1" in lines and "  allow→deny           1" in lines, out.stdout
    changed = lines[lines.index("changed decisions (loosenings first):") + 2]
    assert changed.startswith("deny→allow") and "deny deny_rule (deny:bash:rm *)" in changed, out.stdout

    # The active profile itself changes nothing: exit 0. It is compiled as
    # the controller published it: the same policy version.
    active = _file(tmp_path, "active.yaml", _active(ns))
    out = _replay(kube, active, "--format", "json")
    assert out.returncode == 0, out.stderr
    published = kube.get("tgp", "replayed", "-n", ns)["status"]["version"]
    assert (_report(out)["changed"], _report(out)["replayed"]) == (0, 7)
    assert _report(out)["candidate_version"] == published

    # With the profile's standing grants in the namespace too: an approved
    # grant republishes the bundle, and the replayed file gets the grant.
    me = json.loads(kube("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]["username"]
    kube.create({"apiVersion": "toolgate.dev/v1alpha1", "kind": "Approval",
                 "metadata": {"name": "grant-deploy", "namespace": ns},
                 "spec": {"grant": {"profile": "replayed", "tool": "bash", "glob": "deploy *", "subjects": ["*"],
                                    "expiresAt": "2099-01-01T00:00:00Z"}}})
    kube("patch", "approval", "grant-deploy", "-n", ns, "--type", "merge", "-p",
         json.dumps({"spec": {"decision": "approved", "decidedBy": me}}))
    granted = wait_for("bundle with the grant", lambda: (v := kube.get("tgp", "replayed", "-n", ns)["status"]
                                                         .get("version")) != published and v, 30)
    out = _replay(kube, active, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert _report(out)["candidate_version"] == granted, (granted, _report(out))

    # --min-replayed past what the window holds fails the gate.
    out = _replay(kube, candidate, "--since", "2000-01-01T00:00:00Z", "--until", "2001-01-01T00:00:00Z",
                  "--min-replayed", "1")
    assert out.returncode == 1 and "fewer than --min-replayed 1" in out.stderr, out

    # --database overrides the Secret (here the platform's own URL), the
    # namespace coming from -n when the file names none.
    unnamed = _file(tmp_path, "unnamed.yaml", _candidate(None))
    out = _replay(kube, unnamed, "-n", ns, "--database", cluster["database_url"], "--format", "json")
    assert out.returncode == 3, out.stderr
    assert _report(out)["transitions"] == MATRIX
    # A file and a flag naming different namespaces: refused.
    out = _replay(kube, candidate, "-n", "elsewhere")
    assert out.returncode == 1 and "does not match -n `elsewhere`" in out.stderr, out


def test_without_a_reachable_database_replay_says_what_to_do(kube, tmp_path):
    ns = kube.namespace("replay-nodb")
    candidate = _file(tmp_path, "candidate.yaml", _candidate(ns))
    out = _replay(kube, candidate)
    assert out.returncode == 1, out
    assert f"no Secret toolgate-database in namespace {ns}" in out.stderr, out.stderr
    assert "pass --database URL" in out.stderr and not out.stdout, out

    # A Secret whose host this machine cannot reach (as an in-cluster
    # Service name often is): the error says to port-forward.
    kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "toolgate-database", "namespace": ns},
                 "stringData": {"url": f"postgres://tenant:pw@127.0.0.1:{free_port()}/toolgate"}})
    out = _replay(kube, candidate)
    assert out.returncode == 1, out
    assert f"cannot reach the database of Secret {ns}/toolgate-database" in out.stderr, out.stderr
    assert "port-forward" in out.stderr and "pw@" not in out.stderr, out.stderr

    # A mistyped SQLite path is an error, not a new empty log that passes.
    out = _replay(kube, candidate, "--database", f"sqlite://{tmp_path}/typo.db")
    assert out.returncode == 1 and "cannot reach the database of --database" in out.stderr, out
    assert not (tmp_path / "typo.db").exists()

    # A candidate that does not compile is refused before any database.
    broken = _candidate(ns)
    broken["spec"]["mode"] = "sometimes"
    out = _replay(kube, _file(tmp_path, "broken.yaml", broken))
    assert out.returncode == 1 and "profile_invalid_mode" in out.stderr, out
