"""Peak resident memory of each process of a tree, processes that exit meanwhile included (Linux ``/proc``).

The kernel keeps each process's own peak (``VmHWM`` in ``/proc/<pid>/status``), so sampling it every ``period_s``
misses only what a process grew in its last period before it exited. Processes are named by ``/proc/<pid>/comm``
(``java``, ``python3`` ...), so a benchmark can tell Spark's driver JVM from its Python workers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from bench.process_tree import Sampler, all_processes, descendants


@dataclass(frozen=True)
class Peak:
    """One process's peak resident memory, as last sampled."""

    pid: int
    name: str
    bytes: int


def _peak_of(pid: int) -> Peak | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    hwm = fields.get("VmHWM", "").split()
    if not hwm:
        return None  # a kernel thread or a process being reaped
    return Peak(pid, fields.get("Name", "").strip(), int(hwm[0]) * 1024)


class PeakMemory(Sampler):
    """The peak resident memory of ``pid`` and of each of its descendants, sampled every ``period_s``.

    Use as a context manager or call :meth:`start` and :meth:`stop`; :meth:`peaks` may be read at any time.
    """

    def __init__(self, pid: int, *, period_s: float = 0.5) -> None:
        super().__init__(period_s, "memory-meter")
        self.pid = pid
        self._peaks: dict[tuple[int, int], Peak] = {}
        self._lock = threading.Lock()

    def _begin(self) -> None:
        self.sample()

    def sample(self) -> None:
        """Record each process's peak as it is now (the thread calls this every ``period_s``)."""
        processes = all_processes()
        for pid in descendants(processes, self.pid, set()):
            peak = _peak_of(pid)
            if peak is not None:
                with self._lock:
                    self._peaks[(pid, processes[pid].started)] = peak

    def peaks(self) -> list[Peak]:
        """Every process seen, its peak as last sampled."""
        with self._lock:
            return list(self._peaks.values())

    def stop(self) -> list[Peak]:
        """Take a last sample, stop sampling; :meth:`peaks`."""
        self.halt()
        return self.peaks()
