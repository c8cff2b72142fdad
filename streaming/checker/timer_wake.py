"""Micro-batches only when there is work: the driver's calendar of the stateful step's timers, and its wake-ups.

Spark runs a micro-batch of this query only when Kafka holds new records (no-data micro-batches are off: with
processing-time timers Spark would otherwise run one every trigger, busy or not, at a few hundred milliseconds of
CPU each). The timers of the stateful step fire in any batch that runs at or after their time, so the driver makes a
batch run when one is due:

* every bucket the stateful step visits reports its earliest registered timer (a "timers" record, or none left);
  :class:`TimerCalendar` keeps bucket → earliest timer, in the checkpoint directory (``scrutiny-timers``) so a
  restarted job knows them too;
* :class:`Waker` publishes a ``TICK`` event to the topic when the earliest timer is due, and at the latest
  ``checker.idle_batch_seconds`` after the last batch (the job's heartbeat: ``checker_runs`` and the metrics stay
  fresh on an idle cluster). A batch triggered by data fires the due timers as well. A batch that is running
  counts as one for the heartbeat: the watcher's TICK, which arrives about as often, starts a batch shortly before
  the heartbeat would be due, and a heartbeat sent then would run a second, needless batch right after it.

A bucket whose reported timer should have fired in a batch (it was due before the batch started) but that the step
did not visit holds no registered timer any more: it is dropped, so a stale entry costs one batch at most.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from scrutiny.core.compact_json import compact_json
from scrutiny.core.errors import ScrutinyError
from scrutiny.streaming.checkpoint_files import CheckpointFiles

log = logging.getLogger(__name__)

#: The file in the checkpoint directory.
CALENDAR_FILE = "scrutiny-timers"
#: The record kind of a bucket's earliest timer (``next_ms``; absent: none registered).
TIMERS_RECORD = "timers"


def timers_record(bucket: int, timers: Iterable[int], at: object) -> dict[str, object]:
    """The "timers" record of a bucket the step visited: its earliest registered timer (None: no timer left)."""
    return {"record": TIMERS_RECORD, "ledger_id": bucket, "at": at, "next_ms": min(timers, default=None)}


class TimerCalendar:
    """Bucket → its earliest registered timer (epoch ms), from the step's "timers" records; ``files`` None: memory."""

    def __init__(self, files: CheckpointFiles | None) -> None:
        self.files = files
        self._next: dict[int, int] = {}
        self._earliest: int | None = None
        kept = files.read(CALENDAR_FILE) if files is not None else None
        if kept is not None:
            self._next = {int(bucket): int(ms) for bucket, ms in json.loads(kept).items()}
            self._earliest = min(self._next.values(), default=None)

    def apply(self, records: Iterable[Mapping[str, object]], *, batch_not_before_ms: int) -> bool:
        """Take a batch's "timers" records; drop the buckets due before ``batch_not_before_ms`` (a time before
        the batch started) that the batch did not visit. True when the calendar changed."""
        reported: dict[int, int | None] = {}
        for record in records:
            if record["record"] == TIMERS_RECORD:
                ledger, at = record["ledger_id"], record.get("next_ms")
                assert isinstance(ledger, int)
                reported[ledger] = at if isinstance(at, int) else None
        stale = [b for b, ms in self._next.items() if ms <= batch_not_before_ms and b not in reported]
        if not reported and not stale:
            return False
        for bucket in stale:
            del self._next[bucket]
        for bucket, ms in reported.items():
            if ms is None:
                self._next.pop(bucket, None)
            else:
                self._next[bucket] = ms
        self._earliest = min(self._next.values(), default=None)
        return True

    def keep(self) -> None:
        """Write the calendar to the checkpoint directory (before the batch commits: a batch run again reports the
        same timers, and assigning them twice changes nothing)."""
        if self.files is not None:
            self.files.write(CALENDAR_FILE, compact_json(self._next).encode())

    def earliest(self) -> int | None:
        """The earliest timer of any bucket (None: no timer)."""
        return self._earliest

    def __len__(self) -> int:
        return len(self._next)


class Waker:
    """Publishes a ``TICK`` when a timer of the calendar is due or the job has been idle ``idle_s`` (a thread)."""

    def __init__(
        self,
        calendar: TimerCalendar,
        send: Callable[[], None],
        *,
        idle_s: float,
        close: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.calendar = calendar
        self.send = send
        self.close = close
        self.alive: Callable[[], bool] = lambda: True  # the query's liveness: the thread ends with the query
        self.idle_s = idle_s
        self.clock = clock
        self.ticks = 0
        self._lock = threading.Lock()
        self._last_batch = clock()
        self._last_start = 0.0  # when the batch running now (or the last one) started
        self._ticked = False  # a tick sent since the last batch ended
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def batch_started(self) -> None:
        """Called by the sink when a batch begins: the heartbeat waits for it (a batch that fails never ends, and
        the heartbeat is then due ``idle_s`` after its start)."""
        with self._lock:
            self._last_start = self.clock()

    def batch_done(self) -> None:
        """Called by the sink once a batch is written: the clock of idleness starts again."""
        with self._lock:
            self._last_batch = self.clock()
            self._ticked = False

    def wake_at(self) -> float:
        """When the next tick is due (epoch seconds)."""
        with self._lock:
            idle = max(self._last_batch, self._last_start) + self.idle_s
        earliest = self.calendar.earliest()
        return idle if earliest is None else min(idle, earliest / 1000)

    def poll(self) -> bool:
        """Send a tick if one is due and none was sent since the last batch; True when sent."""
        if self.clock() < self.wake_at():
            return False
        with self._lock:
            if self._ticked:
                return False
            self._ticked = True
        try:
            self.send()
        except Exception as error:  # the thread must outlive any failure: without it timers wait for the watcher
            level = logging.WARNING if isinstance(error, ScrutinyError | OSError) else logging.ERROR
            log.log(
                level,
                "cannot wake the checker for its timers (%s): trying again",
                error,
                exc_info=level == logging.ERROR,
            )
            with self._lock:
                self._ticked = False
            return False
        self.ticks += 1
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="scrutiny-timer-wake", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread (it also ends by itself once ``alive`` says the query stopped or failed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and self.alive():
                self.poll()
                self._stop.wait(max(0.05, min(0.5, self.wake_at() - self.clock())))
        finally:
            self.close()
