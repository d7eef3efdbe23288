"""The chart's dashboard queries and alert rules, proven on a REAL Prometheus
(Debian's `prometheus` package) scraping a REAL sidecar and a REAL webhook.

The sidecar is driven through allow, deny, escalate, intents (one left
uncertain, one safe to retry), a refused workspace path, and then a bad
bundle; the webhook answers one AdmissionReview and refuses one unreadable
body. Prometheus scrapes both every second and evaluates the chart's rules
file every second. Then every dashboard query and every alert expression is
evaluated through the HTTP API: none may error, every query fed by the
sidecar or the webhook must return series, every rule must be healthy, and
the alerts this traffic causes must be pending or firing.

`promtool check rules`, `promtool test rules` (tests/prometheus/alerts_test.yaml)
and `promtool check metrics` on both binaries' /metrics run here too.

Needs `prometheus` and `promtool` on PATH (`.ci/run` installs them) and the
built CLI ($TOOLGATE_BIN, default target/debug/toolgate).
"""
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
RULES = ROOT / 'charts' / 'toolgate' / 'rules' / 'toolgate.rules.yaml'
DASHBOARD = ROOT / 'charts' / 'toolgate' / 'dashboards' / 'toolgate.json'

PROFILE = """\
apiVersion: toolgate.dev/v1alpha1
kind: PolicyProfile
metadata: {name: observed, namespace: agents}
spec:
  mode: rules
  rules:
    bash: {deny: ["rm *"], allow: ["echo *"], escalate: ["deploy *"]}
    transfer: {allow: ["*"]}
    lookup: {allow: ["*"]}
    workspace.read: {allow: ["*"]}
  effects:
    bash:     {sideEffect: PROCESS_EXEC, risk: high, matchArgs: [command]}
    transfer: {sideEffect: EXTERNAL_WRITE, risk: high}
    lookup:   {sideEffect: NONE, risk: low, readOnly: true, allowParallel: true}
    workspace.read: {sideEffect: WORKSPACE_READ, risk: low, readOnly: true}
  approvals: {ttlSeconds: 300}
"""

# Families only the controller exports: no controller runs here, so queries
# made only of these may come back empty.
CONTROLLER_ONLY = re.compile(
    r'^toolgate_(reconcile_\w+|approvals\w*|controller_leader|profile_\w+|checkpoint_\w+|notifications?_\w+|unreadable_rows_total)$')

# Alerts this traffic must cause (pending or firing).
EXPECTED_ALERTS = {
    'ToolgateBundleExpiringSoon',    # the bundle is valid for 1 h
    'ToolgateBundleReloadFailing',   # a bad bundle replaced the file
    'ToolgateUncertainIntentsOpen',  # one intent is left after effect-sent
    'ToolgateControllerNoLeader',    # no controller is scraped
    'ToolgateWebhookErrors',         # one unreadable AdmissionReview
}


def _toolgate_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get('TOOLGATE_BIN', ROOT / 'target' / 'debug' / 'toolgate'))
    if not path.exists():
        pytest.fail(f"{path} not found: build it with `cargo build -p toolgate` (or set $TOOLGATE_BIN)")
    return path


def _need(tool):
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not on PATH: `apt-get install prometheus` (bash .ci/run does)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _run(*args, **kw):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, **kw)
    assert out.returncode == 0, f"{' '.join(map(str, args))} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out


def _http(method, url, body=None, timeout=5):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _wait(what, fn, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


class Procs:
    def __init__(self):
        self.procs = []

    def start(self, args, log):
        proc = subprocess.Popen([str(a) for a in args], stdout=open(log, 'w'), stderr=subprocess.STDOUT,
                                env=dict(os.environ, RUST_LOG='warn'))
        self.procs.append(proc)
        return proc

    def stop(self):
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope='module')
def stack(tmp_path_factory):
    """Sidecar, webhook and Prometheus, all real, on loopback."""
    toolgate = _toolgate_bin()
    prometheus = _need('prometheus')
    d = tmp_path_factory.mktemp('prom')
    procs = Procs()
    try:
        yield _start(toolgate, prometheus, d, procs)
    finally:
        procs.stop()


