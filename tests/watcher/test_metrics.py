"""The watcher's metrics: fixed label values for its errors, buckets that fit a long resync, the common ones."""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss

from scrutiny import __version__
from scrutiny.connectors.kafka.publisher import PublishError
from scrutiny.core.errors import FormatError
from scrutiny.watcher.daemon import LeadershipLost, _error_place
from scrutiny.watcher.metrics import ERROR_PLACES, WatcherMetrics


def test_errors_are_counted_under_a_fixed_set_of_places() -> None:
    errors = [
        ConnectionLoss(),
        PublishError("broker down"),
        LeadershipLost("lost"),
        FormatError("ledger", "bad bytes"),
        ValueError(),
    ]
    assert [_error_place(e) for e in errors] == ["zookeeper", "kafka", "leadership", "other", "other"]
    registry = WatcherMetrics().registry
    assert all(registry.get_sample_value("scrutiny_watcher_errors_total", {"where": p}) == 0 for p in ERROR_PLACES)


def test_a_resync_of_twenty_minutes_lands_in_a_bucket_of_its_own() -> None:
    metrics = WatcherMetrics()
    metrics.resync_duration.observe(1100.0)
    registry = metrics.registry
    below = registry.get_sample_value("scrutiny_watcher_resync_duration_seconds_bucket", {"le": "600.0"})
    within = registry.get_sample_value("scrutiny_watcher_resync_duration_seconds_bucket", {"le": "1200.0"})
    assert (below, within) == (0, 1)
    assert registry.get_sample_value("scrutiny_build_info", {"version": __version__}) == 1
