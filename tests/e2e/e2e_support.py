"""What the controller end-to-end test and its fixtures share. A module of
its own, not `conftest`: pytest loads every test directory's conftest.py
under that one bare name, so `from conftest import` could reach another
directory's."""

import pathlib
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def wait_for(what, fn, timeout=30.0, interval=0.25):
    """Polls `fn` until it returns a truthy value; fails with `what` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - report the last error on timeout
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
