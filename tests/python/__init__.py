"""Tests of the Python client (clients/python) against a real sidecar."""
