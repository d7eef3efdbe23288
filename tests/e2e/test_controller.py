"""End-to-end: the real controller process against the kmock emulator,
driven with the real kubectl and the kubectl-toolgate plugin."""
import base64
import json
import os
import shutil
import sqlite3
import subprocess
import time
import urllib.request

from conftest import ROOT, wait_for

NS = 'agents'
PROFILE = ROOT / 'examples' / 'profiles' / 'safe-coding.yaml'


def _bundle_cm(kube):
    return kube['get']('configmap', 'toolgate-bundle-safe-coding', '-n', NS)


def _verify(kube, binaries, cm):
    """Verifies the bundle ConfigMap's envelope against the published trust set."""
    trust = kube['get']('configmap', 'toolgate-trust', '-n', NS)
    assert trust, 'toolgate-trust ConfigMap in the profile namespace'
    d = kube['dir']
    (d / 'bundle.json').write_text(cm['data']['bundle.json'])
    (d / 'trust.pem').write_text(trust['data']['trust.pem'])
    toolgate = str(binaries['toolgate'])
    out = subprocess.run([toolgate, 'bundle', 'verify', '--bundle', str(d / 'bundle.json'),
                          '--trust', str(d / 'trust.pem')], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    verified = json.loads(out.stdout)
    inspected = subprocess.run([toolgate, 'bundle', 'inspect', '--bundle', str(d / 'bundle.json')],
                               capture_output=True, text=True)
    assert inspected.returncode == 0, inspected.stdout + inspected.stderr
    document = json.loads(inspected.stdout[inspected.stdout.index('{'):])['document']
    return {
        'verified': True,
        'policyVersion': verified['policy_version'],
        'sequence': verified['sequence'],
        'digest': verified['digest'],
        'grants': len(document['grants']),
    }


def _profile(kube):
    return kube['get']('policyprofile', 'safe-coding', '-n', NS)


def _ready(status):
    return any(c['type'] == 'Ready' and c['status'] == 'True' for c in status.get('conditions', []))


def test_profile_bundle_approval_and_cleanup(kube, binaries, controller):
    kubectl = kube['kubectl']

    # 1. A profile applied with kubectl becomes a signed bundle ConfigMap.
    kubectl('apply', '--validate=false', '-f', str(PROFILE))
    cm = wait_for('bundle ConfigMap', lambda: _bundle_cm(kube))
    verified = _verify(kube, binaries, cm)
    ann = cm['metadata']['annotations']
    assert verified['verified'] is True
    assert verified['policyVersion'] == ann['toolgate.dev/policy-version']
    assert verified['sequence'] == 1 and ann['toolgate.dev/sequence'] == '1'
    assert verified['digest'] == ann['toolgate.dev/bundle-digest']
    assert cm['metadata']['ownerReferences'][0]['kind'] == 'PolicyProfile'

    # 2. The status reports the version, and Ready/Valid.
    status = wait_for('profile status', lambda: (_profile(kube) or {}).get('status', {}).get('version')
                      and _profile(kube)['status'])
    assert status['version'] == verified['policyVersion']
    assert status['bundleDigest'] == verified['digest']
    assert status['bundleRef'] == 'toolgate-bundle-safe-coding'
    assert _ready(status), status
    assert 'toolgate.dev/cleanup' in _profile(kube)['metadata']['finalizers']

    # 3. A pending approval written by a sidecar into the database appears as an
    #    Approval object, and `kubectl toolgate approve` resolves the row. The
    #    sidecar's tenant is its pod's namespace, whose PolicyProfile names
    #    who may answer.
    now_ms = int(time.time() * 1000)
    with sqlite3.connect(controller['db']) as db:
        db.execute(
            "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, policy_version,"
            " decision_id, requested_by, status, created_at, expires_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            ('e2e-approval-1', NS, 'inv-1', 'run-1', 'bash', 'sha256:abc', verified['policyVersion'],
             'dec-1', 'sidecar/agent-0', 'pending', now_ms, now_ms + 15 * 60 * 1000))
    name = 'apr-e2e-approval-1'
    obj = wait_for('mirrored Approval', lambda: kube['get']('approval', name, '-n', NS))
    assert obj['spec']['request']['tool'] == 'bash'
    assert obj['spec']['request']['profile'] == 'safe-coding'
    listed = kubectl('toolgate', 'list', '-n', NS).stdout
    assert name in listed and 'bash' in listed, listed

    # safe-coding's approvers are `group:platform-oncall`: carol approves as
    # a member of that group, not by borrowing the group's name.
    out = kubectl('toolgate', 'approve', name, '-n', NS, '--reason', 'e2e says yes', '--by', 'carol',
                  '--group', 'platform-oncall')
    assert 'approved' in out.stdout

    def resolved():
        with sqlite3.connect(controller['db']) as db:
            return db.execute("SELECT status, resolved_by, reason FROM approvals WHERE id = ?",
                              ('e2e-approval-1',)).fetchone()
    row = wait_for('approval resolved in the database', lambda: (r := resolved()) and r[0] == 'approved' and r)
    assert row == ('approved', 'carol', 'e2e says yes')
    wait_for('Approval phase', lambda: (kube['get']('approval', name, '-n', NS) or {}).get('status', {}).get('phase') == 'Approved')
    # A second decision the other way is refused by the plugin.
    again = kubectl('toolgate', 'deny', name, '-n', NS, '--reason', 'changed my mind', check=False)
    assert again.returncode != 0 and 'cannot be changed' in again.stderr

    # 3b. `kubectl toolgate cancel` stops a run: a RunCancellation the
    #     controller records in the database, reaping the run's pending approvals.
    with sqlite3.connect(controller['db']) as db:
        db.execute(
            "INSERT INTO approvals (id, tenant, invocation_id, run_id, tool, args_digest, policy_version,"
            " decision_id, requested_by, status, created_at, expires_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            ('e2e-approval-2', NS, 'inv-2', 'run-9', 'bash', 'sha256:abc', verified['policyVersion'],
             'dec-2', 'sidecar/agent-0', 'pending', now_ms, now_ms + 15 * 60 * 1000))
    out = kubectl('toolgate', 'cancel', 'run-9', '-n', NS, '--reason', 'e2e stop', '--wait', '30')
    assert 'applied' in out.stdout and '1 pending approval(s) cancelled' in out.stdout, out.stdout
    with sqlite3.connect(controller['db']) as db:
        run = db.execute("SELECT cancel_reason, cancelled_by FROM runs WHERE tenant = ? AND run_id = ?",
                         (NS, 'run-9')).fetchone()
        approval = db.execute("SELECT status FROM approvals WHERE id = ?", ('e2e-approval-2',)).fetchone()
    assert run[0] == 'e2e stop' and run[1].startswith(f'runcancellation:{NS}/cancel-run-9-'), run
    assert approval == ('cancelled',)
    # (kmock serves no printer columns, so read the object itself.)
    listed = json.loads(kubectl('get', 'tgrc', '-n', NS, '-o', 'json').stdout)['items']
    assert [(o['spec']['runId'], o['status']['phase'], o['status']['approvalsCancelled'])
            for o in listed] == [('run-9', 'Applied', 1)], listed
    # Cancelling again finds the first request.
    again = kubectl('toolgate', 'cancel', 'run-9', '-n', NS, '--wait', '30')
    assert 'applied' in again.stdout, again.stdout

    # 4. A standing grant (kubectl apply) gives the profile a new version.
    grant = {
        'apiVersion': 'toolgate.dev/v1alpha1', 'kind': 'Approval',
        'metadata': {'name': 'grant-make', 'namespace': NS},
        'spec': {'grant': {'profile': 'safe-coding', 'tool': 'bash', 'glob': 'make *', 'subjects': ['*'],
                           'expiresAt': '2099-01-01T00:00:00Z'}},
    }
    kubectl('apply', '--validate=false', '-f', '-', input=json.dumps(grant))
    # A self-approved grant by someone outside the approvers is never compiled in.
    rogue = json.loads(json.dumps(grant))
    rogue['metadata']['name'] = 'grant-everything'
    rogue['spec']['grant']['glob'] = '*'
    rogue['spec'].update({'decision': 'approved', 'decidedBy': 'mallory'})
    kubectl('apply', '--validate=false', '-f', '-', input=json.dumps(rogue))
    wait_for('rogue grant refused', lambda: 'ApproverNotAllowed' in
             ((kube['get']('approval', 'grant-everything', '-n', NS) or {}).get('status', {}).get('message') or ''))
    kubectl('patch', 'approval', 'grant-make', '-n', NS, '--type', 'merge',
            '-p', json.dumps({'spec': {'decision': 'approved', 'decidedBy': 'bob',
                                       'decidedByGroups': ['platform-oncall']}}))
    status = wait_for('new version with the grant', lambda: (s := _profile(kube)['status']).get('sequence') == 2 and s)
    assert status['grants'] == 1 and status['version'] != verified['policyVersion']
    cm = _bundle_cm(kube)
    v2 = _verify(kube, binaries, cm)
    assert (v2['sequence'], v2['grants'], v2['policyVersion']) == (2, 1, status['version'])

    # 5. An invalid spec is rejected and never replaces the last good bundle.
    kubectl('patch', 'policyprofile', 'safe-coding', '-n', NS, '--type', 'merge',
            '-p', json.dumps({'spec': {'rules': {'deploy': {'allow': ['*']}}}}))

    def rejected():
        s = _profile(kube)['status']
        valid = [c for c in s.get('conditions', []) if c['type'] == 'Valid']
        return valid and valid[0]['status'] == 'False' and s
    status = wait_for('Valid=False', rejected)
    valid = [c for c in status['conditions'] if c['type'] == 'Valid'][0]
    assert valid['reason'] == 'InvalidSpec' and valid['message'].startswith('profile_incomplete_effects'), valid
    assert status['version'] == v2['policyVersion']
    assert _bundle_cm(kube)['data']['bundle.json'] == cm['data']['bundle.json']

    # 6. Metrics are served.
    metrics = urllib.request.urlopen(controller['metrics'] + '/metrics').read().decode()
    assert 'toolgate_reconcile_total{controller="policyprofile",result="ok"}' in metrics
    assert 'toolgate_controller_leader 1' in metrics
    # Per profile: still Ready (the last good bundle), no longer Valid.
    labels = '{profile="safe-coding",profile_namespace="agents"}'
    assert f'toolgate_profile_ready{labels} 1' in metrics, metrics
    assert f'toolgate_profile_valid{labels} 0' in metrics, metrics
    expiry = next(float(l.split()[-1]) for l in metrics.splitlines()
                  if l.startswith(f'toolgate_profile_bundle_expiry_timestamp_seconds{labels}'))
    assert time.time() < expiry < time.time() + 25 * 3600
    assert 'toolgate_build_info{component="controller"' in metrics
    promtool = shutil.which('promtool')
    if promtool or os.environ.get('CI') == 'true':
        out = subprocess.run([promtool or 'promtool', 'check', 'metrics'], input=metrics.encode(),
                             capture_output=True, timeout=60)
        assert out.returncode == 0 and not out.stdout.strip(), out.stdout.decode() + out.stderr.decode()

    # 7. Deleting the profile removes its bundle ConfigMap and the finalizer.
    kubectl('delete', 'policyprofile', 'safe-coding', '-n', NS, '--wait=false')
    wait_for('bundle ConfigMap deleted', lambda: _bundle_cm(kube) is None)
    wait_for('profile gone', lambda: _profile(kube) is None)


