"""A stateful Kubernetes API emulator for the controller e2e test.

Runs kmock's ``KubernetesEmulator`` over HTTP on 127.0.0.1 and prints
``PORT <n>`` once it listens. The subclass fills in what kube-runtime's
watcher and the controller need and the emulator leaves out:

* ``metadata.resourceVersion`` (a global counter), ``uid``,
  ``creationTimestamp``, ``generation`` and the namespace from the URL;
* ``PUT`` (replace) with a resourceVersion guard (409 on mismatch) — the
  leader Lease and the trust ConfigMap rely on it;
* ``PATCH`` by content type: JSON patch (the finalizer helper), JSON merge
  patch (kubectl, status) and server-side apply (create when absent, else
  a merge — an approximation: no field ownership);
* status subresource writes only change ``status``; other writes bump
  ``generation`` when ``spec`` changes.

Usage: python3 kmock_server.py
"""
import asyncio
import copy
import datetime
import itertools
import json
import sys
import uuid

import attrs
import jsonpatch
import kmock
from kmock._internal import enums

RESOURCES = {
    'toolgate.dev/v1alpha1/policyprofiles': dict(kind='PolicyProfile', singular='policyprofile', shortnames={'tgp'}, categories={'toolgate'}, subresources={'status'}),
    'toolgate.dev/v1alpha1/approvals': dict(kind='Approval', singular='approval', shortnames={'tga'}, categories={'toolgate'}, subresources={'status'}),
    'toolgate.dev/v1alpha1/runcancellations': dict(kind='RunCancellation', singular='runcancellation', shortnames={'tgrc'}, categories={'toolgate'}, subresources={'status'}),
    'v1/configmaps': dict(kind='ConfigMap', singular='configmap', shortnames={'cm'}),
    'v1/secrets': dict(kind='Secret', singular='secret'),
    'v1/namespaces': dict(kind='Namespace', singular='namespace', namespaced=False),
    'events.k8s.io/v1/events': dict(kind='Event', singular='event', shortnames={'ev'}),
    'coordination.k8s.io/v1/leases': dict(kind='Lease', singular='lease'),
    # For `kubectl toolgate status`.
    'apiextensions.k8s.io/v1/customresourcedefinitions': dict(kind='CustomResourceDefinition', singular='customresourcedefinition', shortnames={'crd'}, namespaced=False),
    'admissionregistration.k8s.io/v1/mutatingwebhookconfigurations': dict(kind='MutatingWebhookConfiguration', singular='mutatingwebhookconfiguration', namespaced=False),
}
VERBS = {'get', 'list', 'watch', 'create', 'update', 'patch', 'delete'}
_rv = itertools.count(1)


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')


