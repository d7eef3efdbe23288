"""examples/agent.py, run as its users run it: a process with $TOOLGATE_URL."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

AGENT = ROOT / 'examples' / 'agent.py'


def _run(url, tmp_path):
    env = dict(os.environ, TOOLGATE_URL=url,
               PYTHONPATH=os.pathsep.join([str(ROOT / 'clients' / 'python' / 'src'), os.environ.get('PYTHONPATH', '')]))
    return subprocess.run([sys.executable, str(AGENT)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


def test_example_agent(sidecar, tmp_path):
    out = _run(sidecar['url'], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].startswith("bash 'git status': ran: "), lines
    assert lines[2].startswith("bash 'rm -rf /': denied (deny_rule"), lines
    assert lines[3].startswith("bash 'cargo publish': waiting for a human: approval "), lines
    # The hint is a command that works where it is read: the plugin's object
    # name in Kubernetes, the CLI with its required --database locally.
    assert 'kubectl toolgate approve apr-' in lines[3] and '--database' in lines[3], lines
    assert lines[4] == 'workspace write notes/plan.md: 21 bytes (INTERNAL_TOOL)'
    assert lines[5] == "workspace read notes/plan.md: '# plan'"
    assert lines[6] == 'workspace write .env: denied (hardline_path)'
    assert lines[7] == 'open intents: 0'


def test_example_agent_fails_closed(closed_url, tmp_path):
    out = _run(closed_url, tmp_path)
    assert out.returncode == 3 and 'sidecar_unreachable' in out.stderr
