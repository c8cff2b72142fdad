"""The checker's Prometheus metrics, updated on the driver after every micro-batch.

Counters say what the job did (events, checks, findings and resolutions by category); the gauges of
``open_violations`` say what is broken now, and are set from the table itself (:meth:`JobMetrics.set_open`), so a
restarted job and a scan's rows count the same. No ledger, topic or bookie id is ever a label.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from scrutiny.component_metrics import register_component_metrics
from scrutiny.core.health_summary import OpenViolation
from scrutiny.core.vocabulary import CLUSTER_LEDGER_ID, FIXED_SEVERITY, Category, Severity

#: A micro-batch: a second or two when steady, minutes for a first batch after a long stop or a resync of millions.
_BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def category_severities() -> list[tuple[Category, Severity]]:
    """Every (category, severity) a finding can have: the label sets of ``scrutiny_open_violations``."""
    return [(c, s) for c in Category for s in Severity if FIXED_SEVERITY.get(c, s) is s]


class JobMetrics:
    """Batch duration, events, checks, RPCs, retries pending, violations by category, rejected records, lag,
    liveness, ledgers by the age of their last verification."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.batch_duration = Histogram(
            "scrutiny_checker_batch_duration_seconds", "Micro-batch duration", buckets=_BATCH_BUCKETS, registry=r
        )
        self.events = Counter("scrutiny_checker_events", "Events read from Kafka", registry=r)
        self.checks = Counter("scrutiny_checker_checks", "Completed ledger checks, by verdict", ["verdict"], registry=r)
        self.rpcs = Counter("scrutiny_checker_rpcs", "Listing requests or agent calls sent to bookies", registry=r)
        self.retries_pending = Gauge(
            "scrutiny_checker_retries_pending", "Ledgers waiting for a delayed re-check", registry=r
        )
        self.violations = Counter(
            "scrutiny_checker_violations", "Violations found, by category", ["category"], registry=r
        )
        self.rejected = Counter(
            "scrutiny_checker_rejected_events",
            "Records of the topic skipped because the checker cannot use them, by reason",
            ["reason"],
            registry=r,
        )
        self.resolved = Counter(
            "scrutiny_checker_resolved", "Violations resolved, by category", ["category"], registry=r
        )
        self.lag = Gauge("scrutiny_checker_lag_records", "Records in Kafka not yet processed", registry=r)
        self.last_batch = Gauge(
            "scrutiny_checker_last_batch_timestamp_seconds", "When the last micro-batch finished", registry=r
        )
        self.batch_id = Gauge("scrutiny_checker_batch_id", "Id of the last micro-batch written", registry=r)
        self.verified_ledgers = Gauge(
            "scrutiny_checker_verified_ledgers",
            "Ledgers by the age of their last verification, in classes of the re-verification interval (0-25%, "
            "25-50%, 50-75%, 75-100%, late: within the grace, overdue: past it)",
            ["age"],
            registry=r,
        )
        self.oldest_verification_age = Gauge(
            "scrutiny_checker_oldest_verification_age_seconds",
            "Age of the oldest last verification of a ledger (0: none verified yet)",
            registry=r,
        )
        self.open_violations = Gauge(
            "scrutiny_open_violations",
            "Violations open now (rows of open_violations not resolved), by category and severity",
            ["category", "severity"],
            registry=r,
        )
        self.violating_ledgers = Gauge(
            "scrutiny_violating_ledgers",
            "Distinct ledgers with an open violation, by category (cluster-level findings count none)",
            ["category"],
            registry=r,
        )
        self.oldest_first_seen = Gauge(
            "scrutiny_open_violations_oldest_first_seen_timestamp_seconds",
            "When the oldest open violation of the category was first seen (absent: none open)",
            ["category"],
            registry=r,
        )
        for category, severity in category_severities():
            self.open_violations.labels(category.value, severity.value)
        for category in Category:
            self.violating_ledgers.labels(category.value)
        self._dated: set[Category] = set()  # the categories whose oldest first_seen is set
        self._counted: set[tuple[Category, Severity]] = set()  # the label sets counted by the last read
        register_component_metrics(r)

    def set_open(self, rows: Iterable[OpenViolation]) -> None:
        """Set the gauges of what is open now from the open rows of ``open_violations`` (all of them)."""
        counts: Tally[tuple[Category, Severity]] = Tally()
        ledgers: dict[Category, set[int]] = {c: set() for c in Category}
        oldest: dict[Category, int] = {}
        for row in rows:
            counts[(row.category, row.severity)] += 1
            if row.ledger_id != CLUSTER_LEDGER_ID:
                ledgers[row.category].add(row.ledger_id)
            oldest[row.category] = min(oldest.get(row.category, row.first_seen_ms), row.first_seen_ms)
        for category, severity in {*category_severities(), *self._counted, *counts}:
            self.open_violations.labels(category.value, severity.value).set(counts[(category, severity)])
        self._counted = set(counts)
        for category, ids in ledgers.items():
            self.violating_ledgers.labels(category.value).set(len(ids))
            if category in oldest:
                self.oldest_first_seen.labels(category.value).set(oldest[category] / 1000)
            elif category in self._dated:
                self.oldest_first_seen.remove(category.value)
        self._dated = set(oldest)
