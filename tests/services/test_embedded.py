"""`scrutiny run` with no configuration: the embedded default, as a user starts it and stops it with Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scrutiny.connectors.tables.delta import read_table
from scrutiny.services.local_stack import EmbeddedServices
from scrutiny.services.servers import ServiceState
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.simulator.truth import cluster_truth

pytestmark = pytest.mark.integration

BATCH_LINE = re.compile(r"^batch \d+: ")
IDLE_BATCH = re.compile(r": \d+ events, 0 checks, .*violations: none, resolved 0,")
#: A line of the JVM's log4j output (Spark's console format: "25/11/25 03:50:00 WARN ProcessingTimeExecutor: ...").
#: Spark's console progress bar, and what its Python workers write to standard error.
SPARK_CONSOLE = re.compile(r"\[Stage \d+:|Python worker|^WARNING: Using incubator modules")
JVM_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO|ERROR) ")

SCENARIO = """
[scenario]
name = "tiny"
seed = 5

[cluster]
bookies = 3

[defaults]
ensemble_size = 3
write_quorum = 2
ack_quorum = 2
last_entry = 29
ensemble = ["bookie-1", "bookie-2", "bookie-3"]

[[ledgers]]
ids = [[1, 20]]

[[ledgers]]
id = 21
holdings = [{ bookie = "bookie-2", missing = [[3, 9]] }]

[[ledgers]]
id = 22
ack_quorum = 1
"""


@pytest.mark.parametrize("group", [False, True], ids=["SIGINT to run", "SIGTERM to its process group"])
def test_the_embedded_default_runs_reports_and_stops_cleanly_on_ctrl_c(tmp_path: Path, group: bool) -> None:
    (tmp_path / "tiny.toml").write_text(SCENARIO, encoding="utf-8")
    state_dir = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRUTINY_")}
    env |= {"XDG_STATE_HOME": str(state_dir), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "scrutiny.cli", "run", "--scenario", "tiny.toml", "--summary-every", "5"]
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True
        )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            if line.startswith("open violations:") and any(BATCH_LINE.match(seen) for seen in lines):
                break  # a batch is written and a summary of it printed
        if group:  # timeout(1), systemd: Spark's JVM, its Python workers and the services get it too
            os.killpg(process.pid, signal.SIGTERM)
        else:
            process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
        lines += rest.splitlines()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    text = "\n".join(lines)
    assert process.returncode == 0, (
        text + "\n--- stderr (last lines) ---\n" + "\n".join(log.read_text().splitlines()[-30:])
    )
    assert lines[0].startswith(f"logs: {tmp_path / 'data' / 'logs'}/run-"), text
    assert lines[1].startswith("embedded default: ZooKeeper 127.0.0.1:"), text
    batches = [line for line in lines if BATCH_LINE.match(line)]
    assert batches, text
    assert not [line for line in batches if IDLE_BATCH.search(line)], text  # idle batches are not shown
    # A quiet terminal: Spark's and the libraries' chatter went to the log file named at start.
    terminal = text + "\n" + log.read_text()
    noise = [line for line in terminal.splitlines() if JVM_LOG_LINE.search(line) or SPARK_CONSOLE.search(line)]
    assert noise == [], terminal
    assert "Traceback" not in terminal  # stopping cancels a running batch; its traceback belongs in the log file
    log_file = Path(lines[0].removeprefix("logs: "))
    assert log_file.is_file() and "scrutiny" in log_file.read_text()
    assert "stopping: checker, watcher, simulated cluster, services" in text
    services = EmbeddedServices(state_dir / "scrutiny" / "services").status()
    assert services and all(s.state is ServiceState.STOPPED for s in services.values()), services
    truth = {
        (v.ledger_id, v.category.value, v.bookie)
        for v in cluster_truth(ClusterState.from_scenario(parse_scenario(SCENARIO)), 0)
    }
    rows = read_table(tmp_path / "data", "open_violations").to_pylist()
    assert {(r["ledger_id"], r["category"], r["bookie"]) for r in rows if r["resolved_at"] is None} == truth
