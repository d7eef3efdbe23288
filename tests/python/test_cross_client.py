"""The Python, TypeScript and Go clients decide the same calls the same way.

One real sidecar; the one scenario of tests/cross_client/scenario.json run
through each client (each in a run of its own); every client reports one
normalized row per step. The rows must be identical across clients AND equal
the scenario's `expected` table, so a bug all three share still fails.

Needs node with clients/typescript built (`npm ci` and `npm run build` there)
and go; without them the test is skipped, except under CI=true, where it fails.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import time

import pytest

import toolgate

from .conftest import ROOT

HERE = ROOT / 'tests' / 'cross_client'
SCENARIO = HERE / 'scenario.json'
TS_DIST = ROOT / 'clients' / 'typescript' / 'dist' / 'index.js'


def _missing(what: str) -> None:
    if os.environ.get('CI') == 'true':
        pytest.fail(what)
    pytest.skip(what)


def _row(step, verdict=None, reason=None, error_code=None, ran=False) -> dict:
    return {'step': step, 'verdict': verdict, 'reason': reason, 'error_code': error_code, 'ran': ran}


def _refusal_row(step: str, exc: toolgate.ToolgateError) -> dict:
    """A refused call: the refusing verdict when there is one, else only the code."""
    verdict = getattr(exc, 'verdict', None)
    if verdict is not None:
        return _row(step, verdict.verdict, verdict.reason, exc.code)
    return _row(step, error_code=exc.code)


def _batch_row(step: str, batch) -> dict:
    at = '' if batch.call_index is None else f"@{batch.call_index}"
    return _row(step, ','.join(v.verdict for v in batch.verdicts),
                f"{batch.reason}{at};{','.join(v.reason for v in batch.verdicts)}")


def _approve(sidecar: dict, approval_id: str) -> None:
    """Grants the approval as an operator would: the real CLI on the database."""
    out = subprocess.run([str(sidecar['bin']), 'approvals', 'approve', approval_id,
                          '--database', sidecar['database'], '--by', 'alice', '--reason', 'cross-client'],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def _python_rows(sidecar: dict, run_id: str, steps: list) -> list:
    rows, approvals = [], {}
    with toolgate.Client(sidecar['url'], run_id=run_id) as client:
        for s in steps:
            op, name = s['op'], s.get('step')
            if op == 'approve':
                _approve(sidecar, approvals[s['of']])
                continue
            if op == 'cancel':
                client.cancel_run(s['reason'])
                continue
            if op == 'batch':
                rows.append(_batch_row(name, client.authorize_batch(s['calls'])))
                continue
            ran = []
            try:
                if op == 'guard':
                    client.guard(s['tool'], s['arguments'], lambda: ran.append(1), step_id=s.get('step_id'))
                    rows.append(_row(name, 'allow', ran=bool(ran)))
                else:  # admit: the caller runs the call and closes its intent
                    adm = client.admit(s['tool'], s['arguments'], step_id=s.get('step_id'))
                    ran.append(1)
                    if adm.intent_id:
                        client.complete_intent(adm.intent_id, 'completed')
                    rows.append(_row(name, adm.verdict.verdict, adm.verdict.reason, ran=bool(ran)))
            except toolgate.ToolgateError as exc:
                assert not ran, f"{name}: the call ran although it was refused"
                if isinstance(exc, toolgate.ApprovalRequired):
                    approvals[name] = exc.approval_id
                rows.append(_refusal_row(name, exc))
    return rows


def _lines(out: subprocess.CompletedProcess, who: str) -> list:
    assert out.returncode == 0, f"{who} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def _env(sidecar: dict) -> dict:
    return dict(os.environ, TOOLGATE_URL=sidecar['url'], TOOLGATE_BIN=str(sidecar['bin']),
                TOOLGATE_DATABASE=sidecar['database'])


def _typescript_rows(sidecar: dict, run_id: str) -> list:
    node = shutil.which('node')
    if node is None:
        _missing('node (20 or later) is not installed')
    if not TS_DIST.exists():
        _missing(f"{TS_DIST} is missing: build it with `npm ci --prefix clients/typescript && "
                 "npm run build --prefix clients/typescript`")
    out = subprocess.run([node, str(HERE / 'run.mjs'), str(SCENARIO), run_id], capture_output=True, text=True,
                         timeout=120, env=_env(sidecar))
    return _lines(out, 'run.mjs')


def _go_rows(sidecar: dict, run_id: str) -> list:
    go = shutil.which('go')
    if go is None:
        _missing('go is not installed')
    # Offline: the module needs nothing but clients/go (a replace) and the stdlib.
    env = dict(_env(sidecar), GOFLAGS='-mod=mod', GOPROXY='off', GOTOOLCHAIN='local')
    out = subprocess.run([go, 'run', '.', str(SCENARIO), run_id], cwd=HERE / 'go', capture_output=True,
                         text=True, timeout=300, env=env)
    return _lines(out, 'go run')


def test_python_typescript_and_go_decide_alike(own_sidecar):
    scenario = json.loads(SCENARIO.read_text())
    expected = scenario['expected']
    stamp = time.monotonic_ns()
    runs = {who: f"xc-{who}-{stamp}" for who in ('python', 'typescript', 'go')}
    got = {
        'python': _python_rows(own_sidecar, runs['python'], scenario['steps']),
        'typescript': _typescript_rows(own_sidecar, runs['typescript']),
        'go': _go_rows(own_sidecar, runs['go']),
    }
    for who, rows in got.items():
        assert rows == expected, f"{who} differs from scenario.json's expected table"
    assert got['python'] == got['typescript'] == got['go']

    # Each client closed the intent of the one approved publish it ran, in its own run.
    with sqlite3.connect(own_sidecar['db']) as db:
        for who, run_id in runs.items():
            intents = db.execute("SELECT tool, status FROM intents WHERE run_id = ? ORDER BY created_at",
                                 (run_id,)).fetchall()
            assert intents == [('publish', 'completed')], (who, intents)
