"""The validating webhook's cheap analysis of a PolicyProfile on a real
kube-apiserver: an `escalate` glob the `allow` tier shadows is refused
(`shadowed_escalate`), judged as the evaluator matches (lowercase copy
included); other findings, and a check skipped past its caps, are admitted
with warnings kubectl prints; the controller still publishes the bundles
of what was admitted."""
import time

from k8s_env import profile, ready, wait_for

DENIED = 'admission webhook "policyprofiles.validate.toolgate.dev" denied the request'


def _bash(name, ns, **tiers):
    obj = profile(name, ns)
    obj["spec"]["rules"]["bash"] = tiers
    return obj


def test_a_shadowed_escalate_is_refused(kube):
    ns = kube.namespace("shadowed-profiles")
    # `git push*` is allowed by `git *` before the escalate tier runs.
    out = kube.create(_bash("shadowed", ns, allow=["ls", "git *"], escalate=["git push*", "*"]), check=False)
    assert out.returncode != 0
    assert DENIED in out.stderr, out.stderr
    assert "spec.rules.bash.escalate[0]: escalate glob `git push*` of tool `bash` never asks a human" in out.stderr
    assert "`git *` (spec.rules.bash.allow[1])" in out.stderr and "[shadowed_escalate]" in out.stderr, out.stderr
    assert kube.get("tgp", "shadowed", "-n", ns) is None

    # `GIT *` calls are allowed through their lowercase copy.
    out = kube.create(_bash("upper", ns, allow=["git *"], escalate=["GIT *"]), check=False)
    assert out.returncode != 0 and "[shadowed_escalate]" in out.stderr, out.stderr
    assert kube.get("tgp", "upper", "-n", ns) is None

    # Not shadowed: a deny catches every `GIT PUSH…` by its lowercase copy
    # first (nothing is allowed unasked), and `*` escalating beside tools
    # allowed wholesale still asks for the rest of bash.
    hidden = _bash("hidden", ns, deny=["git push*"], allow=["GIT *", "ls"], escalate=["GIT PUSH*", "*"])
    kube.create(hidden)
    assert kube.get("tgp", "hidden", "-n", ns)


def test_other_findings_are_warnings_and_the_profile_is_served(kube):
    ns = kube.namespace("warned-profiles")
    dup = profile("duplicate", ns)
    dup["spec"]["rules"]["bash"]["allow"] += ["pwd"]
    out = kube.create(dup)
    assert "Warning: spec.rules.bash.allow[7]: `pwd` is the same glob as spec.rules.bash.allow[5]" in out.stderr
    assert "[duplicate_glob]" in out.stderr, out.stderr
    # A deny under a hardline entry (the example's `mkfs *`) warns too.
    assert "spec.rules.bash.deny[4]" in out.stderr and "[shadowed_by_hardline]" in out.stderr, out.stderr
    # Warnings never keep the controller from serving it, and its status
    # carries them, worded as admission did, for whoever reads it later.
    wait_for("profile Ready", lambda: ready((kube.get("tgp", "duplicate", "-n", ns) or {}).get("status")))
    warnings = kube.get("tgp", "duplicate", "-n", ns)["status"]["warnings"]
    admitted = [line.removeprefix("Warning: ") for line in out.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings == admitted and any("[duplicate_glob]" in w for w in warnings), (warnings, out.stderr)
    # A fixed spec clears them at its next generation.
    dup["spec"]["rules"]["bash"]["allow"].pop()
    kube.apply(dup, "--force-conflicts")
    wait_for("warning gone", lambda: not any(
        "[duplicate_glob]" in w for w in kube.get("tgp", "duplicate", "-n", ns)["status"].get("warnings", [])))

    # ~27 KB of distinct CJK characters: past the caps, skipped at once and
    # admitted with a warning (shadowed or not: the check is advisory).
    cjk = "".join(chr(0x4E00 + i) for i in range(9000))
    started = time.monotonic()
    out = kube.create(_bash("huge", ns, allow=["*"], escalate=[cjk]))
    assert time.monotonic() - started < 5
    assert "spec.rules.bash: the shadowed-escalate check was skipped" in out.stderr, out.stderr
    assert "[analysis_skipped]" in out.stderr, out.stderr
    assert kube.get("tgp", "huge", "-n", ns)

    # Whatever a glob holds, a warning reaches the terminal as one line of
    # printable ASCII.
    hostile = profile("hostile", ns)
    hostile["spec"]["rules"]["bash"]["allow"] += ["x\n\u202e\u001b[31m"] * 2
    out = kube.create(hostile)
    lines = [line for line in out.stderr.splitlines() if "[duplicate_glob]" in line]
    assert len(lines) == 1, out.stderr
    assert "`x\\u{a}\\u{202e}\\u{1b}[31m` is the same glob" in lines[0], lines
    assert all(c == " " or 33 <= ord(c) < 127 for c in lines[0]), lines
