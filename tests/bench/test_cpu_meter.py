"""The benchmarks' CPU meter counts the processes that exit while it runs, even those nobody waits for."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.cpu_meter import CpuMeter, tree_cpu_seconds

#: A parent that ignores SIGCHLD (as Spark's Python daemon does) and forks a child that burns CPU and exits.
UNWAITED_CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
if os.fork() == 0:
    started = time.process_time()
    while time.process_time() - started < float(sys.argv[1]):
        pass
    os._exit(0)
time.sleep(float(sys.argv[1]) + 1.5)
"""


def test_the_cpu_of_a_child_nobody_waits_for_is_counted() -> None:
    burn_s = 1.0
    before = tree_cpu_seconds(os.getpid())
    with CpuMeter(os.getpid(), period_s=0.2) as meter:
        subprocess.run([sys.executable, "-c", UNWAITED_CHILD, str(burn_s)], check=True, timeout=30)
    counted = meter.seconds()
    missed = tree_cpu_seconds(os.getpid()) - before

    assert burn_s * 0.7 <= counted <= burn_s + 1.0  # the child's second, less at most its last sampling period
    assert missed < burn_s * 0.5  # what the two-instant sum sees: the child's CPU reached no parent


def test_excluded_subtrees_and_time_before_the_start_do_not_count() -> None:
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # a core busy all along
    try:
        with CpuMeter(os.getpid(), exclude=burner.pid, period_s=0.2) as meter:
            subprocess.run([sys.executable, "-c", "import time; time.sleep(2)"], check=True, timeout=30)
        # A Python start and the meter's own sampling (up to ~0.8 s on a loaded 2-core machine): not the excluded
        # loop's core over the 2 s or more of the run, nor this process's CPU before the start (its imports).
        assert meter.seconds() < 1.4
    finally:
        burner.kill()
        burner.wait()
