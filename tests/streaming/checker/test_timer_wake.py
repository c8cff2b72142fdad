"""The driver's timer calendar and the wake-ups it makes: what is due, what is stale, what a restart keeps."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
from pyspark.sql import SparkSession

from scrutiny.connectors.kafka.publisher import PublishError
from scrutiny.streaming.checker.timer_wake import CALENDAR_FILE, TimerCalendar, Waker, timers_record
from scrutiny.streaming.checkpoint_files import CheckpointFiles


def report(bucket: int, *timers: int) -> dict[str, object]:
    return timers_record(bucket, timers, at=None)


def test_a_bucket_reports_its_earliest_timer_or_none() -> None:
    assert report(3, 9_000, 2_000, 5_000)["next_ms"] == 2_000
    assert report(3)["next_ms"] is None


def test_the_calendar_takes_each_buckets_last_report() -> None:
    calendar = TimerCalendar(None)
    assert calendar.earliest() is None
    assert calendar.apply([report(1, 5_000), report(2, 7_000)], batch_not_before_ms=0)
    assert calendar.earliest() == 5_000
    # A bucket visited twice in a batch (its events, then its timers): the later report holds.
    assert calendar.apply([report(1, 4_000), report(1, 8_000)], batch_not_before_ms=0)
    assert calendar.earliest() == 7_000
    assert calendar.apply([report(2)], batch_not_before_ms=0)  # no timer left
    assert (calendar.earliest(), len(calendar)) == (8_000, 1)
    assert not calendar.apply([{"record": "check", "ledger_id": 1}], batch_not_before_ms=0)


def test_a_due_bucket_the_batch_did_not_visit_holds_no_timer_any_more() -> None:
    calendar = TimerCalendar(None)
    calendar.apply([report(1, 5_000), report(2, 6_000), report(3, 9_000)], batch_not_before_ms=0)
    # A batch that started at 6,000 or later fired every timer up to then: bucket 2 was visited (a new timer),
    # bucket 1 was not (its timer was gone); bucket 3 is not due yet.
    assert calendar.apply([report(2, 12_000)], batch_not_before_ms=6_500)
    assert (calendar.earliest(), len(calendar)) == (9_000, 2)
    # Nothing reported and nothing stale: no change, nothing to write.
    assert not calendar.apply([], batch_not_before_ms=8_000)
    assert calendar.apply([], batch_not_before_ms=9_000)
    assert (calendar.earliest(), len(calendar)) == (12_000, 1)


def test_a_restarted_job_finds_the_calendar_in_its_checkpoint(tmp_path: Path) -> None:
    files = CheckpointFiles(cast(SparkSession, None), str(tmp_path))
    first = TimerCalendar(files)
    assert first.earliest() is None  # a new checkpoint, or one of an earlier version
    first.apply([report(7, 42_000), report(1 << 40, 43_000)], batch_not_before_ms=0)
    first.keep()
    assert files.read(CALENDAR_FILE) is not None
    again = TimerCalendar(files)
    assert (again.earliest(), len(again)) == (42_000, 2)
    again.apply([report(7)], batch_not_before_ms=0)
    assert again.earliest() == 43_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_tick_when_a_timer_is_due_and_one_only_until_a_batch_ran() -> None:
    clock, sent = Clock(), []
    calendar = TimerCalendar(None)
    waker = Waker(calendar, lambda: sent.append(clock.now), idle_s=60, clock=clock)
    calendar.apply([report(1, 1_010_000)], batch_not_before_ms=0)  # due at 1,010 s
    clock.now = 1_009.9
    assert not waker.poll()
    clock.now = 1_010.0
    assert waker.poll()
    clock.now = 1_011.0
    assert not waker.poll()  # the batch it asked for has not run yet
    waker.batch_done()
    calendar.apply([report(1)], batch_not_before_ms=1_010_000)  # the timer fired
    assert not waker.poll()
    assert sent == [1_010.0] and waker.ticks == 1


def test_an_idle_job_ticks_once_per_idle_interval() -> None:
    clock, sent = Clock(), []
    waker = Waker(TimerCalendar(None), lambda: sent.append(clock.now), idle_s=60, clock=clock)
    clock.now = 1_059.0
    assert not waker.poll()
    clock.now = 1_060.0
    assert waker.poll()
    clock.now = 1_070.0
    waker.batch_done()
    clock.now = 1_129.0
    assert not waker.poll()
    clock.now = 1_130.0
    assert waker.poll()
    assert sent == [1_060.0, 1_130.0]


def recording_waker(calendar: TimerCalendar | None = None) -> tuple[Clock, list[float], Waker]:
    """A waker with a 60 s heartbeat on a clock of the test's, and the times of the ticks it sends."""
    clock, sent = Clock(), list[float]()
    chosen = TimerCalendar(None) if calendar is None else calendar
    return clock, sent, Waker(chosen, lambda: sent.append(clock.now), idle_s=60, clock=clock)


