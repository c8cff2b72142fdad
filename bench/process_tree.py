"""The processes of this machine and one process's tree of descendants, as Linux ``/proc`` shows them now, and the
sampling thread of the meters built on them."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, Self

TICK = os.sysconf("SC_CLK_TCK")


class Stat(NamedTuple):
    """What /proc says of one process."""

    parent: int
    started: int  # clock ticks since boot: with the pid, names one process even after the pid is reused
    own_s: float  # user + system CPU of the process itself
    children_s: float  # of its children that it waited for
    state: str = ""  # R, S, D, Z (a zombie: exited, not yet reaped) ...
    session: int = 0


def all_processes() -> dict[int, Stat]:
    """Every process's :class:`Stat`, by pid."""
    found: dict[int, Stat] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        own, children = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
        found[int(entry.name)] = Stat(
            int(fields[1]), int(fields[19]), own / TICK, children / TICK, state=fields[0], session=int(fields[3])
        )
    return found


def descendants(processes: dict[int, Stat], root: int, left_out: set[int]) -> list[int]:
    """``root`` and every process below it in ``processes``, without ``left_out``'s subtrees."""
    children: dict[int, list[int]] = {}
    for pid, stat in processes.items():
        children.setdefault(stat.parent, []).append(pid)
    tree, todo = [], [root]
    while todo:
        current = todo.pop()
        if current in left_out or current not in processes:
            continue
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


class Sampler:
    """Calls :meth:`sample` every ``period_s`` in a thread of its own, from :meth:`start` until :meth:`halt` (which
    samples once more); a context manager. Subclasses say what a sample takes (and :meth:`_begin`, what start sets)."""

    def __init__(self, period_s: float, name: str) -> None:
        self.period_s = period_s
        self._name = name
        self._halted = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        raise NotImplementedError

    def _begin(self) -> None:
        """What :meth:`start` does before the thread starts (nothing by default)."""

    def _sampled(self) -> None:
        """One sample of the thread (a subclass may time it)."""
        self.sample()

    def start(self) -> Self:
        """Begin, and sample from now on."""
        self._begin()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        return self

    def halt(self) -> None:
        """Stop sampling after a last sample."""
        self._halted.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._halted.wait(self.period_s):
            self._sampled()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.halt()
