"""The checker's Prometheus metrics, updated on the driver after every micro-batch."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)


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
        self.resolved = Counter("scrutiny_checker_resolved", "Violations resolved", registry=r)
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
