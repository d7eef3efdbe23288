"""The README's first-hour walkthrough, run as it is written there (the block
between `<!-- walkthrough -->` markers is extracted from README.md, so the
two cannot drift), in a fresh shell against the release binary on PATH."""
import json
import os
import pathlib
import re
import signal
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def release_binary() -> pathlib.Path:
    target = pathlib.Path(os.environ.get('CARGO_TARGET_DIR') or ROOT / 'target')
    path = pathlib.Path(os.environ.get('TOOLGATE_RELEASE_BIN', target / 'release' / 'toolgate'))
    if not path.exists():
        message = f"{path} not found: build it with `cargo build --release -p toolgate` (.ci/run does)"
        if os.environ.get('CI') == 'true':
            pytest.fail(message)
        pytest.skip(message)
    return path


def walkthrough() -> str:
    text = (ROOT / 'README.md').read_text()
    found = re.search(r'<!-- walkthrough -->\n```sh\n(.*?)\n```\n<!-- /walkthrough -->', text, re.S)
    assert found, 'README.md has no walkthrough block'
    return found.group(1)


def test_the_readme_walkthrough_runs_as_written(tmp_path):
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    (bindir / 'toolgate').symlink_to(release_binary())
    # A newcomer's shell: nothing of toolgate's in the environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith(('TOOLGATE_', 'OTEL_', 'RUST_LOG'))}
    env['PATH'] = f"{bindir}:{env['PATH']}"
    proc = subprocess.Popen(['bash', '-e', '-c', walkthrough()], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        try:  # the sidecar it started, if the block stopped before its `kill`
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, out + err
    # The sidecar's answers are one line each (the CLI's own output is
    # pretty-printed over several).
    answers = [json.loads(line) for line in out.splitlines() if line.startswith('{"decision_id"')]
    verdicts = [(a['verdict'], a['reason']) for a in answers]
    assert verdicts == [('allow', 'allow_rule'), ('allow', 'approved')], out + err
