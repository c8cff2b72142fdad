"""CPU of a process tree over a stretch of time, processes that exit meanwhile included (Linux ``/proc``).

A process's CPU reaches its parent's child times only if the parent waits for it. Spark's Python daemon ignores
SIGCHLD, so the kernel reaps its workers and their CPU is counted nowhere: summing the live tree's own and child
times at two instants (:func:`tree_cpu_seconds`) loses every worker Spark stopped in between, and an idle
checker whose workers Spark stops after their idle minute came out with less CPU than none. :class:`CpuMeter`
samples the tree every ``period_s`` instead and adds up each process's own CPU (user + system, not its children's)
as last seen: a process that exits loses at most its last ``period_s`` of CPU, and none is counted twice. The
sampling's own CPU (its thread's) is taken out of the figure when this process is in the tree measured.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection

from bench.process_tree import Sampler, all_processes, descendants


def tree_cpu_seconds(pid: int, *, exclude: int | Collection[int] = ()) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (and of the children they waited for), now, leaving out
    ``exclude``'s subtrees: take it twice for what ran in between, when no process of the tree exits unwaited."""
    processes = all_processes()
    left_out = {exclude} if isinstance(exclude, int) else set(exclude)
    return sum(processes[p].own_s + processes[p].children_s for p in descendants(processes, pid, left_out))


class CpuMeter(Sampler):
    """CPU seconds used by ``pid``'s tree (without ``exclude``'s subtrees) since :meth:`start`.

    Use as a context manager or call :meth:`start` and :meth:`stop`; :meth:`seconds` may be read at any time.
    """

    def __init__(self, pid: int, *, exclude: int | Collection[int] = (), period_s: float = 1.0) -> None:
        super().__init__(period_s, "cpu-meter")
        self.pid = pid
        self.left_out = {exclude} if isinstance(exclude, int) else set(exclude)
        self._start: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], float] = {}
        self._own_s = 0.0  # the sampling thread's CPU
        self._inside = False
        self._lock = threading.Lock()

    def _begin(self) -> None:
        """Take the tree's CPU now as zero."""
        processes = all_processes()
        tree = descendants(processes, self.pid, self.left_out)
        with self._lock:
            self._inside = os.getpid() in tree  # the sampling thread's CPU is then in the figure, and taken out
            self._start = {(pid, processes[pid].started): processes[pid].own_s for pid in tree}
            self._last = dict(self._start)

    def sample(self) -> None:
        """Record the CPU of the tree's processes as it is now (the thread calls this every ``period_s``)."""
        processes = all_processes()
        with self._lock:
            for pid in descendants(processes, self.pid, self.left_out):
                self._last[(pid, processes[pid].started)] = processes[pid].own_s

    def seconds(self) -> float:
        """CPU seconds of the tree since :meth:`start`, exited processes included (as last sampled)."""
        with self._lock:
            used = sum(cpu - self._start.get(key, 0.0) for key, cpu in self._last.items())
            return used - self._own_s if self._inside else used

    def processes_started(self) -> int:
        """How many processes of the tree were first seen after :meth:`start` (those that exited included)."""
        with self._lock:
            return len(self._last.keys() - self._start.keys())

    def stop(self) -> float:
        """Take a last sample, stop sampling; the seconds since :meth:`start`."""
        self.halt()
        return self.seconds()

    def _sampled(self) -> None:
        before = time.thread_time()
        self.sample()
        with self._lock:
            self._own_s += time.thread_time() - before
