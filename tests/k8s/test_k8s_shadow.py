"""Shadow mode on a real API server: a PolicyProfile names a second profile
as its candidate (`spec.candidate`); the controller signs the candidate into
the profile's bundle; a real sidecar (this checkout's binary, run from the
injected pod's spec) enforces the active policy only, evaluates the
candidate beside it and reports what it decided with its heartbeats; the
profile's status then carries `CandidateDisagrees` with the transitions,
and `kubectl toolgate status` prints them. Changing the candidate re-signs
the bundle without changing the active version; deleting it drops the
candidate and says why."""
import time
import urllib.request

from k8s_env import free_port, post_json, profile, start_injected_sidecar, stop_sidecar, wait_for


def _condition(obj, kind):
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), None)


def _bundle_annotations(kube, ns, name):
    cm = kube.get("configmap", f"toolgate-bundle-{name}", "-n", ns)
    return (cm or {}).get("metadata", {}).get("annotations", {})


def test_candidate_is_shadowed_counted_and_followed(kube, tmp_path):
    ns = kube.namespace("shadow-e2e", {"toolgate.dev/inject": "true"})
    # The candidate denies `git log*`, which the active profile allows.
    stricter = profile("next", ns)
    stricter["spec"]["rules"]["bash"]["deny"].append("git log*")
    kube.apply(stricter)
    active = profile("prod", ns, candidate={"profile": "next"})
    kube.apply(active)

    def published():
        p = kube.get("tgp", "prod", "-n", ns)
        c = _condition(p, "CandidateDisagrees")
        return p if c and (p.get("status") or {}).get("candidate", {}).get("version") else None

    prod = wait_for("prod published with its candidate", published, 60)
    next_version = wait_for("next published", lambda: (kube.get("tgp", "next", "-n", ns).get("status") or {})
                            .get("version"), 60)
    # Signed with prod's grants (none): the candidate's own version.
    assert prod["status"]["candidate"].pop("countedAt")
    assert prod["status"]["candidate"] == {"profile": "next", "version": next_version, "shadowed": 0,
                                           "disagreements": 0}, prod["status"]
    assert _bundle_annotations(kube, ns, "prod")["toolgate.dev/candidate-version"] == next_version
    agrees = _condition(prod, "CandidateDisagrees")
    assert (agrees["status"], agrees["reason"]) == ("False", "Agrees"), agrees
    # What is shadowed is not what is enforced: prod's version is that of
    # the same spec without a candidate.
    plain = profile("plain", ns)
    kube.apply(plain)
    plain_version = wait_for("plain published", lambda: (kube.get("tgp", "plain", "-n", ns).get("status") or {})
                             .get("version"), 60)
    assert prod["status"]["version"].split("@")[1] == plain_version.split("@")[1]

    # A pod on prod, its sidecar run as a kubelet would, beating every second.
    url, ops_url, proc = start_injected_sidecar(kube, ns, "agent-0", "prod", tmp_path,
                                                env={"TOOLGATE_HEARTBEAT_INTERVAL": "1s"})
    try:
        # Enforced: prod allows both; the candidate would deny the second.
        for command in ("git status", "git log -1", "git log -2"):
            _, answer = post_json(f"{url}/v1/authorize", {"tool": "bash", "arguments": {"command": command},
                                                          "run_id": "shadow-run"})
            assert answer["verdict"] == "allow", answer
        with urllib.request.urlopen(f"{ops_url}/metrics") as r:
            metrics = r.read().decode()
        series = [l for l in metrics.splitlines() if l.startswith("toolgate_shadow_decisions_total{")
                  and all(f in l for f in ('active="allow"', 'candidate="deny"', 'profile="prod"'))]
        assert [l.rsplit(" ", 1)[1] for l in series] == ["2"], metrics
        # The counts go out with the next heartbeat (every second here).
        time.sleep(2.5)

        def counted():
            # A status change wakes the reconcile sooner than the fleet refresh.
            kube("annotate", "tgp", "prod", "-n", ns, f"poke={free_port()}", "--overwrite")
            p = kube.get("tgp", "prod", "-n", ns)
            return p if (p["status"].get("candidate") or {}).get("shadowed") == 3 else None

        prod = wait_for("the fleet's shadow counts in the status", counted, 60)
        assert prod["status"]["candidate"].pop("countedAt")
        assert prod["status"]["candidate"] == {
            "profile": "next", "version": next_version, "shadowed": 3, "disagreements": 2,
            "transitions": [{"from": "allow", "to": "deny", "count": 2}]}, prod["status"]
        disagrees = _condition(prod, "CandidateDisagrees")
        assert (disagrees["status"], disagrees["reason"]) == ("True", "Disagrees"), disagrees
        assert "decided 2 of 3 shadowed call(s) otherwise: allow→deny 2" in disagrees["message"], disagrees
        status = kube("toolgate", "status", check=False)
        line = next(l for l in status.stdout.splitlines() if f"profile {ns}/prod" in l)
        assert line.startswith("warn") and "allow→deny 2" in line, status.stdout

        # Changing the candidate re-signs prod's bundle, prod's version unchanged.
        before = prod["status"]
        stricter["spec"]["rules"]["bash"]["deny"].append("pwd")
        kube.apply(stricter)

        def resigned():
            p = kube.get("tgp", "prod", "-n", ns)
            v = (p["status"].get("candidate") or {}).get("version")
            return p if v and v != next_version else None

        prod = wait_for("prod re-signed with the new candidate", resigned, 60)
        assert prod["status"]["version"] == before["version"]
        assert prod["status"]["sequence"] > before["sequence"]
        assert _bundle_annotations(kube, ns, "prod")["toolgate.dev/candidate-version"] == \
            prod["status"]["candidate"]["version"]

        # A deleted candidate: the bundle goes out without one, and the status says why.
        kube("delete", "tgp", "next", "-n", ns)

        def dropped():
            p = kube.get("tgp", "prod", "-n", ns)
            c = _condition(p, "CandidateDisagrees")
            return p if c and c["reason"] == "CandidateNotFound" else None

        prod = wait_for("candidate gone", dropped, 60)
        gone = _condition(prod, "CandidateDisagrees")
        assert gone["status"] == "Unknown" and f"no PolicyProfile {ns}/next" in gone["message"], gone
        assert "toolgate.dev/candidate-version" not in _bundle_annotations(kube, ns, "prod")
        assert prod["status"]["version"] == before["version"]
    finally:
        stop_sidecar(proc)


def test_a_profile_cannot_shadow_itself(kube):
    ns = kube.namespace("shadow-self")
    out = kube.apply(profile("loop", ns, candidate={"profile": "loop"}), check=False)
    assert out.returncode != 0 and "a profile cannot shadow itself" in out.stderr, out
    out = kube.apply(profile("bad-ref", ns, candidate={"profile": "Not_A_Name"}), check=False)
    assert out.returncode != 0 and "candidate.profile" in out.stderr, out
