"""A task's share of the re-verification rate: what starts now and when the rest is due again."""

from __future__ import annotations

import pytest

from scrutiny.settings.sections import CheckerSection
from scrutiny.streaming.checker.job import reverify_per_task
from scrutiny.streaming.checker.reverify_budget import ReverifyBudget

pytestmark = pytest.mark.unit


def test_beyond_the_share_ledgers_are_put_off_at_the_rate_over_the_next_batches() -> None:
    budget = ReverifyBudget(per_batch=3, spacing_ms=1000)
    now, later = budget.split([10, 11], now_ms=0)
    assert now == [10, 11] and later == {}
    now, later = budget.split([12, 13, 14, 15, 16, 17], now_ms=0)  # one left in this batch's share
    assert now == [12]
    assert later == {13: 1000, 14: 1000, 15: 1000, 16: 2000, 17: 2000}
    assert ReverifyBudget(per_batch=0, spacing_ms=1000).split([1, 2, 3], now_ms=0) == ([1, 2, 3], {})


def test_the_share_of_a_task_divides_the_rate_among_the_partitions_of_a_batch() -> None:
    assert reverify_per_task(CheckerSection(reverify_max_per_second=50, trigger_seconds=1, shuffle_partitions=4)) == 13
    assert reverify_per_task(CheckerSection(reverify_max_per_second=0.1, trigger_seconds=1)) == 1
    assert reverify_per_task(CheckerSection(reverify_max_per_second=0)) == 0
