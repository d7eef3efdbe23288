"""Session fixtures of the chart tests: the chart, loaded once, and its
objects rendered with each of VALUE_SETS."""
from __future__ import annotations

from typing import Any, Iterable

import pytest


@pytest.fixture(scope="session")
def chart() -> Iterable[Any]:
    # Imported here, not at the top: chart_helpers skips (or, under CI,
    # fails) the test module that imports it when the chart tools are
    # missing, which a conftest must not do for the whole directory.
    from chart_helpers import CHART, helm

    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def rendered(chart) -> dict[str, list[dict[str, Any]]]:
    from chart_helpers import VALUE_SETS, render

    return {name: render(chart, values) for name, values in VALUE_SETS.items()}
