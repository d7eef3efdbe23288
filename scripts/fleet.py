#!/usr/bin/env python3
"""Fleet: many real sidecars on one PostgreSQL through PgBouncer.

    python3 scripts/fleet.py [--bin target/release/toolgate] [--pods 200]
                             [--tenants 4] [--load 20] [--idle 60] [--strict]

Starts, on loopback, a private PostgreSQL, a PgBouncer in
`pool_mode = transaction` in front of it (scripts/pgbouncer.sh), one
`toolgate wakeups serve` (the fleet's one LISTEN) and N `toolgate sidecar`
processes spread over T tenants, each tenant with a database role of its
own (`toolgate tenant provision`) that its sidecars use through the pooler.
Then:

1. load: concurrent agents make a mix of calls for `--load` seconds: low
   risk (reads), high risk (a command and its intent), escalations (a new
   approval each), and flow-labelled calls (a fetch, then a secret read
   that the flow rule refuses);
2. idle: nothing for `--idle` seconds, counting the database's transactions;
3. stop: every tenant's namespace is stopped at once (`toolgate runs cancel
   --all`) while each sidecar is asked, every 20 ms, for a read in a fresh
   run, until it refuses: the time each took is its stop propagation;
4. the sidecars get SIGTERM (they flush their decision batches), and every
   decision id a sidecar answered with must be in the database, whose
   chains `toolgate audit verify` must pass.

Prints one line per figure (`fleet <name>: <value>`) and a JSON summary.
Exits 1 when a check fails: a sidecar that never started or never saw the
stop, a decision missing, a broken chain. With `--strict` the issue's goals
are checks too: at most 50 server connections (the goal at 200 pods),
at most one query per 10 s per idle sidecar, stops within 2 s at p99.
Runs as root by starting PostgreSQL and PgBouncer as the `postgres` user.
"""
import argparse
import asyncio
import glob
import json
import os
import pathlib
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[1]


def profile(namespace):
    return f"""\
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {{name: fleet, namespace: {namespace}}}
spec:
  mode: rules
  rules:
    bash: {{deny: ["rm *"], allow: ["git *"], escalate: ["make *"]}}
    reader: {{allow: ["*"]}}
    fetch: {{allow: ["*"]}}
  egress:
    allowHosts: ["*.example.com"]
  effects:
    bash: {{sideEffect: PROCESS_EXEC, risk: high, matchArgs: [command]}}
    reader: {{sideEffect: WORKSPACE_READ, risk: low, readOnly: true, matchArgs: [path]}}
    fetch: {{sideEffect: NETWORK_READ, risk: low, readOnly: true, matchArgs: [url]}}
  flows:
    scope: run
    labels:
      untrusted: {{sideEffects: [NETWORK_READ]}}
      private: {{tools: [reader], match: ["*secret*"]}}
    rules:
      - name: no-exfiltration
        when: [untrusted, private]
        deny: {{sideEffects: [NETWORK_READ]}}
"""


def pg_bin(name):
    found = sorted(glob.glob(f'/usr/lib/postgresql/*/bin/{name}'))
    if not found:
        sys.exit(f'{name} not found under /usr/lib/postgresql/*/bin')
    return found[-1]


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def as_postgres(*args):
    prefix = ['runuser', '-u', 'postgres', '--'] if os.geteuid() == 0 else []
    return subprocess.run(prefix + [str(a) for a in args], check=True, capture_output=True, text=True)