def _start(toolgate, prometheus, d, procs):
    _run(toolgate, 'keygen', '--out', d / 'keys')
    (d / 'profile.yaml').write_text(PROFILE)
    _run(toolgate, 'bundle', 'build', '--profile', d / 'profile.yaml', '--key', d / 'keys' / 'signing.key',
         '--sequence', '1', '--valid-for', '1h', '--out', d / 'bundle.json')
    db = d / 'toolgate.db'
    assert not db.exists()
    port, ops_port = _free_port(), _free_port()
    sidecar = procs.start([
        toolgate, 'sidecar', '--bundle', d / 'bundle.json', '--trust', d / 'keys' / 'signing.pub',
        # No `?mode=rwc`: a missing SQLite file is created.
        '--database', f"sqlite://{db}",
        '--listen', f"127.0.0.1:{port}", '--ops-listen', f"127.0.0.1:{ops_port}",
        '--workspace-base', d / 'workspaces', '--tenant', 'agents',
        '--pod-name', 'agent-0', '--pod-namespace', 'agents',
        '--reload-interval', '1s', '--heartbeat-interval', '1s',
    ], d / 'sidecar.log')
    ops = f"http://127.0.0.1:{ops_port}"
    _wait('sidecar /readyz', lambda: sidecar.poll() is None and _http('GET', ops + '/readyz')[0] == 200
          or (sidecar.poll() is not None and pytest.fail((d / 'sidecar.log').read_text())))
    assert db.exists(), 'sqlite://PATH must create the database file'

    # The webhook with a self-signed serving certificate.
    _run('openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
         '-keyout', d / 'tls.key', '-out', d / 'tls.crt', '-days', '30', '-subj', '/CN=localhost',
         '-addext', 'subjectAltName=DNS:localhost')
    hook_port, hook_metrics_port = _free_port(), _free_port()
    webhook = procs.start([
        toolgate, 'webhook', '--listen', f"127.0.0.1:{hook_port}",
        '--metrics-listen', f"127.0.0.1:{hook_metrics_port}",
        '--tls-cert', d / 'tls.crt', '--tls-key', d / 'tls.key', '--sidecar-image', 'toolgate:test',
    ], d / 'webhook.log')
    hook_metrics = f"http://127.0.0.1:{hook_metrics_port}"
    _wait('webhook /metrics', lambda: webhook.poll() is None and _http('GET', hook_metrics + '/healthz')[0] == 200)

    prom_port = _free_port()
    (d / 'prometheus.yml').write_text(yaml.safe_dump({
        'global': {'scrape_interval': '1s', 'evaluation_interval': '1s'},
        'rule_files': [str(RULES)],
        'scrape_configs': [
            {'job_name': 'sidecars', 'static_configs': [{
                'targets': [f"127.0.0.1:{ops_port}"],
                # What the chart's PodMonitor attaches.
                'labels': {'namespace': 'agents', 'pod': 'agent-0', 'container': 'toolgate-sidecar'}}]},
            {'job_name': 'webhook', 'static_configs': [{
                'targets': [f"127.0.0.1:{hook_metrics_port}"],
                'labels': {'namespace': 'toolgate', 'pod': 'toolgate-0', 'container': 'webhook'}}]},
        ],
    }))
    prom = procs.start([
        prometheus, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{prom_port}", '--web.enable-lifecycle',
    ], d / 'prometheus.log')
    api = f"http://127.0.0.1:{prom_port}"
    _wait('prometheus ready', lambda: prom.poll() is None and _http('GET', api + '/-/ready')[0] == 200)
    # Discovery hands targets to the scrapers on a 5 s tick: wait for both
    # to be scraped once, so every counter has a sample before the traffic.
    up = api + '/api/v1/query?' + urllib.parse.urlencode({'query': 'sum(up)'})
    _wait('both targets scraped', lambda: (lambda r: r and r[0]['value'][1] == '2')(
        json.loads(_http('GET', up)[1])['data']['result']))
    return {'dir': d, 'url': f"http://127.0.0.1:{port}", 'ops': ops, 'webhook': f"https://127.0.0.1:{hook_port}",
            'webhook_metrics': hook_metrics, 'prometheus': api, 'bin': toolgate}


def _authorize(stack, tool, args, run='run-1', step=None):
    body = {'tool': tool, 'arguments': args, 'run_id': run}
    if step:
        body['step_id'] = step
    status, out = _http('POST', stack['url'] + '/v1/authorize', body)
    assert status == 200, out
    return json.loads(out)


def _intent(stack, verdict, tool, step):
    status, out = _http('POST', stack['url'] + '/v1/intents', {
        'decision_id': verdict['decision_id'], 'run_id': 'run-1', 'step_id': step, 'tool': tool,
        'args_digest': verdict['args_digest'], 'call_digest': verdict['call_digest']})
    assert status == 201, out
    return json.loads(out)['intent_id']


