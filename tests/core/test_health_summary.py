"""The health summary core: counts, worst ledgers, status, layout and JSON, against a simple reference."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.health_summary import (
    DEFAULT_FAIL_ON,
    CheckerFigures,
    Figures,
    HealthSummaryError,
    OpenViolation,
    as_json_dict,
    exit_code,
    render,
    summarize,
)
from scrutiny.core.utc_text import format_duration_ms
from scrutiny.core.vocabulary import Category, Severity

T0_MS = 1_772_366_400_000  # 2026-03-01T12:00:00Z
MINUTE_MS = 60_000


def finding(
    ledger_id: int,
    category: Category = Category.NO_REPLICA,
    severity: Severity = Severity.CRITICAL,
    *,
    entries: int | None = None,
    first_seen_ms: int = T0_MS,
    **extra: object,
) -> OpenViolation:
    return OpenViolation(
        ledger_id=ledger_id,
        category=category,
        severity=severity,
        first_seen_ms=first_seen_ms,
        entry_count=entries,
        **extra,  # type: ignore[arg-type]
    )


violations = st.builds(
    OpenViolation,
    ledger_id=st.integers(-1, 12),  # -1: a cluster-level finding
    category=st.sampled_from(Category),
    severity=st.sampled_from(Severity),
    first_seen_ms=st.integers(T0_MS - 10**9, T0_MS),
    bookie=st.none() | st.sampled_from(["b1:3181", "b2:3181"]),
    segment_first_entry=st.none() | st.integers(0, 100),
    entry_count=st.none() | st.integers(0, 10_000),
    pulsar_topic=st.none() | st.sampled_from(["persistent://t/n/a", "persistent://t/n/b"]),
    details=st.none() | st.text(max_size=40),
)


def reference_status(rows: list[OpenViolation], fail_on: Severity) -> str:
    order = [Severity.INFO, Severity.WARNING, Severity.CRITICAL]
    failing = any(order.index(r.severity) >= order.index(fail_on) for r in rows)
    return "UNHEALTHY" if failing else "HEALTHY"


def reference_data_loss(row: OpenViolation) -> bool:
    """docs/architecture.md, "Data loss": a critical NO_REPLICA, ENTRIES_BEYOND_LAST_ENTRY or METADATA_UNREADABLE."""
    lost = {"NO_REPLICA", "ENTRIES_BEYOND_LAST_ENTRY", "METADATA_UNREADABLE"}
    return row.severity.value == "critical" and row.category.value in lost


def reference_ledger_order(rows: list[OpenViolation]) -> list[int]:
    """Ledgers by worst severity, data loss first, most entries (max of findings), oldest first seen, id."""
    order = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}
    ledgers = sorted({r.ledger_id for r in rows if r.ledger_id != -1})

    def key(ledger_id: int) -> tuple[int, int, int, int, int]:
        mine = [r for r in rows if r.ledger_id == ledger_id]
        counts = [r.entry_count for r in mine if r.entry_count is not None]
        return (
            min(order[r.severity] for r in mine),
            0 if any(reference_data_loss(r) for r in mine) else 1,
            -(max(counts) if counts else -1),
            min(r.first_seen_ms for r in mine),
            ledger_id,
        )

    return sorted(ledgers, key=key)


@settings(max_examples=200, deadline=None)
@given(st.lists(violations, max_size=30), st.sampled_from(Severity), st.integers(0, 15))
def test_counts_status_and_order_match_the_reference(rows: list[OpenViolation], fail_on: Severity, worst: int) -> None:
    summary = summarize(rows, fail_on=fail_on, worst=worst)
    assert dict(summary.counts) == dict(Counter((r.category, r.severity) for r in rows))
    assert summary.by_severity == {s: sum(1 for r in rows if r.severity is s) for s in Severity}
    assert summary.open_violations == len(rows)
    assert summary.ledgers_affected == len({r.ledger_id for r in rows if r.ledger_id != -1})
    assert summary.data_loss_ledgers == len({r.ledger_id for r in rows if reference_data_loss(r) and r.ledger_id != -1})
    assert sorted(map(repr, summary.cluster)) == sorted(repr(r) for r in rows if r.ledger_id == -1)
    assert summary.status == reference_status(rows, fail_on)
    assert exit_code(summary) == (0 if summary.status == "HEALTHY" else 1)
    assert [ledger.ledger_id for ledger in summary.worst] == reference_ledger_order(rows)[:worst]
    for ledger in summary.worst:
        assert sorted(map(repr, ledger.findings)) == sorted(repr(r) for r in rows if r.ledger_id == ledger.ledger_id)
    assert render(summary).splitlines()[-1] == f"Status: {summary.status}"
    document = as_json_dict(summary)
    assert document["status"] == summary.status
    by_category = document["by_category"]
    assert isinstance(by_category, dict)
    assert sum(sum(counts.values()) for counts in by_category.values()) == len(rows)


def test_no_violation_is_healthy_at_every_threshold() -> None:
    for fail_on in Severity:
        summary = summarize([], Figures(ledgers_checked=5), fail_on=fail_on)
        assert summary.healthy and exit_code(summary) == 0
        assert render(summary).splitlines()[-1] == "Status: HEALTHY"


@pytest.mark.parametrize("rows", [[], [finding(1)]])
def test_an_interrupted_scan_is_neither_healthy_nor_unhealthy(rows: list[OpenViolation]) -> None:
    stopped = "the scan was stopped after 100 of 400 ledgers"
    summary = summarize(rows, Figures(ledgers_checked=100, interrupted=stopped))
    assert summary.status == "INTERRUPTED" and exit_code(summary) == 2
    lines = render(summary).splitlines()
    assert lines[-1] == "Status: INTERRUPTED" and f"WARNING: incomplete: {stopped}" in lines
    assert as_json_dict(summary)["status"] == "INTERRUPTED"


def test_the_threshold_decides_which_severities_fail() -> None:
    warning_only = [finding(1, Category.BELOW_WRITE_QUORUM, Severity.WARNING)]
    assert DEFAULT_FAIL_ON is Severity.CRITICAL
    assert summarize(warning_only).status == "HEALTHY"
    assert summarize(warning_only, fail_on=Severity.WARNING).status == "UNHEALTHY"
    assert summarize(warning_only, fail_on=Severity.INFO).status == "UNHEALTHY"
    assert summarize([finding(1)], fail_on=Severity.CRITICAL).status == "UNHEALTHY"


def test_worst_ledgers_rank_severity_then_data_loss_then_entries_then_age() -> None:
    rows = [
        finding(1, Category.BELOW_WRITE_QUORUM, Severity.WARNING, entries=10**6),
        finding(2, Category.BELOW_ACK_QUORUM, Severity.CRITICAL, entries=500),
        finding(3, Category.NO_REPLICA, Severity.CRITICAL, entries=1),
        finding(4, Category.BELOW_ACK_QUORUM, Severity.CRITICAL, entries=500, first_seen_ms=T0_MS - MINUTE_MS),
        finding(5, Category.BELOW_ACK_QUORUM, Severity.CRITICAL, entries=900),
    ]
    summary = summarize(rows, worst=4)
    assert [ledger.ledger_id for ledger in summary.worst] == [3, 5, 4, 2]
    assert summary.worst[0].data_loss and not summary.worst[1].data_loss


def test_entries_affected_is_the_largest_finding_not_a_sum() -> None:
    rows = [
        finding(7, Category.NO_REPLICA, entries=10),
        finding(7, Category.MISSING_REPLICA, entries=10, bookie="b1:3181"),
        finding(7, Category.MISSING_REPLICA, entries=12, bookie="b2:3181"),
    ]
    (ledger,) = summarize(rows).worst
    assert ledger.entries_affected == 12
    missing = Category.MISSING_REPLICA
    assert [f.category for f in ledger.findings] == [Category.NO_REPLICA, missing, missing]


def test_render_is_aligned_and_keeps_values_on_one_line() -> None:
    rows = [
        finding(
            42, Category.NO_REPLICA, entries=10, pulsar_topic="persistent://p/n/orders", details="a\nStatus: HEALTHY"
        ),
        finding(9, Category.ACK_QUORUM_ONE, Severity.INFO),
    ]
    text = render(summarize(rows, Figures(ledgers_checked=100, seconds_taken=1.5)))
    lines = text.splitlines()
    assert lines[-1] == "Status: UNHEALTHY"
    assert sum(1 for line in lines if line.startswith("Status:")) == 1
    assert " Ledgers checked:            100" in lines
    assert " Open violations:            2" in lines
    assert " Time taken:                 1.500 s" in lines
    assert any("ledger 42, critical, DATA LOSS, 10 entries, first seen 2026-03-01T12:00:00Z" in line for line in lines)
    assert any("a Status: HEALTHY" in line for line in lines)  # the newline in details is collapsed
    header = next(line for line in lines if line.startswith(" category"))
    row = next(line for line in lines if line.startswith(" NO_REPLICA"))
    assert len(header) == len(row)


def test_a_stalled_stream_is_warned_about_but_does_not_change_the_status() -> None:
    checker = CheckerFigures(last_batch_ms=T0_MS, last_batch_id=7, last_batch_source="stream", lag_records=3)
    stalled = summarize([], Figures(now_ms=T0_MS + 12 * MINUTE_MS, checker=checker))
    assert stalled.warnings == ("no batch for 12 min: the streaming checker looks stalled",)
    assert stalled.healthy
    assert "WARNING: no batch for 12 min: the streaming checker looks stalled" in render(stalled).splitlines()
    assert as_json_dict(stalled)["checker"] == {
        "last_batch_id": 7,
        "last_batch_source": "stream",
        "last_batch_at": "2026-03-01T12:00:00Z",
        "last_batch_age_seconds": 720.0,
        "lag_records": 3,
        "batches_last_10_minutes": 0,
        "stalled": True,
        "rejected_events": 0,
    }
    fresh = summarize([], Figures(now_ms=T0_MS + MINUTE_MS, checker=checker))
    assert fresh.warnings == ()
    scan = CheckerFigures(last_batch_ms=T0_MS, last_batch_id=0, last_batch_source="scan")
    assert summarize([], Figures(now_ms=T0_MS + 10**8, checker=scan)).warnings == ()
    assert summarize([], Figures(now_ms=T0_MS, checker=CheckerFigures())).warnings[0].startswith("no checker batch")


#: The JSON keys docs/report.md documents, in order (a contract).
DOCUMENTED_KEYS = [
    "status",
    "fail_on",
    "ledgers_checked",
    "ledgers_affected",
    "data_loss_ledgers",
    "open_violations",
    "by_severity",
    "by_category",
    "worst_ledgers",
    "cluster_findings",
    "checker",
    "seconds_taken",
    "generated_at",
    "warnings",
]


def test_json_document_has_the_documented_keys() -> None:
    document = as_json_dict(summarize([finding(1, entries=3)], Figures(ledgers_checked=4, now_ms=T0_MS), worst=1))
    assert list(document) == DOCUMENTED_KEYS
    assert document["by_category"] == {"NO_REPLICA": {"critical": 1, "warning": 0, "info": 0}}
    assert document["generated_at"] == "2026-03-01T12:00:00Z"
    ledgers = document["worst_ledgers"]
    assert isinstance(ledgers, list) and len(ledgers) == 1
    ledger: dict[str, Any] = ledgers[0]
    assert set(ledger) == {
        "ledger_id",
        "worst_severity",
        "data_loss",
        "entries_affected",
        "first_seen",
        "pulsar_topic",
        "findings",
    }
    assert set(ledger["findings"][0]) == {
        "category",
        "severity",
        "bookie",
        "segment_first_entry",
        "entry_count",
        "first_seen",
        "details",
    }


def test_rows_from_mappings_are_checked() -> None:
    row: dict[str, object] = {"ledger_id": 3, "category": "NO_REPLICA", "severity": "critical", "first_seen": T0_MS}
    assert OpenViolation.from_mapping(row) == finding(3)
    with pytest.raises(HealthSummaryError, match="category"):
        OpenViolation.from_mapping({**row, "category": "NOPE"})
    with pytest.raises(HealthSummaryError, match="severity"):
        OpenViolation.from_mapping({**row, "severity": "fatal"})
    with pytest.raises(HealthSummaryError, match="first_seen"):
        OpenViolation.from_mapping({**row, "first_seen": None})
    with pytest.raises(HealthSummaryError):
        summarize([], worst=-1)


def test_durations_read_like_people_write_them() -> None:
    assert format_duration_ms(42_000) == "42 s"
    assert format_duration_ms(12 * MINUTE_MS) == "12 min"
    assert format_duration_ms(185 * MINUTE_MS) == "3 h 5 min"
    assert format_duration_ms(52 * 60 * MINUTE_MS) == "2 d 4 h"


def test_records_the_checker_skipped_are_counted_and_warned_about_without_changing_the_status() -> None:
    checker = CheckerFigures(
        last_batch_ms=T0_MS, last_batch_id=7, last_batch_source="stream", rejected_events=3, last_rejected_ms=T0_MS
    )
    summary = summarize([], Figures(now_ms=T0_MS + MINUTE_MS, checker=checker))
    assert summary.healthy
    assert summary.warnings == ("3 record(s) of the topic could not be used and were skipped (table rejected_events)",)
    lines = render(summary).splitlines()
    assert " Rejected records:           3, last 2026-03-01T12:00:00Z" in lines
    assert as_json_dict(summary)["checker"]["rejected_events"] == 3  # type: ignore[index]
    clean = summarize([], Figures(now_ms=T0_MS + MINUTE_MS, checker=replace(checker, rejected_events=0)))
    assert clean.warnings == () and not any("Rejected" in line for line in render(clean).splitlines())


def test_a_lost_bookie_is_a_cluster_finding_not_a_ledger() -> None:
    lost = OpenViolation(
        -1, Category.BOOKIE_LOST, Severity.WARNING, T0_MS - 60_000, bookie="b2:3181", details="held 4 ledger(s)"
    )
    summary = summarize([lost, finding(7, Category.UNDER_REPLICATION_NOT_MARKED, bookie="b2:3181")], worst=5)
    assert (summary.open_violations, summary.ledgers_affected) == (2, 1)
    assert [ledger.ledger_id for ledger in summary.worst] == [7]
    text = render(summary)
    assert "Cluster findings:\n BOOKIE_LOST  warning   bookie b2:3181: held 4 ledger(s), first seen" in text
    assert "ledger -1" not in text
    findings: Any = as_json_dict(summary)["cluster_findings"]
    assert [(f["category"], f["bookie"]) for f in findings] == [("BOOKIE_LOST", "b2:3181")]