def _status(kube, *extra):
    return kube['kubectl']('toolgate', 'status', '--controller-namespace', 'toolgate-system', *extra, check=False)


def test_kubectl_toolgate_status(kube, binaries, controller, tmp_path):
    """`kubectl toolgate status` against the emulator, a running controller
    and a real webhook: it fails while something is missing or out of date,
    and passes once everything is in place."""
    kubectl = kube['kubectl']
    missing = _status(kube)
    assert missing.returncode != 0, missing.stdout
    lines = missing.stdout.splitlines()
    assert any(l.startswith('FAIL') and 'CRD policyprofiles.toolgate.dev' in l and 'not installed' in l
               for l in lines), missing.stdout
    assert any(l.startswith('FAIL') and 'inject.toolgate.dev' in l for l in lines), missing.stdout
    assert any(l.startswith('ok') and 'controller leader' in l for l in lines), missing.stdout

    # The generated CRDs, a profile, and a real webhook with a CA-signed certificate.
    for crd in sorted((ROOT / 'crds').glob('*.yaml')):
        kubectl('apply', '--validate=false', '-f', str(crd))
    kubectl('apply', '--validate=false', '-f', str(PROFILE))
    wait_for('profile ready', lambda: _ready((_profile(kube) or {}).get('status', {})))
    host = 'toolgate-webhook.toolgate-system.svc'

    def openssl(*args):
        out = subprocess.run(['openssl', *map(str, args)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr

    openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
            '-keyout', tmp_path / 'ca.key', '-out', tmp_path / 'ca.crt', '-days', '30', '-subj', '/CN=e2e CA')
    openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
            '-keyout', tmp_path / 'tls.key', '-out', tmp_path / 'tls.csr', '-subj', f'/CN={host}')
    (tmp_path / 'san.ext').write_text(f'subjectAltName=DNS:{host}\n')
    openssl('x509', '-req', '-in', tmp_path / 'tls.csr', '-CA', tmp_path / 'ca.crt', '-CAkey', tmp_path / 'ca.key',
            '-CAcreateserial', '-out', tmp_path / 'tls.crt', '-days', '10', '-extfile', tmp_path / 'san.ext')
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    webhook = subprocess.Popen([str(binaries['toolgate']), 'webhook', '--listen', f'127.0.0.1:{port}',
                                '--metrics-listen', 'off', '--tls-cert', str(tmp_path / 'tls.crt'),
                                '--tls-key', str(tmp_path / 'tls.key'), '--sidecar-image', 'toolgate:e2e'],
                               stdout=subprocess.DEVNULL, stderr=open(tmp_path / 'webhook.log', 'w'))
    try:
        ca = base64.b64encode((tmp_path / 'ca.crt').read_bytes()).decode()
        config = {
            'apiVersion': 'admissionregistration.k8s.io/v1', 'kind': 'MutatingWebhookConfiguration',
            'metadata': {'name': 'toolgate-inject'},
            'webhooks': [{'name': 'pod.inject.toolgate.dev', 'admissionReviewVersions': ['v1'], 'sideEffects': 'None',
                          'clientConfig': {'caBundle': ca, 'service': {
                              'name': 'toolgate-webhook', 'namespace': 'toolgate-system', 'path': '/mutate-pods',
                              'port': 443}}}],
        }
        kubectl('apply', '--validate=false', '-f', '-', input=json.dumps(config))
        url = f'https://127.0.0.1:{port}'
        healthy = wait_for('status passes', lambda: (r := _status(kube, '--webhook-url', url)).returncode == 0 and r)
        out = healthy.stdout
        for expected in ('CRD policyprofiles.toolgate.dev', 'CRD approvals.toolgate.dev',
                         'CRD runcancellations.toolgate.dev', 'controller leader',
                         'webhook CA', f'certificate for {host} valid until', 'trust ConfigMap agents',
                         'trust ConfigMap toolgate-system', 'profile agents/safe-coding'):
            assert any(l.startswith(('ok', 'warn')) and expected in l for l in out.splitlines()), (expected, out)
        assert 'toolgate is healthy' in out
        assert 'pods 0 current / 0 stale' in out, out
        print(out)

        # A CRD of another version (no printer columns) is reported, and fails the command.
        kubectl('patch', 'crd', 'policyprofiles.toolgate.dev', '--type', 'json', '-p', json.dumps(
            [{'op': 'remove', 'path': '/spec/versions/0/additionalPrinterColumns'}]))
        stale = _status(kube, '--webhook-url', url)
        assert stale.returncode != 0
        assert any(l.startswith('FAIL') and 'policyprofiles' in l and 'differs' in l
                   for l in stale.stdout.splitlines()), stale.stdout
        kubectl('apply', '--validate=false', '-f', str(ROOT / 'crds' / 'policyprofiles.toolgate.dev.yaml'))

        # A webhook that stops answering fails the command.
        webhook.terminate()
        webhook.wait(timeout=10)
        down = _status(kube, '--webhook-url', url)
        assert down.returncode != 0
        assert any(l.startswith('FAIL') and l.split()[1] == 'webhook' for l in down.stdout.splitlines()), down.stdout
    finally:
        if webhook.poll() is None:
            webhook.terminate()
            webhook.wait(timeout=10)
        kubectl('delete', 'policyprofile', 'safe-coding', '-n', NS, '--wait=false', check=False)