def _admission(stack, body):
    import ssl
    ctx = ssl.create_default_context(cafile=str(stack['dir'] / 'tls.crt'))
    req = urllib.request.Request(stack['webhook'].replace('127.0.0.1', 'localhost') + '/mutate-pods',
                                 data=body, method='POST', headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _query(stack, expr):
    status, out = _http('GET', stack['prometheus'] + '/api/v1/query?' + urllib.parse.urlencode({'query': expr}))
    body = json.loads(out)
    assert status == 200 and body['status'] == 'success', f"`{expr}` failed: {body}"
    return body['data']['result']


def _metric_names(expr):
    return set(re.findall(r'(?<![\w:])((?:toolgate|process)_[a-z_]+)', expr))


def _dashboard_queries():
    texts = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ('expr', 'query', 'definition') and isinstance(v, str):
                    texts.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(json.loads(DASHBOARD.read_text()))
    return texts


def _grafana(expr):
    """What Grafana sends with every variable at its `All` value."""
    return expr.replace('$namespace', '.*').replace('$profile', '.*')


@pytest.fixture(scope='module')
def traffic(stack):
    started = time.monotonic()
    assert _authorize(stack, 'bash', {'command': 'echo hi'})['verdict'] == 'allow'
    assert _authorize(stack, 'bash', {'command': 'rm -rf /'})['verdict'] == 'deny'
    assert _authorize(stack, 'bash', {'command': 'deploy prod'})['verdict'] == 'escalate'
    assert _authorize(stack, 'lookup', {'q': 'x'})['verdict'] == 'allow'
    assert _authorize(stack, 'unknown', {})['reason'] == 'unknown_tool'
    # Two intents: one stays safe to retry, one is sent and never completed
    # (uncertain); a third completes.
    for step, finish in (('s1', None), ('s2', 'sent'), ('s3', 'complete')):
        v = _authorize(stack, 'transfer', {'amount': step}, step=step)
        assert v['verdict'] == 'allow' and v['intent_required'], v
        intent = _intent(stack, v, 'transfer', step)
        if finish:
            assert _http('POST', f"{stack['url']}/v1/intents/{intent}/effect-sent", {})[0] == 200
        if finish == 'complete':
            assert _http('POST', f"{stack['url']}/v1/intents/{intent}/complete", {'outcome': 'completed'})[0] == 200
    # A name longer than any filesystem allows: the policy lets it through,
    # the workspace refuses it (`../escape` is the policy's path_escapes).
    status, _ = _http('POST', stack['url'] + '/v1/workspace/read', {'run_id': 'run-1', 'path': 'n' * 300})
    assert status == 400
    # The webhook: one pod admitted, one body that is no AdmissionReview.
    review = {'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview', 'request': {
        'uid': 'u-1', 'kind': {'group': '', 'version': 'v1', 'kind': 'Pod'},
        'resource': {'group': '', 'version': 'v1', 'resource': 'pods'}, 'namespace': 'agents',
        'operation': 'CREATE', 'userInfo': {'username': 'pytest'},
        'object': {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'p', 'namespace': 'agents'},
                   'spec': {'containers': [{'name': 'app', 'image': 'busybox'}]}}}}
    assert _admission(stack, json.dumps(review).encode()) == 200
    assert _admission(stack, b'not an admission review') == 400
    # Let Prometheus see the traffic, then break the bundle.
    time.sleep(2.5)
    (stack['dir'] / 'bundle.json').write_text('{"not": "a bundle"}')
    _wait('the bad bundle counted', lambda: 'code="bundle_malformed"} 1' in
          _http('GET', stack['ops'] + '/metrics')[1].decode())
    _wait('uncertain intent counted', lambda: 'toolgate_open_intents{resume_class="uncertain"} 1' in
          _http('GET', stack['ops'] + '/metrics')[1].decode())
    # Two more scrapes and rule evaluations after the last change.
    time.sleep(2.5)
    return time.monotonic() - started


def test_promtool_checks_and_unit_tests_the_rules():
    promtool = _need('promtool')
    _run(promtool, 'check', 'rules', RULES)
    _run(promtool, 'test', 'rules', HERE / 'alerts_test.yaml')


def test_every_alert_in_the_rules_file_has_a_promtool_unit_test():
    rules = yaml.safe_load(RULES.read_text())
    alerts = {r['alert'] for g in rules['groups'] for r in g['rules']}
    tested = {t['alertname'] for case in yaml.safe_load((HERE / 'alerts_test.yaml').read_text())['tests']
              for t in case.get('alert_rule_test', []) if t.get('exp_alerts')}
    assert alerts - tested == set(), 'alerts without a firing unit test'


