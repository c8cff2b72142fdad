"""The checker's lag: records in Kafka past what the last micro-batch read, from Spark's progress report."""

from __future__ import annotations

import json

import pytest

from scrutiny.streaming.checker.job import lag_records

pytestmark = pytest.mark.unit


def progress(latest: object, end: object) -> dict[str, object]:
    return {"sources": [{"latestOffset": json.dumps(latest), "endOffset": json.dumps(end)}]}


def test_lag_is_the_sum_over_partitions_of_latest_minus_read() -> None:
    report = progress({"t": {"0": 120, "1": 40}}, {"t": {"0": 100, "1": 40}})  # Spark's Kafka source offsets
    assert lag_records(report) == 20


def test_a_partition_not_read_yet_counts_whole_and_none_is_negative() -> None:
    report = progress({"t": {"0": 5, "1": 7}}, {"t": {"0": 9}})
    assert lag_records(report) == 7


def test_no_report_or_no_offsets_is_unknown() -> None:
    assert lag_records(None) is None
    assert lag_records({"sources": []}) is None
    assert lag_records({"sources": [{"latestOffset": None, "endOffset": None}]}) is None
    assert lag_records({"sources": [{"latestOffset": "not json", "endOffset": "{}"}]}) is None
    assert lag_records(progress({"a": {"0": 1}, "b": {"0": 2}}, {})) is None  # one topic only
