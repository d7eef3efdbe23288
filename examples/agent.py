#!/usr/bin/env python3
"""A tiny scripted agent that asks the toolgate sidecar before each tool call.

    pip install ./clients/python
    TOOLGATE_URL=http://127.0.0.1:15031 python3 examples/agent.py [--approval-timeout SECONDS]

In an agent pod the admission webhook sets $TOOLGATE_URL. Works against
examples/profiles/safe-coding.yaml: `git status` is allowed (bash is high
risk, so it runs inside a recorded intent), `rm -rf /` is denied, `cargo
publish` waits for a human (`kubectl toolgate approve apr-ID` in
Kubernetes; for a local sidecar, `toolgate approvals approve ID --database
<the sidecar's --database> --by you`), and
the workspace API keeps notes under the run's own directory.
"""
import argparse
import shlex
import subprocess
import sys

import toolgate


def bash(command: str) -> str:
    """The tool itself: runs a command (only ever reached through guard)."""
    out = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=30)
    return (out.stdout or out.stderr).strip()[:200]


def call(client: toolgate.Client, command: str, step: str, approval_timeout: float) -> str:
    try:
        result = client.guard('bash', {'command': command}, lambda: bash(command), step_id=step,
                              approval_timeout=approval_timeout)
        return f"ran: {result!r}"
    except toolgate.Denied as e:
        return f"denied ({e.reason}, decision {e.decision_id})"
    except toolgate.ApprovalRequired as e:
        return (f"waiting for a human: approval {e.approval_id} (Kubernetes: kubectl toolgate approve "
                f"apr-{e.approval_id.lower()}; a local sidecar: toolgate approvals approve {e.approval_id} "
                f"--database <the sidecar's --database> --by <you>)")
    except FileNotFoundError as e:
        # Allowed, but the program is missing here; the intent closed as `error`.
        return f"allowed, but failed: {e}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--approval-timeout', type=float, default=0.0,
                        help='seconds to wait for a human on an escalated call (default: do not wait)')
    args = parser.parse_args()
    try:
        client = toolgate.Client()  # $TOOLGATE_URL, a fresh run id
    except ValueError as e:
        print(f"agent: {e}", file=sys.stderr)
        return 2
    print(f"run {client.run_id} against {client.url}")
    try:
        with client:
            for step, command in [('s1', 'git status'), ('s2', 'rm -rf /'), ('s3', 'cargo publish')]:
                print(f"bash {command!r}: {call(client, command, step, args.approval_timeout)}")
            written = client.write('notes/plan.md', '# plan\n- look around\n', step_id='s4')
            print(f"workspace write {written.path}: {written.bytes} bytes ({written.provenance})")
            print(f"workspace read {written.path}: {client.read(written.path).content.splitlines()[0]!r}")
            try:
                client.write('.env', 'TOKEN=x\n', step_id='s5')
            except toolgate.Denied as e:
                print(f"workspace write .env: denied ({e.reason})")
            left = client.pending_intents()
            print(f"open intents: {len(left)}")
    except toolgate.SidecarUnreachable as e:
        # Fail closed: without an answer no tool runs.
        print(f"agent: {e}; stopping", file=sys.stderr)
        return 3
    return 0


if __name__ == '__main__':
    sys.exit(main())
