"""The Python client spells the approval status as the Rust contract does:
the CLI's refusal of an unknown status lists the contract's names, and the
client's APPROVAL_STATUSES must be exactly those (it once lacked
`cancelled`). It knows every error code of the agent API: the table in
docs/sidecar.md, which a Rust test keeps equal to `toolgate_contract::errors`;
and its limits and names are the contract's (the agent-api-limits table,
kept equal to `toolgate_contract::agent_api` the same way)."""
import json
import pathlib
import re
import subprocess

import toolgate
from toolgate.errors import ToolgateError, error_class

ROOT = pathlib.Path(__file__).resolve().parents[2]

from .conftest import _toolgate_bin


def test_client_statuses_are_the_contracts(tmp_path):
    out = subprocess.run(
        [str(_toolgate_bin()), 'approvals', 'list', '--status', 'bogus',
         '--database', f"sqlite://{tmp_path / 'x.db'}?mode=rwc"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out
    error = json.loads(out.stdout)['error']
    names = re.search(r'\(one of ([a-z, ]+)\)', error['message'])
    assert names, error
    assert tuple(names.group(1).split(', ')) == toolgate.APPROVAL_STATUSES


def _contract_codes():
    text = (ROOT / "docs" / "sidecar.md").read_text()
    table = text.split("<!-- error-codes:begin -->", 1)[1].split("<!-- error-codes:end -->", 1)[0]
    return {m.group(2): int(m.group(1)) for m in re.finditer(r"^\| (\d{3}) \| `([a-z_]+)` \|", table, re.M)}


# Answered before `error_class` is consulted: the verdict in the body
# becomes Denied / ApprovalRequired (see toolgate._ops).
_VERDICT_CODES = {"policy_denied", "approval_required"}
# Decision reasons the client maps too (a deny verdict's reason, not an
# error code), documented in docs/policy.md.
_REASONS = {"no_bundle", "bundle_expired", "audit_unavailable"}


def test_the_client_knows_every_error_code_of_the_contract():
    codes = _contract_codes()
    assert len(codes) > 30 and codes["body_too_large"] == 413, codes
    unknown = [c for c in codes if c not in _VERDICT_CODES and error_class(c) is ToolgateError]
    assert not unknown, f"codes the client maps to nothing specific: {unknown}"
    from toolgate import errors
    stale = set(errors._BY_CODE) - set(codes) - _REASONS
    assert not stale, f"codes the client knows that the sidecar no longer sends: {stale}"


def _contract_limits():
    text = (ROOT / "docs" / "sidecar.md").read_text()
    table = text.split("<!-- agent-api-limits:begin -->", 1)[1].split("<!-- agent-api-limits:end -->", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z_:A-Z]+)` \| `([^`]+)` \|", table, re.M)}


def test_the_client_s_limits_and_names_are_the_contract_s():
    from toolgate import _ops
    limits = _contract_limits()
    assert int(limits["agent_api::MAX_WAIT_SECONDS"]) == _ops.MAX_WAIT_SECONDS
    # Header names are case-insensitive; the contract spells it lowercase.
    assert limits["agent_api::RUN_ID_HEADER"] == toolgate.RUN_ID_HEADER.lower()
    assert limits["env::URL"] == toolgate.URL_ENV
