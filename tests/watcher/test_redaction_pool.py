"""A large walk's metadata redacted by worker processes: the same results in the same order as the watcher's own
thread gives, a failed pool finished in the watcher, and no process left behind."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from scrutiny.core.metadata_redaction import redacted_metadata
from scrutiny.watcher import redaction_pool
from scrutiny.watcher.redaction_pool import RedactionPool
from tests.core.test_ledger_metadata import HEADER, SECRET, pulsar_body, v3

pytestmark = pytest.mark.unit


def _blobs(count: int) -> list[bytes]:
    """Ledgers with and without a password, undecodable ones and bytes that are no metadata at all."""
    kinds = [
        lambda i: v3(pulsar_body(password=SECRET + str(i).encode())),
        lambda i: v3(pulsar_body()),
        lambda i: v3(pulsar_body(password=SECRET)) + b"trailing",
        lambda i: HEADER + b"2\n" + f"quorumSize: {i}".encode(),
        lambda i: b"garbage %d" % i,
    ]
    return [kinds[i % len(kinds)](i) for i in range(count)]


def _wait_no_children(timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while multiprocessing.active_children():
        assert time.monotonic() < deadline, f"worker processes left: {multiprocessing.active_children()}"
        time.sleep(0.05)


def test_workers_give_what_the_watchers_own_thread_gives_in_order() -> None:
    blobs = _blobs(230)
    expected = [redacted_metadata(blob) for blob in blobs]
    assert any(r.decode_error for r in expected) and any(SECRET in blob for blob in blobs)
    out = []
    seen_workers = 0
    for redacted in RedactionPool(workers=2, min_ledgers=100, chunk=17).redacted(blobs):
        out.append(redacted)
        seen_workers = max(seen_workers, len(multiprocessing.active_children()))
    assert out == expected
    assert all(SECRET not in r.data for r in out)
    assert seen_workers >= 1  # the work was done by other processes
    _wait_no_children()


def test_a_small_walk_and_zero_workers_start_no_process() -> None:
    blobs = _blobs(50)
    expected = [redacted_metadata(blob) for blob in blobs]
    for pool in (RedactionPool(workers=2, min_ledgers=51), RedactionPool(workers=0, min_ledgers=1)):
        out = []
        for redacted in pool.redacted(blobs):
            out.append(redacted)
            assert not multiprocessing.active_children()
        assert out == expected


def test_a_killed_worker_leaves_the_rest_of_the_walk_to_the_watcher(caplog: pytest.LogCaptureFixture) -> None:
    blobs = _blobs(400)
    expected = [redacted_metadata(blob) for blob in blobs]
    out = []
    for redacted in RedactionPool(workers=1, min_ledgers=1, chunk=10).redacted(blobs):
        out.append(redacted)
        if len(out) == 5:
            for child in multiprocessing.active_children():
                os.kill(child.pid or 0, signal.SIGKILL)
    assert out == expected
    assert "the watcher redacts the remaining" in caplog.text
    _wait_no_children()


def test_closing_the_walk_early_stops_the_workers() -> None:
    walk = RedactionPool(workers=2, min_ledgers=1, chunk=10).redacted(_blobs(1000))
    assert next(walk) == redacted_metadata(_blobs(1)[0])
    assert multiprocessing.active_children()
    walk.close()
    _wait_no_children()


def test_a_pool_that_cannot_start_leaves_the_walk_to_the_watcher(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Spawning fails with RuntimeError when the main module cannot be imported again (a script without a main
    guard): the walk is still redacted, by the watcher."""

    def cannot_start(*_: object, **__: object) -> None:
        raise RuntimeError("An attempt has been made to start a new process before the bootstrapping phase")

    monkeypatch.setattr(redaction_pool, "ProcessPoolExecutor", cannot_start)
    blobs = _blobs(30)
    assert list(RedactionPool(workers=1, min_ledgers=1).redacted(blobs)) == [redacted_metadata(b) for b in blobs]
    assert "the watcher redacts the remaining 30 ledgers" in caplog.text
