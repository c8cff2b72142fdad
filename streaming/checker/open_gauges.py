"""The gauges of what is broken now, read from the ``open_violations`` table on the driver.

The table is the truth of what is open (the stream and every scan write it), so the gauges are set from its open rows
rather than moved with the stream's own records: they are right from the job's start, after a restart, and with a
scan's rows. They are read again after each micro-batch that opened or resolved a violation, and at least every
``checker.open_violation_gauges_seconds`` otherwise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from scrutiny.connectors.tables.health import TableMissingError, read_open_violations
from scrutiny.core.health_summary import OpenViolation
from scrutiny.streaming.checker.metrics import JobMetrics

log = logging.getLogger(__name__)


class OpenGauges:
    """Sets :class:`JobMetrics`' open-violation gauges from the table under ``data_dir`` (``read``: its reader)."""

    def __init__(
        self,
        metrics: JobMetrics,
        data_dir: str,
        *,
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
        read: Callable[[str], Sequence[OpenViolation]] = read_open_violations,
    ) -> None:
        self.metrics = metrics
        self.data_dir = data_dir
        self.every_s = every_s
        self.clock = clock
        self.read = read
        self._read_at: float | None = None

    def refresh(self, *, changed: bool) -> None:
        """Read the table again if the last batch ``changed`` it or the interval has passed since the last read."""
        now = self.clock()
        if not changed and self._read_at is not None and now - self._read_at < self.every_s:
            return
        self._read_at = now
        try:
            rows = self.read(self.data_dir)
        except TableMissingError:
            rows = []  # nothing was ever found
        except Exception as error:  # whatever the read meets, the gauges keep their last values and the job goes on
            log.warning("the open-violation gauges were not updated: %s", error)
            return
        self.metrics.set_open(rows)
