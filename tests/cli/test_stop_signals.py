"""The commands' stop on SIGINT/SIGTERM (:func:`scrutiny.cli.common.stop_on_signals`) under a storm of signals."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from scrutiny.cli.common import stop_on_signals


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