def test_a_running_batch_puts_the_heartbeat_off_until_it_ends() -> None:
    """The watcher's TICK starts a batch just before the heartbeat is due: no second batch is asked for."""
    clock, sent, waker = recording_waker()
    clock.now = 1_059.0
    waker.batch_started()
    clock.now = 1_061.0
    assert not waker.poll()  # the heartbeat was due at 1,060 s, but a batch is running
    clock.now = 1_062.0
    waker.batch_done()
    clock.now = 1_121.9
    assert not waker.poll()
    clock.now = 1_122.0
    assert waker.poll()
    assert sent == [1_122.0]


def test_a_batch_that_never_ends_puts_the_heartbeat_off_once() -> None:
    clock, sent, waker = recording_waker()
    clock.now = 1_010.0
    waker.batch_started()  # and it fails: batch_done never comes
    clock.now = 1_069.9
    assert not waker.poll()
    clock.now = 1_070.0
    assert waker.poll()
    assert sent == [1_070.0]


def test_a_due_timer_is_not_put_off_by_a_running_batch() -> None:
    """A batch that started before a timer's time does not fire it: the tick for it goes out on time."""
    calendar = TimerCalendar(None)
    clock, sent, waker = recording_waker(calendar)
    calendar.apply([report(1, 1_020_000)], batch_not_before_ms=0)
    clock.now = 1_019.0
    waker.batch_started()
    clock.now = 1_020.0
    assert waker.poll()
    assert sent == [1_020.0]


def test_a_tick_that_cannot_be_sent_is_tried_again() -> None:
    clock, attempts = Clock(), []

    def send() -> None:
        attempts.append(clock.now)
        if len(attempts) == 1:
            raise PublishError("cannot send a tick to t: broker unreachable")
        if len(attempts) == 2:
            raise RuntimeError("an unexpected failure of the client")

    waker = Waker(TimerCalendar(None), send, idle_s=1, clock=clock)
    clock.now = 1_002.0
    assert not waker.poll()
    assert not waker.poll()
    assert waker.poll()
    assert (len(attempts), waker.ticks) == (3, 1)


@pytest.mark.parametrize("earliest", [None, 1_030_000])
def test_the_next_wake_is_the_earlier_of_the_timer_and_the_heartbeat(earliest: int | None) -> None:
    clock = Clock()
    calendar = TimerCalendar(None)
    if earliest is not None:
        calendar.apply([report(4, earliest)], batch_not_before_ms=0)
    waker = Waker(calendar, lambda: None, idle_s=60, clock=clock)
    assert waker.wake_at() == (1_030.0 if earliest is not None else 1_060.0)


def test_the_wake_thread_ends_with_its_query() -> None:
    closed: list[bool] = []
    waker = Waker(TimerCalendar(None), lambda: None, idle_s=60, close=lambda: closed.append(True))
    alive = [True]
    waker.alive = lambda: alive[0]
    waker.start()
    alive[0] = False  # the query stopped or failed without the job's stop
    assert waker._thread is not None
    waker._thread.join(timeout=5)
    assert not waker._thread.is_alive() and closed == [True]
