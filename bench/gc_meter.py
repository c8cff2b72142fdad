"""The garbage collector's CPU: how much of a timed run went to its collections, by generation.

:class:`CollectorMeter` adds a ``gc.callbacks`` hook that takes the collecting thread's CPU time around each
collection (``time.thread_time``: a collection runs on the thread whose allocation triggered it, so the start and the
stop it reports are on one thread), whichever thread collects.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from scrutiny.streaming.worker_daemon import tune_collector


class CollectorMeter:
    """CPU seconds and collections of each generation while :meth:`measuring`."""

    def __init__(self) -> None:
        self.seconds: Counter[int] = Counter()
        self.collections: Counter[int] = Counter()
        self._started = threading.local()

    def _hook(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started.at = time.thread_time()
        elif hasattr(self._started, "at"):
            self.seconds[info["generation"]] += time.thread_time() - self._started.at
            self.collections[info["generation"]] += 1

    @contextmanager
    def measuring(self) -> Iterator[CollectorMeter]:
        gc.callbacks.append(self._hook)
        try:
            yield self
        finally:
            gc.callbacks.remove(self._hook)

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    def summary(self, of_seconds: float) -> str:
        """``of_seconds``' share that went to collections, and each generation's collections and seconds."""
        each = ", ".join(f"gen {g}: {self.collections[g]} in {self.seconds[g]:.2f} s" for g in sorted(self.collections))
        return f"{self.total_s / of_seconds:.1%} ({each or 'no collection'})"


def add_collector_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--collector",
        choices=("job", "default"),
        default="job",
        help="the garbage collector as the job's Python workers run it (imports frozen, rarer young collections:"
        " scrutiny.streaming.worker_daemon) or with Python's defaults",
    )


def set_collector(choice: str) -> None:
    """Run this process's collector as ``choice`` says (:func:`add_collector_argument`), from here on: call it once
    the imports are done, before the benchmark's input is made (the job's workers freeze their imports, not their
    input)."""
    if choice == "job":
        tune_collector()
