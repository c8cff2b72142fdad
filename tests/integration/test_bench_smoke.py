"""The benchmarks keep running: a quick pass must finish, judge every healthy ledger HEALTHY and print its targets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_verdict_bench_quick_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.verdict_bench", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    healthy = [line for line in done.stdout.splitlines() if line.strip().startswith(("10^3", "10^6", "10^9"))]
    assert healthy and "VIOLATED" not in "".join(healthy[:6])
    assert "healthy 10^9-entry ledger verdict < 1 ms" in done.stdout
    assert "decode_listing_compact" in done.stdout


@pytest.mark.parametrize("module", ["bench.bookie_v3_bench", "bench.agent_bench"])
def test_listing_benches_quick_run(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--quick"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "listings/s" in done.stdout
