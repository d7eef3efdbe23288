"""The Python client spells the approval status as the Rust contract does:
the CLI's refusal of an unknown status lists the contract's names, and the
client's APPROVAL_STATUSES must be exactly those (it once lacked
`cancelled`)."""
import json
import re
import subprocess

import toolgate

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
