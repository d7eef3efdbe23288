#!/usr/bin/env python3
"""Soak: one real `toolgate sidecar` process on loopback for a fixed time at a
fixed rate of mixed traffic, reporting its memory, latency over time and the
decision-log drop counter.

    python3 scripts/soak.py [--duration 600] [--rate 300] [--database URL] [--bin PATH]

Traffic (open loop, fixed schedule): 70 % low-risk allows (batched records),
10 % low-risk denies, 10 % high-risk allows with their intent (begin,
effect-sent, complete), 5 % high-risk denies, 5 % unknown tools. Every
window (30 s) prints requests, errors, p50/p99 and the sidecar's RSS; the
end prints RSS growth after warm-up (the first minute; goal < 10 %), the p99
range and `toolgate_decision_log_dropped_total` (goal 0), and, for reading
only, the growth from 300 s on (the sidecar's longest in-memory window:
allowed high-risk decisions are remembered 300 s). Exits 1 when a goal is
missed. Run it on a quiet machine: a sidecar starved of CPU (a cargo build
beside it) times out, whatever the code.
"""
import argparse
import asyncio
import os
import pathlib
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROFILE = """\
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: soak, namespace: soak}
spec:
  mode: rules
  rules:
    bash: {deny: ["rm *"], allow: ["git *", "ls*"], escalate: ["*"]}
    reader: {allow: ["src/*", "docs/*"], deny: ["*secret*"]}
  hardline: {paths: ["**/.env"], commands: ["mkfs*"]}
  effects:
    bash: {sideEffect: PROCESS_EXEC, risk: high}
    reader: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true, allowParallel: true}
"""


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


# The sidecar remembers allowed high-risk decisions this long
# (api/allowed.rs, REMEMBER_FOR), its longest in-memory window.
SETTLED_AFTER_S = 300


def rss_kib(pid):
    text = pathlib.Path(f'/proc/{pid}/status').read_text()
    return int(re.search(r'VmRSS:\s+(\d+) kB', text).group(1))


def pct(sorted_values, p):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(round((len(sorted_values) - 1) * p)))]


async def one_call(client, kind, n):
    run = f"soak-{n % 200}"
    if kind == 'low_allow':
        body = {'tool': 'reader', 'arguments': {'path': f'src/file{n % 50}.rs'}, 'run_id': run}
    elif kind == 'low_deny':
        body = {'tool': 'reader', 'arguments': {'path': 'src/secret.txt'}, 'run_id': run}
    elif kind == 'high_allow':
        body = {'tool': 'bash', 'arguments': {'command': f'git log -{n % 9}'}, 'run_id': run, 'step_id': f's{n}'}
    elif kind == 'high_deny':
        body = {'tool': 'bash', 'arguments': {'command': 'rm -rf /'}, 'run_id': run}
    else:
        body = {'tool': f'unknown{n % 7}', 'arguments': {}, 'run_id': run}
    r = await client.post('/v1/authorize', json=body)
    r.raise_for_status()
    v = r.json()
    if kind == 'high_allow' and v['verdict'] == 'allow':
        r = await client.post('/v1/intents', json={
            'decision_id': v['decision_id'], 'run_id': run, 'step_id': f's{n}', 'tool': 'bash',
            'args_digest': v['args_digest']})
        r.raise_for_status()
        intent = r.json()['intent_id']
        (await client.post(f'/v1/intents/{intent}/effect-sent', json={})).raise_for_status()
        (await client.post(f'/v1/intents/{intent}/complete', json={'outcome': 'completed'})).raise_for_status()


# Calls in flight at most; beyond it a due call is shed and counted as an
# error (the open-loop schedule stays honest without the generator spiralling).
MAX_IN_FLIGHT = 256


