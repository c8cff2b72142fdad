"""The collector meter counts the collections made while it measures, on any thread, and only those."""

from __future__ import annotations

import gc
import threading

import pytest

from bench.gc_meter import CollectorMeter

pytestmark = pytest.mark.unit


def test_the_meter_counts_each_generation_s_collections_on_any_thread_while_measuring() -> None:
    meter = CollectorMeter()
    gc.disable()  # only the collections asked for below (an allocation could start one)
    try:
        gc.collect()  # not measured
        with meter.measuring():
            gc.collect()
            gc.collect(0)
            thread = threading.Thread(target=gc.collect, args=(1,))
            thread.start()
            thread.join()
        gc.collect()  # not measured either
    finally:
        gc.enable()
    assert meter.collections == {2: 1, 0: 1, 1: 1}
    assert meter.total_s == sum(meter.seconds.values()) >= 0
    summary = meter.summary(10.0)
    assert summary.endswith(")") and all(f"gen {g}: 1 in " in summary for g in (0, 1, 2)), summary
