#!/usr/bin/env python3
"""Failover: toolgate keeps its promises when the PostgreSQL primary dies.

    python3 scripts/failover.py [--bin target/debug/toolgate] [--workers 8]

Builds, from the PostgreSQL binaries on this machine, a primary and a
synchronous streaming standby on loopback (`synchronous_commit = on`,
`synchronous_standby_names = standby1`), and a TCP forwarder that stands for
the `-rw` Service a CloudNativePG or Patroni cluster gives clients. A real
`toolgate sidecar` connects through the forwarder. Workers make high-risk
calls (authorize, then record the intent) without pause; then the primary is
killed with SIGKILL, the standby promoted, and the forwarder repointed.

It checks that every high-risk decision and intent the sidecar acknowledged
is on the new primary, that `toolgate audit verify` passes there, that calls
during the outage failed closed (`audit_unavailable`, or an intent refused
with a typed error) and that calls succeed again without restarting the
sidecar, and reports the outage the agent saw. Exits 1 when a check fails.
Runs as root by starting PostgreSQL as the `postgres` user.
"""
import argparse
import asyncio
import glob
import json
import os
import pathlib
import signal
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
metadata: {name: failover, namespace: agents}
spec:
  mode: rules
  rules:
    bash: {allow: ["git *"]}
  effects:
    bash: {sideEffect: PROCESS_EXEC, risk: high}
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


def as_postgres(*args, **kw):
    prefix = ['runuser', '-u', 'postgres', '--'] if os.geteuid() == 0 else []
    return subprocess.run(prefix + [str(a) for a in args], check=True, capture_output=True, text=True, **kw)


