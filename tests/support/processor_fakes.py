"""What Spark gives the checker's stateful processor, held in memory: a bucket's value state, its handle, the clock.

For running :class:`~scrutiny.streaming.checker.processor.LedgerProcessor` without Spark (its tests, and
``bench/processor_bench.py``). Timers are not kept: the callers say when one is due.
"""

from __future__ import annotations


class State:
    """The bucket's value state."""

    def __init__(self) -> None:
        self.value: tuple[bytes] | None = None

    def get(self) -> tuple[bytes] | None:
        return self.value

    def update(self, value: tuple[bytes]) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class Handle:
    """The processor's handle: one value state; timers registered and deleted are not kept."""

    def __init__(self) -> None:
        self.state = State()

    def getValueState(self, name: str, schema: str) -> State:  # noqa: N802 - PySpark's names
        return self.state

    def registerTimer(self, at: int) -> None:  # noqa: N802
        pass

    def deleteTimer(self, at: int) -> None:  # noqa: N802
        pass


class Timers:
    """The processing time a call runs at."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802
        return self.now_ms
