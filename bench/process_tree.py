"""The processes of this machine and one process's tree of descendants, as Linux ``/proc`` shows them now."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

TICK = os.sysconf("SC_CLK_TCK")


class Stat(NamedTuple):
    """What /proc says of one process."""

    parent: int
    started: int  # clock ticks since boot: with the pid, names one process even after the pid is reused
    own_s: float  # user + system CPU of the process itself
    children_s: float  # of its children that it waited for


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
        found[int(entry.name)] = Stat(int(fields[1]), int(fields[19]), own / TICK, children / TICK)
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
