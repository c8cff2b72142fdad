"""The processor reads the cluster view once per call of Spark's, and afresh at the next call."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from scrutiny.core.verdict import ClusterView
from scrutiny.streaming.checker.processor import LedgerProcessor
from scrutiny.streaming.checker.records import STATS_KEY
from tests.support.processor_fakes import Timers

pytestmark = pytest.mark.unit


class CountingReader:
    """A cluster reader whose view changes at every read."""

    def __init__(self) -> None:
        self.reads = 0

    def get(self) -> Any:
        self.reads += 1
        return SimpleNamespace(view=ClusterView(writable=frozenset({f"bookie-{self.reads}:3181"})))


def test_one_read_per_call_and_a_new_one_at_the_next() -> None:
    reader = CountingReader()
    config: Any = SimpleNamespace(
        reverify_per_task=1, reverify_spacing_ms=0, source="test", cluster_reader=lambda: reader
    )
    processor = LedgerProcessor(config)
    first = processor._cluster()
    assert processor._cluster() is first and reader.reads == 1  # every ledger of the call sees the same view
    list(processor.handleInputRows((STATS_KEY,), iter([]), Timers(0)))  # type: ignore[arg-type]
    assert processor._cluster() != first and reader.reads == 2  # a new call looks again: a bookie registered since
