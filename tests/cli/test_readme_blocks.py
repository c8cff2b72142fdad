"""The README's shell blocks, run as written: they work, and they stop everything they start."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bench.process_tree import all_processes
from scrutiny.paths import PROJECT_ROOT

pytestmark = pytest.mark.integration

README = PROJECT_ROOT / "README.md"


def readme_block(containing: str) -> str:
    """The README's fenced ``sh`` block that contains ``containing``."""
    blocks: list[str] = re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"one README block with {containing!r}, found {len(found)}"
    return found[0]


def session_processes(session_id: int) -> list[int]:
    """Live processes of the session ``session_id`` (zombies count as gone)."""
    return [pid for pid, stat in all_processes().items() if stat.session == session_id and stat.state != "Z"]


def test_the_watcher_block_runs_and_stops_what_it_starts(tmp_path: Path) -> None:
    """Services up, the demo simulator in the background, the watcher until Ctrl-C, then everything down: the
    block is run by bash from the checkout's root as a user pastes it; Ctrl-C goes to its process group."""
    script = tmp_path / "block.sh"
    script.write_text("set -e\n" + readme_block("scrutiny watch"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRUTINY_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")  # the services' state, away from the user's
    log = tmp_path / "block.log"
    truth = PROJECT_ROOT / "truth.json"
    existed = truth.exists()
    with log.open("wb") as out:
        shell = subprocess.Popen(
            ["bash", str(script)], cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not all(sign in log.read_text(errors="replace") for sign in ('"scenario": "demo"', "snapshot:")):
            assert shell.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        time.sleep(2)  # the watcher at work
        os.killpg(shell.pid, signal.SIGINT)  # Ctrl-C
        assert shell.wait(timeout=90) == 0, log.read_text(errors="replace")[-3000:]
        deadline = time.monotonic() + 15
        while session_processes(shell.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert session_processes(shell.pid) == []
        text = log.read_text(errors="replace")
        assert "stopped" in text and "Traceback" not in text
    finally:
        if shell.poll() is None or session_processes(shell.pid):
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
        if not existed:
            truth.unlink(missing_ok=True)


def test_the_real_bookkeeper_block_finds_what_the_wiped_bookie_lost(tmp_path: Path) -> None:
    """Real bookies up, real ledgers written, one bookie wiped, a deep scan, everything down: run as written."""
    script = tmp_path / "block.sh"
    script.write_text(readme_block("services bookie wipe"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRUTINY_")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env["SCRUTINY_CHECKER_DATA_DIR"] = str(tmp_path / "data")  # the scan's tables, away from the checkout's data/
    done = subprocess.run(
        ["bash", "-x", str(script)], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    text = done.stdout + done.stderr
    wiped = re.search(r"^bookie (127\.0\.0\.1:\d+) running .*bookies/bookie-2/", done.stdout, flags=re.M)
    assert wiped, text[-4000:]
    assert "Status: UNHEALTHY" in done.stdout, text[-4000:]
    blamed = re.findall(r"MISSING_REPLICA +critical +bookie (127\.0\.0\.1:\d+),", done.stdout)
    assert blamed and set(blamed) == {wiped.group(1)}, text[-4000:]  # the wiped bookie, and only it
    assert done.returncode == 0, text[-4000:]  # the last command, services down
    assert _processes_mentioning(str(tmp_path)) == [], text[-2000:]


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found