def psql(port, sql, db='postgres'):
    out = subprocess.run(['psql', '-h', '127.0.0.1', '-p', str(port), '-U', 'postgres', '-d', db, '-AtXqc', sql],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


class Forwarder:
    """Loopback TCP forwarder whose target can be switched (the `-rw` Service)."""

    def __init__(self, target):
        self.target = target
        self.conns = set()

    async def start(self):
        self.server = await asyncio.start_server(self._handle, '127.0.0.1', 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _pipe(self, reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _handle(self, client_r, client_w):
        try:
            up_r, up_w = await asyncio.open_connection('127.0.0.1', self.target)
        except OSError:
            client_w.close()
            return
        pair = (client_w, up_w)
        self.conns.add(pair)
        try:
            await asyncio.gather(self._pipe(client_r, up_w), self._pipe(up_r, client_w))
        except asyncio.CancelledError:
            pass  # the script is ending
        finally:
            self.conns.discard(pair)

    def repoint(self, target):
        self.target = target
        for a, b in list(self.conns):  # connections to the dead primary end now
            a.close()
            b.close()


async def run(args, d):
    initdb, pg_ctl, basebackup = pg_bin('initdb'), pg_bin('pg_ctl'), pg_bin('pg_basebackup')
    os.chmod(d, 0o777)
    primary, standby = d / 'primary', d / 'standby'
    p_port, s_port = free_port(), free_port()
    as_postgres(initdb, '-D', primary, '-U', 'postgres', '--auth=trust')
    with open(primary / 'postgresql.conf', 'a') as conf:
        conf.write(f"port = {p_port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{d}'\n"
                   "wal_level = replica\nmax_wal_senders = 5\nsynchronous_commit = on\n"
                   "synchronous_standby_names = 'standby1'\nfsync = on\n")
    with open(primary / 'pg_hba.conf', 'a') as hba:
        hba.write("host replication postgres 127.0.0.1/32 trust\n")
    as_postgres(pg_ctl, '-D', primary, '-l', d / 'primary.log', '-w', 'start')
    as_postgres(basebackup, '-h', '127.0.0.1', '-p', p_port, '-U', 'postgres', '-D', standby, '-X', 'stream', '-R')
    with open(standby / 'postgresql.conf', 'a') as conf:
        conf.write(f"port = {s_port}\n")
    with open(standby / 'postgresql.auto.conf', 'a') as conf:
        conf.write(f"primary_conninfo = 'host=127.0.0.1 port={p_port} user=postgres application_name=standby1'\n")
    as_postgres(pg_ctl, '-D', standby, '-l', d / 'standby.log', '-w', 'start')
    for _ in range(100):
        if psql(p_port, "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'") == 'sync':
            break
        time.sleep(0.1)
    else:
        raise SystemExit('the standby never became synchronous')
    psql(p_port, 'CREATE DATABASE toolgate')
    print(f"primary :{p_port} -> synchronous standby :{s_port}", flush=True)

    fwd = Forwarder(p_port)
    await fwd.start()
    tool = args.bin
    (d / 'profile.yaml').write_text(PROFILE)
    subprocess.run([tool, 'keygen', '--out', d / 'keys'], check=True, capture_output=True)
    subprocess.run([tool, 'bundle', 'build', '--profile', d / 'profile.yaml', '--key', d / 'keys' / 'signing.key',
                    '--sequence', '1', '--valid-for', '1h', '--out', d / 'bundle.json'], check=True, capture_output=True)
    port = free_port()
    database = f"postgres://postgres@127.0.0.1:{fwd.port}/toolgate"
    log = open(d / 'sidecar.log', 'w')
    sidecar = subprocess.Popen([tool, 'sidecar', '--bundle', d / 'bundle.json', '--trust', d / 'keys' / 'signing.pub',
                                '--database', database, '--listen', f'127.0.0.1:{port}', '--ops-listen', 'off',
                                '--workspace-base', d / 'ws', '--tenant', 'agents'],
                               stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, RUST_LOG=os.environ.get('RUST_LOG', 'warn')))
    url = f'http://127.0.0.1:{port}'
    acked, refused, errors, events = [], {}, [], []
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=15, trust_env=False) as client:
        for _ in range(300):
            try:
                if (await client.get('/readyz')).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
        else:
            raise SystemExit('sidecar never became ready:\n' + (d / 'sidecar.log').read_text())

        async def worker(w):
            n = 0
            while not stop.is_set():
                n += 1
                run, step = f'run-{w}', f's{n}'
                t = time.monotonic()
                try:
                    r = await client.post('/v1/authorize', json={'tool': 'bash', 'arguments': {'command': f'git log -{n}'},
                                                                 'run_id': run, 'step_id': step})
                    v = r.json()
                    if v.get('verdict') != 'allow':
                        refused[v.get('reason')] = refused.get(v.get('reason'), 0) + 1
                        events.append((t, False))
                        continue
                    r = await client.post('/v1/intents', json={'decision_id': v['decision_id'], 'run_id': run,
                                                               'step_id': step, 'tool': 'bash',
                                                               'args_digest': v['args_digest']})
                    if r.status_code != 201:
                        code = r.json()['error']['code']
                        refused['intent:' + code] = refused.get('intent:' + code, 0) + 1
                        events.append((t, False))
                        continue
                    acked.append((v['decision_id'], r.json()['intent_id']))
                    events.append((t, True))
                except (httpx.HTTPError, ValueError, KeyError) as e:
                    errors.append(repr(e))
                    events.append((t, False))

        workers = [asyncio.create_task(worker(w)) for w in range(args.workers)]
        await asyncio.sleep(args.before)
        before = len(acked)
        pid = int((primary / 'postmaster.pid').read_text().split()[0])
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        print(f"{before} high-risk calls acknowledged; primary (pid {pid}) killed with SIGKILL", flush=True)
        await asyncio.sleep(args.detect)
        as_postgres(pg_ctl, '-D', standby, '-w', 'promote')
        # The promoted node inherited `synchronous_standby_names` and has no
        # standby of its own yet: like Patroni and CloudNativePG when no sync
        # candidate is left, run it without one until a new standby joins
        # (else every commit would wait forever).
        psql(s_port, "ALTER SYSTEM SET synchronous_standby_names = ''")
        psql(s_port, 'SELECT pg_reload_conf()')
        fwd.repoint(s_port)
        promoted_at = time.monotonic()
        print(f"standby promoted and the forwarder repointed after {promoted_at - killed_at:.2f}s", flush=True)
        await asyncio.sleep(args.after)
        stop.set()
        await asyncio.gather(*workers)
        sidecar_alive = sidecar.poll() is None
        after_kill = [(t, ok) for t, ok in events if t >= killed_at]
        first_ok = next((t for t, ok in sorted(after_kill) if ok and t >= promoted_at), None)

    # The sidecar flushes its decision batch through the forwarder on the
    # way out: keep the event loop (and so the forwarder) running meanwhile.
    sidecar.terminate()
    try:
        await asyncio.to_thread(sidecar.wait, 30)
        clean_exit = True
    except subprocess.TimeoutExpired:
        clean_exit = False
        sidecar.kill()
        sidecar.wait()
    log.close()
    if not clean_exit:
        print('the sidecar did not stop within 30 s of SIGTERM; its log ends:\n'
              + '\n'.join((d / 'sidecar.log').read_text().splitlines()[-15:]))
    # Every acknowledged decision and intent is on the new primary.
    ids = ','.join(f"'{dec}'" for dec, _ in acked) or "''"
    intents = ','.join(f"'{i}'" for _, i in acked) or "''"
    found_decisions = int(psql(s_port, f"SELECT count(*) FROM decisions WHERE decision_id IN ({ids})", 'toolgate'))
    found_intents = int(psql(s_port, f"SELECT count(*) FROM intents WHERE id IN ({intents})", 'toolgate'))
    verify = subprocess.run([tool, 'audit', 'verify', '--database',
                             f'postgres://postgres@127.0.0.1:{s_port}/toolgate'], capture_output=True, text=True)
    outage = (first_ok - killed_at) if first_ok else None
    report = {
        'acknowledged': len(acked), 'decisions_on_new_primary': found_decisions,
        'intents_on_new_primary': found_intents, 'refused_during_outage': refused,
        'transport_errors': len(errors), 'audit_verify_ok': verify.returncode == 0,
        'sidecar_restarted': not sidecar_alive,
        'sidecar_stopped_cleanly': clean_exit,
        'outage_seen_by_agent_s': None if outage is None else round(outage, 2),
        'promotion_after_kill_s': round(promoted_at - killed_at, 2),
    }
    fwd.repoint(None)
    fwd.server.close()
    print(json.dumps(report, indent=2))
    for name in ('primary', 'standby'):
        subprocess.run(['runuser', '-u', 'postgres', '--', pg_ctl, '-D', d / name, '-m', 'immediate', 'stop'],
                       capture_output=True)
    ok = (found_decisions == len(acked) and found_intents == len(acked) and len(acked) > before > 0
          and verify.returncode == 0 and sidecar_alive and clean_exit and outage is not None
          and set(refused) <= {'audit_unavailable', 'intent:store_unavailable', 'intent:database_error'})
    if verify.returncode != 0:
        print(verify.stdout, verify.stderr)
    if errors:
        print('transport errors (first 3):', errors[:3])
    print('PASS' if ok else 'FAIL')
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bin', default=str(ROOT / 'target' / 'debug' / 'toolgate'))
    ap.add_argument('--workers', type=int, default=8)
    ap.add_argument('--before', type=float, default=3.0, help='seconds of load before the kill')
    ap.add_argument('--detect', type=float, default=1.0, help='seconds before the standby is promoted')
    ap.add_argument('--after', type=float, default=4.0, help='seconds of load after the promotion')
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix='toolgate-failover-') as d:
        ok = asyncio.run(run(args, pathlib.Path(d)))
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
