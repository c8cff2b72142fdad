"""The benchmarks' memory meter keeps each process's peak, also of processes that exited before the meter stopped."""

from __future__ import annotations

import subprocess
import sys

from bench.memory_meter import PeakMemory

#: A child that holds 64 MiB for a moment, frees it and lingers, then exits: its peak outlives the memory and it.
PEAKING_CHILD = """
import time
block = bytearray(64 * 1024 * 1024)
block[::4096] = b"x" * len(block[::4096])  # touch every page: resident, not only reserved
time.sleep(1.0)
del block
time.sleep(0.5)
"""


def test_a_child_s_peak_is_kept_after_it_freed_the_memory_and_exited() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {PEAKING_CHILD!r}])"]
    )
    with PeakMemory(parent.pid, period_s=0.1) as meter:
        parent.wait(timeout=30)
    peaks = meter.peaks()
    child = [p for p in peaks if p.pid != parent.pid]
    assert len(child) == 1 and child[0].name.startswith("python")
    assert child[0].bytes >= 64 * 1024 * 1024  # its peak, though it had freed the block before exiting
    own = [p.bytes for p in peaks if p.pid == parent.pid]
    assert own and own[0] < 64 * 1024 * 1024  # the parent never held the block
