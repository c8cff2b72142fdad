"""Shared pytest configuration: every test is marked unit unless it says integration.

Hypothesis runs without its per-example deadline: the property tests assert what the code computes, never how fast
(speed is measured in ``bench/``), and a loaded 2-core machine can take longer than the default 200 ms for one example.

The fixtures of real servers (ZooKeeper, Kafka, Spark) live in :mod:`tests.support.servers`, loaded here for the
whole suite; they start a server only when a test asks for it.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

settings.register_profile("scrutiny", deadline=None)
settings.load_profile("scrutiny")

pytest_plugins = ["tests.support.servers", "tests.support.checker_fixtures"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)
