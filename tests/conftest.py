"""Shared pytest configuration: every test is marked unit unless it says integration.

The fixtures of real servers (ZooKeeper, Kafka, Spark) live in :mod:`tests.support.servers`, loaded here for the
whole suite; they start a server only when a test asks for it.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.support.servers", "tests.support.checker_fixtures"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)
