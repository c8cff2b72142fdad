"""The commands' stop on SIGINT/SIGTERM (:func:`scrutiny.cli.common.stop_on_signals`) under a storm of signals."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scrutiny.cli.common import stop_on_signals


@pytest.fixture(autouse=True)
def handlers() -> Iterator[None]:
    """SIGINT and SIGTERM handled by a handler that does nothing here, and their handlers back after the test."""
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in kept:
        signal.signal(sig, lambda *_: None)
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def test_the_first_signal_stops_and_one_arriving_inside_a_handler_returns_at_once() -> None:
    """Python runs a handler between two bytecodes of the main thread, also inside another handler: a second signal
    landing while the first one's ``set`` holds the event's lock must not wait for that lock (it would, forever)."""
    calls: list[int] = []
    with stop_on_signals(calls.append, until_exit=False) as stop:
        handler: Callable[[int, Any], None] = signal.getsignal(signal.SIGTERM)  # type: ignore[assignment]
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5) and calls == [signal.SIGTERM]
        lock = stop._cond  # type: ignore[attr-defined]  # the lock a handler's ``stop.set()`` holds
        with lock:
            nested = threading.Thread(target=handler, args=(signal.SIGINT, None), daemon=True)
            nested.start()  # a thread stands in for the main thread here: the lock is held, as mid-``set``
            nested.join(5)
            assert not nested.is_alive(), "a signal handled while the stop is being set waited for its lock"
        assert calls == [signal.SIGTERM]  # once: the later signals do nothing more
    assert signal.getsignal(signal.SIGTERM) is not handler  # the previous handler back after the block


def test_a_signal_ignored_when_the_command_starts_stays_ignored() -> None:
    """A shell script's background job starts with SIGINT ignored: the Ctrl-C meant for the foreground command must
    not stop it (from a terminal it would not even reach it); SIGTERM still does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with stop_on_signals() as stop:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
        assert not stop.wait(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