def psql(port, sql, db='postgres'):
    out = subprocess.run(['psql', '-h', '127.0.0.1', '-p', str(port), '-U', 'postgres', '-d', db, '-AtXqc', sql],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def rss_mib(pid):
    try:
        for line in pathlib.Path(f'/proc/{pid}/status').read_text().splitlines():
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class Sidecars:
    """A small keep-alive HTTP/1.1 client for the agent API: the fleet's own
    load generator and stop watchers must not be what is measured (httpx
    spends milliseconds of CPU per request; 200 watchers polling through it
    saw each sidecar only every few hundred milliseconds)."""

    def __init__(self):
        self.idle = {}

    async def post(self, url, path, body):
        port = int(url.rsplit(':', 1)[1])
        conns = self.idle.setdefault(port, [])
        if conns:
            reader, writer = conns.pop()
        else:
            reader, writer = await asyncio.open_connection('127.0.0.1', port)
        try:
            data = json.dumps(body).encode()
            writer.write(b'POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
                         b'Content-Length: %d\r\n\r\n%s' % (path.encode(), len(data), data))
            head = await reader.readuntil(b'\r\n\r\n')
            status = int(head.split(b' ', 2)[1])
            length = 0
            for header in head.split(b'\r\n')[1:]:
                name, _, value = header.partition(b':')
                if name.strip().lower() == b'content-length':
                    length = int(value)
            payload = await reader.readexactly(length)
        except BaseException:
            writer.close()
            raise
        conns.append((reader, writer))
        return status, json.loads(payload) if payload else None

    def close(self):
        for conns in self.idle.values():
            for _, writer in conns:
                writer.close()


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]


def line(name, value):
    print(f'fleet {name}: {value}', flush=True)


