"""The checker's gauges of what is open now: counts, distinct ledgers and the oldest, by category; fixed labels."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from scrutiny import __version__
from scrutiny.connectors.tables.health import TableMissingError, TableReadError
from scrutiny.core.health_summary import OpenViolation
from scrutiny.core.vocabulary import CLUSTER_LEDGER_ID, FIXED_SEVERITY, Category, Severity
from scrutiny.streaming.checker.metrics import JobMetrics, category_severities
from scrutiny.streaming.checker.open_gauges import OpenGauges

OLDEST = "scrutiny_open_violations_oldest_first_seen_timestamp_seconds"


def violation(ledger: int, category: Category, first_seen_ms: int, severity: Severity | None = None) -> OpenViolation:
    return OpenViolation(ledger, category, severity or FIXED_SEVERITY.get(category, Severity.CRITICAL), first_seen_ms)


def test_every_label_set_exists_at_zero_before_anything_is_open() -> None:
    registry = JobMetrics().registry
    for category, severity in category_severities():
        labels = {"category": category.value, "severity": severity.value}
        assert registry.get_sample_value("scrutiny_open_violations", labels) == 0
    assert len(category_severities()) == len(FIXED_SEVERITY) + 3 * (len(Category) - len(FIXED_SEVERITY))
    assert registry.get_sample_value(OLDEST, {"category": "NO_REPLICA"}) is None
    assert registry.get_sample_value("scrutiny_build_info", {"version": __version__}) == 1
    assert registry.get_sample_value("process_resident_memory_bytes") is not None


def test_cluster_findings_count_as_violations_but_name_no_ledger() -> None:
    metrics = JobMetrics()
    metrics.set_open(
        [
            violation(7, Category.MISSING_REPLICA, 5_000, Severity.WARNING),
            violation(7, Category.MISSING_REPLICA, 3_000, Severity.CRITICAL),
            violation(CLUSTER_LEDGER_ID, Category.BOOKIE_LOST, 9_000),
        ]
    )
    registry = metrics.registry
    assert registry.get_sample_value("scrutiny_violating_ledgers", {"category": "MISSING_REPLICA"}) == 1
    assert registry.get_sample_value(OLDEST, {"category": "MISSING_REPLICA"}) == 3.0
    assert (
        registry.get_sample_value("scrutiny_open_violations", {"category": "BOOKIE_LOST", "severity": "warning"}) == 1
    )
    assert registry.get_sample_value("scrutiny_violating_ledgers", {"category": "BOOKIE_LOST"}) == 0


_rows = st.lists(
    st.builds(
        violation,
        st.sampled_from([CLUSTER_LEDGER_ID, 1, 2, 3, 40]),
        st.sampled_from(list(Category)),
        st.integers(0, 10**12),
        st.sampled_from(list(Severity)),
    ),
    max_size=12,
)


@given(st.lists(_rows, min_size=1, max_size=3))
def test_the_gauges_equal_a_plain_count_of_the_last_rows_given(snapshots: list[list[OpenViolation]]) -> None:
    metrics = JobMetrics()
    for rows in snapshots:  # each read of the table replaces the one before
        metrics.set_open(rows)
    rows = snapshots[-1]
    registry = metrics.registry
    for category in Category:
        mine = [r for r in rows if r.category is category]
        for severity in Severity:
            expected = sum(1 for r in mine if r.severity is severity)
            got = registry.get_sample_value(
                "scrutiny_open_violations", {"category": category.value, "severity": severity.value}
            )
            assert (got or 0) == expected
        ledgers = {r.ledger_id for r in mine} - {CLUSTER_LEDGER_ID}
        assert registry.get_sample_value("scrutiny_violating_ledgers", {"category": category.value}) == len(ledgers)
        oldest = registry.get_sample_value(OLDEST, {"category": category.value})
        assert oldest == (min(r.first_seen_ms for r in mine) / 1000 if mine else None)


def test_no_label_value_is_an_id() -> None:
    metrics = JobMetrics()
    metrics.set_open([violation(123456789, Category.NO_REPLICA, 1_000)])
    exposition = generate_latest(metrics.registry).decode()
    assert "123456789" not in exposition


def test_the_table_is_read_after_a_change_when_due_and_a_failed_read_keeps_the_last_values() -> None:
    now = [0.0]
    answers: list[list[OpenViolation] | Exception] = []
    reads: list[str] = []

    def read(data_dir: str) -> list[OpenViolation]:
        reads.append(data_dir)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    metrics = JobMetrics()
    gauges = OpenGauges(metrics, "tables", every_s=60, clock=lambda: now[0], read=read)
    answers.append([violation(5, Category.NO_REPLICA, 1_000)])
    gauges.refresh(changed=False)  # the first refresh always reads
    now[0] = 30
    gauges.refresh(changed=False)  # nothing changed, not due: no read
    assert reads == ["tables"]
    answers.append(TableReadError("open_violations: unreadable"))
    gauges.refresh(changed=True)  # a change: read (and fail)
    labels = {"category": "NO_REPLICA", "severity": "critical"}
    assert metrics.registry.get_sample_value("scrutiny_open_violations", labels) == 1  # the last values stay
    answers.append(OSError("disk gone"))
    now[0] = 95
    gauges.refresh(changed=False)  # due: read (any error is survived: the gauges never stop the job)
    answers.append(TableMissingError("no table"))
    gauges.refresh(changed=True)
    assert len(reads) == 4 and metrics.registry.get_sample_value("scrutiny_open_violations", labels) == 0