def _merge(base, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base) if isinstance(base, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def _replacement(old, new):
    """A kmock patch (recursive merge, None deletes) turning `old` into `new`."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return copy.deepcopy(new)
    out = {k: None for k in old if k not in new}
    for k, v in new.items():
        out[k] = _replacement(old.get(k), v)
    return out


class Conflict(kmock.KubernetesError):
    pass


class Emulator(kmock.KubernetesEmulator):
    async def _handle(self, request):
        if request.resource is not None and request.name is not None or request.method == enums.method.POST:
            try:
                original = request
                request = self._rewrite(request)
                if request is not original:
                    # kmock's views select requests by identity from its log.
                    self._requests[self._requests.index(original)] = request
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                return await self._render_error(kmock.KubernetesError(status=422, reason='Invalid', message=str(e)))
            except Conflict as e:
                return await self._render_error(e)
        return await super()._handle(request)

    async def _render_error(self, exc):
        # Real API servers say reason=NotFound / AlreadyExists; clients (kube-rs
        # `get_opt`, kubectl) branch on it.
        if isinstance(exc, kmock.KubernetesNotFoundError):
            exc = kmock.KubernetesError(status=404, reason='NotFound', message=exc.message or 'not found')
        elif isinstance(exc, kmock.KubernetesError) and exc.status == 409 and not isinstance(exc, Conflict):
            exc = kmock.KubernetesError(status=409, reason='AlreadyExists', message=exc.message or 'already exists')
        return await super()._render_error(exc)

    async def _serve_version(self, request):
        # The core group's groupVersion is `v1`, not `/v1`; subresources carry
        # no short names (else kubectl finds `tgp` ambiguous).
        result = await super()._serve_version(request)
        if request.resource.group == '':
            result['groupVersion'] = request.resource.version
        for r in result['resources']:
            if '/' in r['name']:
                r['shortNames'], r['categories'] = [], []
        return result

    async def _serve_list(self, request):
        # kubectl needs `kind`/`apiVersion` on lists.
        result = await super()._serve_list(request)
        res = request.resource
        gv = f"{res.group}/{res.version}" if res.group else res.version
        kind = RESOURCES.get(f"{gv}/{res.plural}", {}).get('kind', 'Object')
        return dict(result, apiVersion=gv, kind=f"{kind}List")

    def _current(self, request):
        key = (request.resource, request.namespace, request.name)
        if key in self.objects and not self.objects[key].deleted:
            return copy.deepcopy(self.objects[key].raw)
        return None

    def _stamp_new(self, request, obj):
        meta = obj.setdefault('metadata', {})
        if request.namespace and not meta.get('namespace'):
            meta['namespace'] = request.namespace
        meta.setdefault('uid', str(uuid.uuid4()))
        meta.setdefault('creationTimestamp', _now())
        meta['generation'] = 1
        meta['resourceVersion'] = str(next(_rv))
        obj.pop('status', None) if request.resource.plural in ('policyprofiles', 'approvals', 'runcancellations') else None
        return obj

    def _rewrite(self, request):
        method = request.method
        if method == enums.method.POST and request.resource is not None and isinstance(request.data, dict):
            return attrs.evolve(request, data=self._stamp_new(request, copy.deepcopy(request.data)))
        if method not in (enums.method.PUT, enums.method.PATCH) or request.resource is None:
            return request
        current = self._current(request)
        ctype = request.headers.get('Content-Type', '').split(';')[0]
        body = request.data
        if current is None:
            if method == enums.method.PATCH and ctype == 'application/apply-patch+yaml':
                obj = self._stamp_new(request, copy.deepcopy(body))
                obj['metadata']['name'] = request.name
                return attrs.evolve(request, data=obj, action=enums.action.CREATE, name=None)
            return request  # the emulator answers 404
        if method == enums.method.PUT:
            want = (body.get('metadata') or {}).get('resourceVersion')
            if want and want != current['metadata'].get('resourceVersion'):
                raise Conflict(status=409, reason='Conflict', message='the object has been modified')
            new = copy.deepcopy(body)
        elif ctype == 'application/json-patch+json':
            # As in the API server: `test` against null passes for a missing member.
            ops = [op for op in body if not (op.get('op') == 'test' and op.get('value') is None
                                             and jsonpatch.JsonPointer(op['path']).resolve(current, None) is None)]
            new = jsonpatch.apply_patch(current, ops)
        else:  # merge patch, strategic merge (approximated), server-side apply (approximated)
            new = _merge(current, body)
        if request.subresource == 'status':
            new = dict(current, status=new.get('status'))
        meta = new.setdefault('metadata', {})
        for k in ('uid', 'creationTimestamp', 'namespace', 'name'):
            if k in current.get('metadata', {}):
                meta[k] = current['metadata'][k]
        if 'deletionTimestamp' in current.get('metadata', {}):
            meta['deletionTimestamp'] = current['metadata']['deletionTimestamp']
        gen = current['metadata'].get('generation', 1)
        meta['generation'] = gen + 1 if new.get('spec') != current.get('spec') else gen
        meta['resourceVersion'] = str(next(_rv))
        return attrs.evolve(request, data=_replacement(current, new), action=enums.action.UPDATE)


async def main():
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        for key, info in RESOURCES.items():
            info = dict(info)
            info.setdefault('namespaced', True)
            emulator.resources[key] = kmock.ResourceInfo(verbs=VERBS, **info)
        print(f'PORT {server.port}', flush=True)
        await asyncio.Event().wait()


if __name__ == '__main__':
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