async def drive(url, pid, duration, rate, window):
    kinds = ['low_allow'] * 14 + ['low_deny'] * 2 + ['high_allow'] * 2 + ['high_deny', 'unknown']
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    windows = []
    async with httpx.AsyncClient(base_url=url, timeout=10, limits=limits, trust_env=False) as client:
        start = time.monotonic()
        n = 0
        pending = set()
        latencies, errors, shed = [], 0, 0
        next_report = start + window

        async def timed(kind, i, scheduled):
            nonlocal errors
            try:
                await one_call(client, kind, i)
                latencies.append(time.monotonic() - scheduled)
            except Exception:  # counted, never hidden
                errors += 1

        while True:
            now = time.monotonic()
            if now - start >= duration:
                break
            due = int((now - start) * rate)
            while n < due:
                scheduled = start + n / rate
                if len(pending) >= MAX_IN_FLIGHT:
                    # The sidecar (or this generator) is behind: shed the
                    # call and count it, rather than pile up tasks until the
                    # generator itself is what is measured.
                    shed += 1
                    n += 1
                    continue
                t = asyncio.create_task(timed(random.choice(kinds), n, scheduled))
                pending.add(t)
                t.add_done_callback(pending.discard)
                n += 1
            if now >= next_report:
                lat = sorted(latencies)
                windows.append({'t': round(now - start), 'requests': len(lat), 'errors': errors + shed,
                                'p50_ms': pct(lat, 0.5) * 1e3, 'p99_ms': pct(lat, 0.99) * 1e3,
                                'rss_kib': rss_kib(pid)})
                w = windows[-1]
                print(f"t={w['t']:>4}s requests={w['requests']:>6} errors={w['errors']} "
                      f"p50={w['p50_ms']:.2f}ms p99={w['p99_ms']:.2f}ms rss={w['rss_kib'] / 1024:.1f}MiB",
                      flush=True)
                latencies, errors, shed = [], 0, 0
                next_report += window
            await asyncio.sleep(0.002)
        if pending:
            await asyncio.wait(pending, timeout=30)
        metrics = (await client.get('/metrics')).text
    return windows, metrics


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--duration', type=int, default=600)
    ap.add_argument('--rate', type=int, default=300)
    ap.add_argument('--window', type=int, default=30)
    ap.add_argument('--database')
    ap.add_argument('--bin', default=str(ROOT / 'target' / 'release' / 'toolgate'))
    args = ap.parse_args()
    tool = pathlib.Path(args.bin)
    if not tool.exists():
        sys.exit(f"{tool} not found: cargo build --release -p toolgate")
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        (d / 'profile.yaml').write_text(PROFILE)
        subprocess.run([tool, 'keygen', '--out', d / 'keys'], check=True, capture_output=True)
        subprocess.run([tool, 'bundle', 'build', '--profile', d / 'profile.yaml', '--key', d / 'keys' / 'signing.key',
                        '--sequence', '1', '--valid-for', '2h', '--out', d / 'bundle.json'],
                       check=True, capture_output=True)
        database = args.database or f"sqlite://{d / 'soak.db'}?mode=rwc"
        port = free_port()
        log = open(d / 'sidecar.log', 'w')
        proc = subprocess.Popen([tool, 'sidecar', '--bundle', d / 'bundle.json', '--trust', d / 'keys' / 'signing.pub',
                                 '--database', database, '--listen', f'127.0.0.1:{port}', '--ops-listen', 'off',
                                 '--workspace-base', d / 'ws', '--tenant', 'soak'],
                                stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, RUST_LOG='warn'))
        url = f'http://127.0.0.1:{port}'
        try:
            for _ in range(200):
                try:
                    if httpx.get(url + '/readyz', trust_env=False).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            print(f"sidecar pid {proc.pid}, {args.rate} req/s for {args.duration}s, database "
                  f"{'sqlite' if database.startswith('sqlite') else 'postgres'}", flush=True)
            rss_start = rss_kib(proc.pid)
            windows, metrics = asyncio.run(drive(url, proc.pid, args.duration, args.rate, args.window))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    dropped = int(float(re.search(r'^toolgate_decision_log_dropped_total (\S+)$', metrics, re.M).group(1)))
    warm = windows[1]['rss_kib'] if len(windows) > 1 else rss_start
    end = windows[-1]['rss_kib'] if windows else rss_start
    growth = (end - warm) / warm * 100
    p99s = [w['p99_ms'] for w in windows]
    errors = sum(w['errors'] for w in windows)
    print(f"RSS start {rss_start / 1024:.1f} MiB, after warm-up {warm / 1024:.1f} MiB, end {end / 1024:.1f} MiB "
          f"(growth after warm-up {growth:+.1f} %)")
    settled = next((w for w in windows if w['t'] >= SETTLED_AFTER_S), None)
    if settled is not None and settled is not windows[-1]:
        print(f"RSS from {SETTLED_AFTER_S} s (the longest in-memory window): "
              f"{settled['rss_kib'] / 1024:.1f} MiB at {settled['t']} s, end {end / 1024:.1f} MiB "
              f"({(end - settled['rss_kib']) / settled['rss_kib'] * 100:+.1f} %, not a goal)")
    print(f"p99 per window {min(p99s):.2f}-{max(p99s):.2f} ms; errors {errors}; "
          f"toolgate_decision_log_dropped_total {dropped}")
    ok = growth < 10 and dropped == 0 and errors == 0
    print('PASS' if ok else 'FAIL')
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