class Fleet:
    def __init__(self, args, d):
        self.args, self.d, self.tool = args, d, args.bin
        self.procs = []

    def run_tool(self, *argv):
        out = subprocess.run([self.tool, *map(str, argv)], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f'toolgate {argv[0]} {argv[1] if len(argv) > 1 else ""} failed:\n{out.stdout}{out.stderr}')
        return out.stdout

    def start_database(self):
        d = self.d
        os.chmod(d, 0o777)
        self.pg_port = free_port()
        as_postgres(pg_bin('initdb'), '-D', d / 'pg', '-U', 'postgres', '--auth=trust')
        with open(d / 'pg' / 'postgresql.conf', 'a') as conf:
            conf.write(f"port = {self.pg_port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{d}'\n"
                       "max_connections = 300\nfsync = off\nlog_line_prefix = '%m [%p] %d %u '\n"
                       # Counts every query the sidecars make (not BEGIN,
                       # COMMIT or the pooler's SET: utility statements).
                       "shared_preload_libraries = 'pg_stat_statements'\n"
                       "pg_stat_statements.track_utility = off\n"
                       + ("log_statement = 'all'\n" if self.args.log_statements else ''))
        as_postgres(pg_bin('pg_ctl'), '-D', d / 'pg', '-l', d / 'pg.log', '-w', 'start')
        psql(self.pg_port, 'CREATE DATABASE fleet')
        psql(self.pg_port, 'CREATE EXTENSION pg_stat_statements', 'fleet')
        self.direct = f'postgres://postgres@127.0.0.1:{self.pg_port}/fleet'
        # At most 40 server connections for every sidecar of every tenant;
        # the relay and the CLI connect directly.
        out = subprocess.run(['bash', ROOT / 'scripts' / 'pgbouncer.sh', str(self.pg_port), d / 'bouncer'],
                             check=True, capture_output=True, text=True,
                             env=dict(os.environ, PGBOUNCER_MAX_DB_CONNECTIONS='40'))
        self.bouncer_port = int(out.stdout.strip().splitlines()[-1])

    def stop_database(self):
        try:
            os.kill(int((self.d / 'bouncer' / 'pgbouncer.pid').read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        subprocess.run((['runuser', '-u', 'postgres', '--'] if os.geteuid() == 0 else [])
                       + [pg_bin('pg_ctl'), '-D', str(self.d / 'pg'), '-m', 'immediate', 'stop'],
                       capture_output=True)

    def spawn(self, name, argv):
        log = open(self.d / f'{name}.log', 'w')
        p = subprocess.Popen([self.tool, *map(str, argv)], stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, RUST_LOG=os.environ.get('RUST_LOG', 'warn')))
        self.procs.append(p)
        return p

    def prepare(self):
        a, d = self.args, self.d
        self.run_tool('migrate', '--database', self.direct)
        self.run_tool('keygen', '--out', d / 'keys')
        self.tenants = []
        for t in range(a.tenants):
            tenant = f'fleet-{t}'
            creds = json.loads(self.run_tool('tenant', 'provision', '--database', self.direct, '--tenant', tenant))
            url = urllib.parse.urlsplit(creds['database_url'])
            pooled = url._replace(netloc=f'{url.username}:{url.password}@127.0.0.1:{self.bouncer_port}').geturl()
            (d / f'{tenant}.yaml').write_text(profile(tenant))
            self.run_tool('bundle', 'build', '--profile', d / f'{tenant}.yaml', '--key', d / 'keys' / 'signing.key',
                          '--sequence', '1', '--valid-for', '2h', '--out', d / f'{tenant}.bundle.json')
            self.tenants.append((tenant, pooled))
        self.relay_port = free_port()
        self.spawn('relay', ['wakeups', 'serve', '--database', self.direct, '--listen',
                             f'127.0.0.1:{self.relay_port}'])
        self.sidecars = []
        for i in range(a.pods):
            tenant, pooled = self.tenants[i % a.tenants]
            port = free_port()
            p = self.spawn(f'sidecar-{i}', [
                'sidecar', '--bundle', d / f'{tenant}.bundle.json', '--trust', d / 'keys' / 'signing.pub',
                '--database', pooled, '--database-pooler', 'transaction',
                '--wakeups-url', f'http://127.0.0.1:{self.relay_port}',
                '--tenant', tenant, '--pod-name', f'agent-{i}', '--pod-namespace', tenant,
                '--listen', f'127.0.0.1:{port}', '--ops-listen', 'off', '--workspace-base', d / 'ws' / str(i)])
            self.sidecars.append({'i': i, 'tenant': tenant, 'url': f'http://127.0.0.1:{port}', 'proc': p})

    async def wait_ready(self, client):
        deadline = time.monotonic() + 60 + self.args.pods * 0.2
        pending = list(self.sidecars)
        while pending and time.monotonic() < deadline:
            still = []
            for s in pending:
                if s['proc'].poll() is not None:
                    raise SystemExit(f"sidecar {s['i']} exited:\n" + (self.d / f"sidecar-{s['i']}.log").read_text())
                try:
                    if (await client.get(s['url'] + '/readyz')).status_code != 200:
                        still.append(s)
                except httpx.TransportError:
                    still.append(s)
            pending = still
            if pending:
                await asyncio.sleep(0.2)
        if pending:
            raise SystemExit(f'{len(pending)} sidecars never became ready')

    def connections(self):
        return int(psql(self.pg_port, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'fleet' "
                                      "AND backend_type = 'client backend'"))

    def transactions(self):
        """Transactions the server counted in the fleet's database (autovacuum's too)."""
        return int(psql(self.pg_port, "SELECT xact_commit + xact_rollback FROM pg_stat_database "
                                      "WHERE datname = 'fleet'"))

    def sidecar_queries(self):
        """Queries the tenant roles (the sidecars) made, as pg_stat_statements counts them:
        every plannable statement, not BEGIN, COMMIT or the pooler's SET."""
        return int(psql(self.pg_port, "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
                                      "JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname LIKE 'tg_t_%'",
                        'fleet'))

    def decisions(self):
        return int(psql(self.pg_port, 'SELECT count(*) FROM decisions', 'fleet'))


async def load(fleet, http, seconds, agents):
    """Mixed calls from `agents` concurrent agents; returns what was answered."""
    answered, errors, kinds = [], [], {}
    stop = time.monotonic() + seconds
    rng = random.Random(7)

    async def call(s, tool, arguments, run):
        _, v = await http.post(s['url'], '/v1/authorize',
                               {'tool': tool, 'arguments': arguments, 'run_id': run,
                                'step_id': f's{rng.randrange(1 << 30)}'})
        if 'decision_id' in v:
            answered.append(v['decision_id'])
        return v

    async def agent(a):
        n = 0
        while time.monotonic() < stop:
            n += 1
            s = fleet.sidecars[rng.randrange(len(fleet.sidecars))]
            run = f'run-{a}-{n}'
            roll = rng.random()
            try:
                if roll < 0.70:
                    kind = 'low'
                    await call(s, 'reader', {'path': f'src/{n}.py'}, run)
                elif roll < 0.85:
                    kind = 'high'
                    v = await call(s, 'bash', {'command': f'git log -{n}'}, run)
                    if v.get('verdict') == 'allow':
                        status, body = await http.post(s['url'], '/v1/intents', {
                            'decision_id': v['decision_id'], 'run_id': run, 'step_id': 's1', 'tool': 'bash',
                            'args_digest': v['args_digest']})
                        if status != 201:
                            errors.append(f'intent {status}: {body}')
                elif roll < 0.95:
                    kind = 'escalation'
                    v = await call(s, 'bash', {'command': f'make build-{n}'}, run)
                    if v.get('verdict') != 'escalate':
                        errors.append(f'escalation answered {v}')
                else:
                    kind = 'flow'
                    await call(s, 'fetch', {'url': f'https://docs.example.com/{n}'}, run)
                    await call(s, 'reader', {'path': 'conf/secret.txt'}, run)
                    v = await call(s, 'fetch', {'url': f'https://paste.example.com/{n}'}, run)
                    if v.get('verdict') != 'deny':
                        errors.append(f'flow rule did not refuse: {v}')
                kinds[kind] = kinds.get(kind, 0) + 1
            except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                errors.append(repr(e))

    await asyncio.gather(*(agent(a) for a in range(agents)))
    return answered, errors, kinds


async def stop_propagation(fleet, http):
    """Stops every tenant's namespace at once. For each sidecar: seconds from
    the moment its tenant's stop was committed (the CLI returned) until it
    refused a read in a fresh run; a sidecar refusing before the CLI has
    returned counts as 0."""
    refused_at, committed_at = {}, {}

    async def watch(s):
        n = 0
        while time.monotonic() - t0 < 30:
            n += 1
            try:
                _, v = await http.post(s['url'], '/v1/authorize', {
                    'tool': 'reader', 'arguments': {'path': 'a'}, 'run_id': f"after-stop-{s['i']}-{n}",
                    'step_id': 's1'})
                if v.get('verdict') == 'deny':
                    refused_at[s['i']] = time.monotonic()
                    return
            except (OSError, asyncio.IncompleteReadError, ValueError):
                pass
            await asyncio.sleep(0.01)

    async def cancel(tenant):
        proc = await asyncio.create_subprocess_exec(
            fleet.tool, 'runs', 'cancel', '--database', fleet.direct, '--tenant', tenant, '--all',
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        committed_at[tenant] = time.monotonic()
        if proc.returncode != 0:
            raise SystemExit(f'runs cancel failed: {out.decode()}{err.decode()}')

    t0 = time.monotonic()
    watchers = [asyncio.create_task(watch(s)) for s in fleet.sidecars]
    await asyncio.gather(*(cancel(t) for t, _ in fleet.tenants))
    await asyncio.gather(*watchers)
    return {i: max(0.0, at - committed_at[fleet.sidecars[i]['tenant']]) for i, at in refused_at.items()}


async def run(args, d):
    fleet = Fleet(args, d)
    fleet.start_database()
    report, failures = {}, []
    try:
        fleet.prepare()
        limits = httpx.Limits(max_connections=args.pods + 64, max_keepalive_connections=args.pods + 64)
        async with httpx.AsyncClient(timeout=30, trust_env=False, limits=limits) as client:
            started = time.monotonic()
            await fleet.wait_ready(client)
            line('pods', f'{args.pods} sidecars over {args.tenants} tenants ready in '
                         f'{time.monotonic() - started:.1f} s')
            peak = [fleet.connections()]
            sampling = True

            async def sample():
                while sampling:
                    peak.append(await asyncio.to_thread(fleet.connections))
                    await asyncio.sleep(0.5)

            sampler = asyncio.create_task(sample())
            rows_before = fleet.decisions()
            t = time.monotonic()
            http = Sidecars()
            answered, errors, kinds = await load(fleet, http, args.load, args.agents)
            elapsed = time.monotonic() - t
            loaded_rss = [rss_mib(s['proc'].pid) for s in fleet.sidecars]
            sampling = False
            await sampler
            rows_after = fleet.decisions()
            report['calls'] = kinds
            report['calls_per_s'] = round(sum(kinds.values()) / elapsed, 1)
            report['load_errors'] = len(errors)
            report['server_connections_peak'] = max(peak)
            report['decisions_appended_per_s'] = round((rows_after - rows_before) / elapsed, 1)
            report['rss_under_load_mib'] = {'median': round(statistics.median(loaded_rss), 1),
                                            'max': round(max(loaded_rss), 1)}
            line('calls', f"{report['calls_per_s']}/s for {elapsed:.0f} s {kinds}, {len(errors)} errors")
            line('server connections (peak, sampled every 0.5 s)', f"{max(peak)}")
            line('decisions appended (during the load, before the final flush)',
                 f"{report['decisions_appended_per_s']}/s")
            line('sidecar RSS under load', f"median {report['rss_under_load_mib']['median']} MiB, "
                                           f"max {report['rss_under_load_mib']['max']} MiB")
            if errors:
                failures.append(f'{len(errors)} load errors, e.g. {errors[:3]}')

            # Idle: let the pools and batches settle, then count.
            await asyncio.sleep(5)
            x0, p0, t0 = fleet.transactions(), fleet.sidecar_queries(), time.monotonic()
            await asyncio.sleep(args.idle)
            x1, p1, t1 = fleet.transactions(), fleet.sidecar_queries(), time.monotonic()
            idle_rss = [rss_mib(s['proc'].pid) for s in fleet.sidecars]
            per_sidecar = (p1 - p0) / (t1 - t0) / args.pods
            report['idle_queries_per_s'] = round((p1 - p0) / (t1 - t0), 2)
            report['idle_queries_per_sidecar_per_10s'] = round(per_sidecar * 10, 3)
            report['idle_server_transactions_per_s'] = round((x1 - x0) / (t1 - t0), 2)
            report['server_connections_idle'] = fleet.connections()
            report['rss_idle_mib'] = {'median': round(statistics.median(idle_rss), 1),
                                      'max': round(max(idle_rss), 1)}
            line('idle queries of the sidecars (pg_stat_statements)',
                 f"{report['idle_queries_per_s']}/s for the fleet, "
                 f"{report['idle_queries_per_sidecar_per_10s']} per sidecar per 10 s (over {t1 - t0:.0f} s); "
                 f"the server counted {report['idle_server_transactions_per_s']} transactions/s in all "
                 f"(with autovacuum and the pooler's SET on each new server connection)")
            line('server connections (idle)', report['server_connections_idle'])
            line('sidecar RSS idle', f"median {report['rss_idle_mib']['median']} MiB, "
                                     f"max {report['rss_idle_mib']['max']} MiB")

            seen = await stop_propagation(fleet, http)
            http.close()
            times = list(seen.values())
            report['stop_reached'] = f'{len(seen)}/{args.pods}'
            if times:
                report['stop_propagation_s'] = {'p50': round(pct(times, 50), 3), 'p99': round(pct(times, 99), 3),
                                                'max': round(max(times), 3)}
                line('stop propagation (from the commit)', f"p50 {report['stop_propagation_s']['p50']} s, "
                                         f"p99 {report['stop_propagation_s']['p99']} s, "
                                         f"max {report['stop_propagation_s']['max']} s "
                                         f"({len(seen)}/{args.pods} sidecars)")
            if len(seen) != args.pods:
                failures.append(f'the stop reached {len(seen)} of {args.pods} sidecars within 30 s')

        for p in fleet.procs:
            p.send_signal(signal.SIGTERM)
        for p in fleet.procs:
            try:
                await asyncio.to_thread(p.wait, 60)
            except subprocess.TimeoutExpired:
                failures.append(f'pid {p.pid} ignored SIGTERM for 60 s')
                p.kill()
        ids = set(answered)
        psql(fleet.pg_port, 'CREATE TABLE answered (decision_id text PRIMARY KEY)', 'fleet')
        (d / 'answered.csv').write_text('\n'.join(sorted(ids)) + '\n')
        os.chmod(d / 'answered.csv', 0o644)
        subprocess.run(['psql', '-h', '127.0.0.1', '-p', str(fleet.pg_port), '-U', 'postgres', '-d', 'fleet',
                        '-qc', f"\\copy answered FROM '{d / 'answered.csv'}'"], check=True, capture_output=True)
        missing = int(psql(fleet.pg_port, 'SELECT count(*) FROM answered a WHERE NOT EXISTS '
                                          '(SELECT 1 FROM decisions d WHERE d.decision_id = a.decision_id)', 'fleet'))
        verify = subprocess.run([fleet.tool, 'audit', 'verify', '--database', fleet.direct],
                                capture_output=True, text=True)
        chains = json.loads(verify.stdout) if verify.stdout.strip().startswith('{') else {}
        size, rows = psql(fleet.pg_port, "SELECT pg_total_relation_size('decisions'), count(*) FROM decisions",
                          'fleet').split('|')
        report['decision_bytes_per_row'] = round(int(size) / max(1, int(rows)))
        line('decision table size', f"{int(size) / 1048576:.1f} MiB with its indexes for {rows} rows, "
                                    f"{report['decision_bytes_per_row']} bytes a row")
        report['decisions_answered'] = len(ids)
        report['decisions_missing'] = missing
        report['audit_verify_ok'] = verify.returncode == 0
        line('decisions answered and in a verified chain',
             f"{len(ids) - missing}/{len(ids)}; audit verify {'ok' if verify.returncode == 0 else 'FAILED'} "
             f"({chains.get('streams', '?')} streams, {chains.get('records', '?')} rows)")
        if missing:
            failures.append(f'{missing} answered decisions are not in the database')
        if verify.returncode != 0:
            failures.append('audit verify failed: ' + verify.stdout[-2000:] + verify.stderr[-2000:])
        if args.strict:
            budget = 50
            if report['server_connections_peak'] > budget:
                failures.append(f"{report['server_connections_peak']} server connections (goal {budget})")
            if report['idle_queries_per_sidecar_per_10s'] > 1:
                failures.append('an idle sidecar made more than one query per 10 s')
            if times and report['stop_propagation_s']['p99'] > 2:
                failures.append('stop propagation p99 over 2 s')
    finally:
        for p in fleet.procs:
            if p.poll() is None:
                p.kill()
        fleet.stop_database()
        if args.keep_logs:
            import shutil
            shutil.copytree(d, args.keep_logs, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns('pg', 'ws', 'keys', '*.csv'))
    print(json.dumps(report, indent=2))
    for f in failures:
        print('FAIL:', f)
    print('PASS' if not failures else 'FAIL')
    return not failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bin', default=str(ROOT / 'target' / 'release' / 'toolgate'))
    ap.add_argument('--pods', type=int, default=200)
    ap.add_argument('--tenants', type=int, default=4)
    ap.add_argument('--agents', type=int, default=64, help='concurrent agents during the load')
    ap.add_argument('--load', type=float, default=20.0, help='seconds of mixed load')
    ap.add_argument('--idle', type=float, default=60.0, help='seconds of idleness counted')
    ap.add_argument('--log-statements', action='store_true', help="PostgreSQL logs every statement")
    ap.add_argument('--keep-logs', metavar='DIR', help='copy the logs (server, pooler, processes) here')
    ap.add_argument('--strict', action='store_true', help="also fail when a goal of the issue is missed")
    args = ap.parse_args()
    if args.tenants < 1 or args.pods < args.tenants:
        sys.exit('--pods must be at least --tenants, which must be at least 1')
    with tempfile.TemporaryDirectory(prefix='toolgate-fleet-') as d:
        ok = asyncio.run(run(args, pathlib.Path(d)))
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