def test_promtool_check_metrics_is_clean_on_sidecar_and_webhook(stack, traffic):
    promtool = _need('promtool')
    for name, url in (('sidecar', stack['ops']), ('webhook', stack['webhook_metrics'])):
        status, text = _http('GET', url + '/metrics')
        assert status == 200
        out = subprocess.run([promtool, 'check', 'metrics'], input=text, capture_output=True, timeout=60)
        assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), \
            f"{name}: {out.stdout.decode()} {out.stderr.decode()}"
        assert b'process_resident_memory_bytes ' in text, name
        assert b'toolgate_build_info{' in text, name


def test_every_dashboard_query_evaluates_and_traffic_feeds_it(stack, traffic):
    queries = _dashboard_queries()
    assert len(queries) >= 20, queries
    empty = []
    for expr in queries:
        if expr.startswith('label_values('):
            # A Grafana variable: the series it reads must exist.
            inner = re.match(r'label_values\((.*), (\w+)\)$', expr)
            result = _query(stack, f"count by ({inner.group(2)}) ({_grafana(inner.group(1))})")
        elif expr in ('prometheus',):
            continue
        else:
            result = _query(stack, _grafana(expr))
        names = {n for n in _metric_names(expr) if n.startswith('toolgate_') or n.startswith('process_')}
        fed = any(not CONTROLLER_ONLY.match(n) for n in names)
        if fed and not result:
            empty.append(expr)
    assert not empty, 'dashboard queries the traffic should feed returned nothing:\n' + '\n'.join(empty)


def test_every_alert_evaluates_is_healthy_and_the_traffic_fires_its_alerts(stack, traffic):
    rules = yaml.safe_load(RULES.read_text())
    exprs = [(r['alert'], r['expr']) for g in rules['groups'] for r in g['rules']]
    missing = []
    for alert, expr in exprs:
        _query(stack, expr)  # evaluates without error
        # Every series the alert reads, from the sidecar or the webhook,
        # exists (at 0 before its first event).
        for name in _metric_names(expr):
            if not CONTROLLER_ONLY.match(name) and not _query(stack, f"count({name})"):
                missing.append(f"{alert}: {name}")
    assert not missing, 'alerts read series that do not exist:\n' + '\n'.join(missing)
    # Prometheus loaded the same file and evaluates every rule without error.
    groups = json.loads(_http('GET', stack['prometheus'] + '/api/v1/rules')[1])['data']['groups']
    loaded = {r['name']: r for g in groups for r in g['rules']}
    assert set(loaded) == {a for a, _ in exprs}
    unhealthy = {n: r.get('lastError') for n, r in loaded.items() if r['health'] != 'ok'}
    assert not unhealthy, unhealthy
    active = _wait('the expected alerts', lambda: (lambda a: a if EXPECTED_ALERTS <= a else None)(
        {a['labels']['alertname'] for a in
         json.loads(_http('GET', stack['prometheus'] + '/api/v1/alerts')[1])['data']['alerts']}), timeout=15)
    assert 'ToolgateBundleExpired' not in active and 'ToolgateAuditUnavailable' not in active, active
    # The alerts name the pod and the profile they are about.
    status, out = _http('GET', stack['prometheus'] + '/api/v1/alerts')
    by_name = {a['labels']['alertname']: a for a in json.loads(out)['data']['alerts']}
    assert by_name['ToolgateBundleExpiringSoon']['labels']['profile'] == 'observed'
    assert by_name['ToolgateBundleReloadFailing']['labels']['code'] == 'bundle_malformed'
    assert by_name['ToolgateUncertainIntentsOpen']['labels']['namespace'] == 'agents'


def test_latency_is_split_by_risk_and_bundle_info_has_no_sequence(stack, traffic):
    risks = {r['metric']['risk'] for r in _query(stack, 'toolgate_decision_duration_seconds_count > 0')}
    assert {'high', 'low'} <= risks, risks
    info = _query(stack, 'toolgate_bundle_info')
    # The bad bundle did not replace the good one.
    assert len(info) == 1 and info[0]['metric']['policy_version'].startswith('observed@'), info
    assert 'sequence' not in info[0]['metric']
    refusals = _query(stack, 'toolgate_workspace_refusals_total{code="workspace_invalid_path"}')
    assert refusals and refusals[0]['value'][1] == '1', refusals
    assert traffic < 30, f"traffic took {traffic:.1f} s"
