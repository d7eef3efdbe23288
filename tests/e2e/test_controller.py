"""The real controller process against the kmock emulator, driven with the
real kubectl and the kubectl-toolgate plugin: only what the real API server
suite (tests/k8s, on kube-apiserver and etcd) cannot reach.

Retired here once tests/k8s covered them: the profile's signed bundle and
status (test_k8s_profiles), Approval mirroring and `kubectl toolgate
approve` (test_k8s_sidecar, with a real sidecar and impersonated users),
`kubectl toolgate cancel` (test_k8s_sidecar), standing grants and profile
deletion (test_k8s_profiles), and `kubectl toolgate status` green and red
around the webhook (test_k8s_status_leader). What stays, and why:
- a profile whose invalid spec got past the webhook: on the real API
  server the webhook refuses it before the controller could see it;
- the controller's /metrics checked with promtool after that;
- `status` with CRDs missing or of another version: the real cluster is
  shared by the suite and always has this version's CRDs installed."""
import json
import os
import shutil
import subprocess
import time
import urllib.request

from e2e_support import ROOT, wait_for

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


def test_a_profile_that_got_past_the_webhook_keeps_its_last_good_bundle(kube, binaries, controller):
    """An invalid spec stored without the webhook's check (kmock has none; a
    real cluster gets one while the webhook is not installed yet, or through
    a failurePolicy bypass) never replaces the last good bundle, and the
    profile's metrics say so, in the exposition format promtool accepts."""
    kubectl = kube['kubectl']
    kubectl('apply', '--validate=false', '-f', str(PROFILE))
    cm = wait_for('bundle ConfigMap', lambda: _bundle_cm(kube))
    good = _verify(kube, binaries, cm)
    wait_for('profile ready', lambda: _ready((_profile(kube) or {}).get('status', {})))

    kubectl('patch', 'policyprofile', 'safe-coding', '-n', NS, '--type', 'merge',
            '-p', json.dumps({'spec': {'rules': {'deploy': {'allow': ['*']}}}}))

    def rejected():
        s = _profile(kube)['status']
        valid = [c for c in s.get('conditions', []) if c['type'] == 'Valid']
        return valid and valid[0]['status'] == 'False' and s
    status = wait_for('Valid=False', rejected)
    valid = [c for c in status['conditions'] if c['type'] == 'Valid'][0]
    assert valid['reason'] == 'InvalidSpec' and valid['message'].startswith('profile_incomplete_effects'), valid
    assert status['version'] == good['policyVersion']
    assert _bundle_cm(kube)['data']['bundle.json'] == cm['data']['bundle.json']

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

    kubectl('delete', 'policyprofile', 'safe-coding', '-n', NS, '--wait=false')
    wait_for('bundle ConfigMap deleted', lambda: _bundle_cm(kube) is None)


def _status(kube, *extra):
    return kube['kubectl']('toolgate', 'status', '--controller-namespace', 'toolgate-system', *extra, check=False)


def test_kubectl_toolgate_status_reports_missing_and_drifted_crds(kube, binaries, controller):
    """`kubectl toolgate status` fails while the CRDs are not installed, and
    when an installed CRD differs from this version's. (The real API server
    suite always installs the generated CRDs; the healthy and webhook-down
    cases run there, in tests/k8s/test_k8s_status_leader.py.)"""
    kubectl = kube['kubectl']
    missing = _status(kube)
    assert missing.returncode != 0, missing.stdout
    lines = missing.stdout.splitlines()
    assert any(l.startswith('FAIL') and 'CRD policyprofiles.toolgate.dev' in l and 'not installed' in l
               for l in lines), missing.stdout
    assert any(l.startswith('ok') and 'controller leader' in l for l in lines), missing.stdout

    for crd in sorted((ROOT / 'crds').glob('*.yaml')):
        kubectl('apply', '--validate=false', '-f', str(crd))
    installed = _status(kube).stdout.splitlines()
    for name in ('policyprofiles', 'approvals', 'runcancellations'):
        assert any(l.startswith('ok') and f'CRD {name}.toolgate.dev' in l for l in installed), installed

    # A CRD of another version (no printer columns) is reported, and fails the command.
    kubectl('patch', 'crd', 'policyprofiles.toolgate.dev', '--type', 'json', '-p', json.dumps(
        [{'op': 'remove', 'path': '/spec/versions/0/additionalPrinterColumns'}]))
    stale = _status(kube)
    assert stale.returncode != 0
    assert any(l.startswith('FAIL') and 'policyprofiles' in l and 'differs' in l
               for l in stale.stdout.splitlines()), stale.stdout
    kubectl('apply', '--validate=false', '-f', str(ROOT / 'crds' / 'policyprofiles.toolgate.dev.yaml'))
    fixed = _status(kube).stdout.splitlines()
    assert any(l.startswith('ok') and 'CRD policyprofiles.toolgate.dev' in l for l in fixed), fixed
