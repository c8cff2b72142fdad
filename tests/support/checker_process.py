"""The checker as a separate process (``scrutiny run --config FILE``), and what a test needs around it.

* :func:`config_toml` / :func:`write_config` turn a :class:`Settings` into the TOML file the job reads
  (secrets left out: :func:`child_env` passes them as ``SCRUTINY_<SECTION>_<KEY>`` variables);
* :func:`child_process` starts a command in its own process group with its output in a log file and
  always ends that group (by the child's PID) when the block is left; :meth:`Child.kill` is the crash;
* :class:`CheckpointProbe` tells from the checkpoint and the Delta logs which batch is in progress
  and which tables already hold it (files only: cheap enough to poll every few milliseconds), and
  :meth:`CheckpointProbe.disk_state` reads all of it at once for a job that is no longer running;
* :func:`spark_standalone` starts a Spark standalone Master and one Worker from the pyspark wheel's
  own ``bin/spark-class`` and stops them afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from scrutiny.connectors.tables.delta import read_table
from scrutiny.core.secret import Secret
from scrutiny.settings.loader import ENV_PREFIX, Settings, schema_keys

SCRUTINY = Path(sys.executable).parent / "scrutiny"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
STREAM_ID_FILE = "scrutiny-stream-id"


# ---------------------------------------------------------------------------------------------- configuration


def _section(settings: Settings, name: str) -> Any:
    return getattr(settings, name)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    raise TypeError(f"no TOML form for {value!r}")


def config_toml(settings: Settings) -> str:
    """Every key of ``settings`` as a TOML document, secrets left out (see :func:`child_env`)."""
    lines: list[str] = []
    for name, keys in schema_keys().items():
        section = _section(settings, name)
        lines.append(f"[{name}]")
        for key in keys:
            value = getattr(section, key)
            if not isinstance(value, Secret):
                lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def write_config(settings: Settings, path: Path) -> Path:
    """Write :func:`config_toml` to ``path``; returns it."""
    path.write_text(config_toml(settings), encoding="utf-8")
    return path


def settings_replace(settings: Settings, **checker: Any) -> Settings:
    """``settings`` with some ``[checker]`` keys replaced."""
    return dataclasses.replace(settings, checker=dataclasses.replace(settings.checker, **checker))


def child_env(settings: Settings, local_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child job: no ``SCRUTINY_*`` variable but the secrets of ``settings``.

    The configuration file then decides everything else (an inherited override would win over it).
    The executors' Python is this interpreter; Spark binds to loopback and keeps its scratch files
    under ``local_dir`` (a killed job leaves them behind).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    for name, keys in schema_keys().items():
        section = _section(settings, name)
        for key in keys:
            value = getattr(section, key)
            if isinstance(value, Secret) and value.reveal():
                env[f"{ENV_PREFIX}{name}_{key}".upper()] = value.reveal()
    env.update(
        PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=str(local_dir), PYTHONUNBUFFERED="1"
    )
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------------- processes


@dataclass
class Child:
    """A started process leading its own process group (its JVM too; pyspark's worker daemons make their own)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    ended: bool = False

    @property
    def pid(self) -> int:
        """The child's PID, which is also its process group's id."""
        return self.popen.pid

    def alive(self) -> bool:
        """True while the child itself runs."""
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process tree (a crash: nothing gets to clean up) and reap the child.

        Returns once every process of the tree is dead (the JVM too, which writes the checkpoint): the files are
        then what the crash left, and no longer change.
        """
        survivors = self._end_group()
        if survivors:
            raise AssertionError(f"{self.name}: still alive 30 s after SIGKILL: {survivors}")

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM the child's whole process group (as systemd and Kubernetes do), wait up to ``timeout_s``, then
        SIGKILL whatever is left of its process tree.

        Returns the child's exit code (None if it had to be killed). Does nothing more once ended.
        """
        if self.ended:
            return self.popen.returncode
        tree = descendants(self.pid)  # before the child goes and its descendants are orphaned
        code: int | None = None
        if self.alive():
            os.killpg(self.pid, signal.SIGTERM)  # the JVM and the Python workers get it too
            with suppress(subprocess.TimeoutExpired):
                code = self.popen.wait(timeout=timeout_s)
        else:
            code = self.popen.returncode
        self._end_group(tree)  # the JVM and Python workers, if the child left them behind
        return code

    def text(self) -> str:
        """The log so far."""
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 60) -> str:
        """The last lines of the log (for failure messages)."""
        return "\n".join(self.text().splitlines()[-lines:])

    def _end_group(self, known: list[Process] | None = None, timeout_s: float = 30.0) -> list[Process]:
        """SIGKILL the group and every descendant (once: afterwards the ids may be reused); reap the child.

        Descendants are looked up first (pyspark's worker daemons put themselves in groups of their
        own); ``known`` adds those seen earlier, killed only if still the same process. Waits up to
        ``timeout_s`` for all of them to be dead (a signalled process may still run for a moment);
        returns those that are not.
        """
        if self.ended:
            return []
        tree = {*descendants(self.pid), *(known or [])}
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        for process in tree:
            process.kill()
        self.popen.wait(timeout=timeout_s)
        self.ended = True
        deadline = time.monotonic() + timeout_s
        survivors = [p for p in tree if not p.dead()]
        while survivors and time.monotonic() < deadline:
            time.sleep(0.01)
            survivors = [p for p in survivors if not p.dead()]
        return survivors


@dataclass(frozen=True)
class Process:
    """A process as /proc shows it: PID and start time (together: this process, not a later one with its PID)."""

    pid: int
    started: int

    def kill(self) -> None:
        """SIGKILL it if it is still this process."""
        current = _proc_stat(self.pid)
        if current is not None and current[1] == self.started:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signal.SIGKILL)

    def dead(self) -> bool:
        """True once this process runs no more: gone, a zombie, or its PID taken by a later process."""
        current = _proc_stat(self.pid)
        return current is None or current[1] != self.started or current[2] in ("Z", "X", "x")


def _proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(parent PID, start time, state letter) of ``pid`` from /proc, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ..., starttime is 20th
    return int(fields[1]), int(fields[19]), fields[0]


def descendants(pid: int) -> list[Process]:
    """``pid``'s children, their children, ... (from /proc)."""
    children: dict[int, list[Process]] = {}
    for entry in Path("/proc").iterdir():
        stat = _proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if stat is not None:
            children.setdefault(stat[0], []).append(Process(int(entry.name), stat[1]))
    found: list[Process] = []
    todo = [pid]
    while todo:
        more = children.get(todo.pop(), [])
        found += more
        todo += [p.pid for p in more]
    return found


@contextmanager
def child_process(name: str, command: Sequence[str], env: Mapping[str, str], log: Path) -> Iterator[Child]:
    """Run ``command`` in a new session (its own process group), output to ``log``; always ended on exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        popen = subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=dict(env),
            start_new_session=True,
        )  # fmt: skip
    child = Child(name, popen, log)
    try:
        yield child
    finally:
        child.stop(timeout_s=20)


def run_checker(config: Path, env: Mapping[str, str], log: Path) -> AbstractContextManager[Child]:
    """``scrutiny run --config CONFIG`` as a child (a context manager yielding its :class:`Child`)."""
    return child_process("scrutiny run", [str(SCRUTINY), "run", "--config", str(config)], env, log)


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, *, child: Child | None = None) -> None:
    """Poll ``check`` until true; fail naming ``what`` (and with the child's log tail if it died or time ran out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if child is not None and not child.alive():
            raise AssertionError(f"{child.name} exited ({child.popen.returncode}) before {what}:\n{child.tail()}")
        time.sleep(0.25)
    tail = f"\n{child.name} log:\n{child.tail()}" if child is not None else ""
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{tail}")


# ---------------------------------------------------------------------------------------------- cluster + watcher


# ---------------------------------------------------------------------------------------------- tables, checkpoint


def table_rows(data_dir: str | Path, name: str) -> list[dict[str, Any]]:
    """A Delta table's live rows (empty before the table exists)."""
    try:
        return list(read_table(data_dir, name).to_pylist())
    except Exception:  # not created yet
        return []


def _numbered(directory: Path, suffix: str = "") -> list[int]:
    """The numbers naming files ``<number><suffix>`` in ``directory``, sorted (none when it is missing)."""
    try:
        names = [p.name.removesuffix(suffix) for p in directory.iterdir() if p.name.endswith(suffix)]
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


TABLES_IN_ORDER = ("violations", "ledger_checks", "open_violations", "checker_runs")


@dataclass(frozen=True)
class BatchCommit:
    """A commit in a table's Delta log carrying the stream's app transaction, whose version is the batch id."""

    version: int  #: the commit's number in the log
    batch: int
    rows: int | None  #: rows of the data files it adds (their ``numRecords``; None when a file has no statistics)


def batch_commits(table_dir: Path, app_id: str) -> tuple[BatchCommit, ...]:
    """Every commit of the table's Delta log that records a batch of ``app_id``, in commit order.

    Reads every commit file, not only the newest: a commit without the transaction (a compaction) may follow.
    """
    log_dir = table_dir / "_delta_log"
    found: list[BatchCommit] = []
    for version in _numbered(log_dir, ".json"):
        batch: int | None = None
        rows: int | None = 0
        for line in (log_dir / f"{version:020d}.json").read_text(encoding="utf-8").splitlines():
            action = json.loads(line) if line.strip() else {}
            txn, add = action.get("txn"), action.get("add")
            if txn and txn.get("appId") == app_id:
                batch = int(txn["version"])
            if add and add.get("dataChange", True):
                records = json.loads(add.get("stats") or "{}").get("numRecords")
                rows = None if records is None or rows is None else rows + int(records)
        if batch is not None:
            found.append(BatchCommit(version, batch, rows))
    return tuple(found)


@dataclass(frozen=True)
class DiskState:
    """A stream's batches as the checkpoint and the tables record them (see :meth:`CheckpointProbe.disk_state`)."""

    planned: int | None  #: the last batch whose offsets Spark logged
    committed: int | None  #: the last batch Spark recorded as done
    tables: Mapping[str, tuple[BatchCommit, ...]]  #: per table, the commits recording a batch of the stream

    @property
    def interrupted(self) -> int | None:
        """The batch Spark planned and had not recorded as done (a restart runs it again), or None."""
        if self.planned is None or (self.committed is not None and self.committed >= self.planned):
            return None
        return self.planned

    def batches(self, table: str) -> list[int]:
        """The batches ``table``'s commits record, in commit order."""
        return [c.batch for c in self.tables[table]]

    def commits(self, table: str, batch: int) -> tuple[BatchCommit, ...]:
        """The commits of ``table`` recording ``batch`` (more than one: the batch was written twice)."""
        return tuple(c for c in self.tables[table] if c.batch == batch)

    def holding(self, batch: int) -> tuple[str, ...]:
        """The tables with a commit recording ``batch``."""
        return tuple(t for t in TABLES_IN_ORDER if self.commits(t, batch))


@dataclass(frozen=True)
class CheckpointProbe:
    """What a checkpoint and the tables say about batches, read from files only (safe while the job runs)."""

    checkpoint: Path
    data_dir: Path

    def stream_id(self) -> str | None:
        """The stream id the job keeps in its checkpoint (None before the job made it)."""
        marker = self.checkpoint / STREAM_ID_FILE
        return marker.read_text(encoding="ascii").strip() if marker.exists() else None

    def planned(self) -> int | None:
        """The last batch Spark planned (its offsets are logged before it runs)."""
        batches = _numbered(self.checkpoint / "offsets")
        return batches[-1] if batches else None

    def committed(self) -> int | None:
        """The last batch Spark recorded as done (after the sink returned)."""
        batches = _numbered(self.checkpoint / "commits")
        return batches[-1] if batches else None

    def in_progress(self) -> int | None:
        """The batch running now (planned, not committed), or None."""
        planned, committed = self.planned(), self.committed()
        if planned is None or (committed is not None and committed >= planned):
            return None
        return planned

    def offsets(self, batch: int) -> str | None:
        """The offset log entry of ``batch`` as Spark wrote it (None: not there)."""
        try:
            return (self.checkpoint / "offsets" / str(batch)).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def table_batch(self, table: str, app_id: str) -> int | None:
        """The batch id of ``app_id`` in the newest commit of ``table``'s Delta log (None: none there).

        Only the newest commit is read (cheap enough to poll); :func:`batch_commits` reads them all.
        """
        log_dir = self.data_dir / table / "_delta_log"
        commits = _numbered(log_dir, ".json")
        if not commits:
            return None
        try:
            text = (log_dir / f"{commits[-1]:020d}.json").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        for line in text.splitlines():
            txn = json.loads(line).get("txn") if line.strip() else None
            if txn and txn.get("appId") == app_id:
                return int(txn["version"])
        return None

    def disk_state(self, app_id: str) -> DiskState:
        """The checkpoint's last planned and committed batches and every table's batch commits.

        Meant for a job that is not running (killed and dead, or stopped): the files then hold still, and this is
        what a restart finds.
        """
        tables = {t: batch_commits(self.data_dir / t, app_id) for t in TABLES_IN_ORDER}
        return DiskState(self.planned(), self.committed(), tables)


@dataclass(frozen=True)
class Aim:
    """Where :func:`kill_mid_batch` aimed: the batch running and the tables holding it at its last look.

    The job goes on between that look and the kill (on a loaded machine, for a while): this is for the test's
    output only. What the crash really interrupted is :meth:`CheckpointProbe.disk_state` once the job is dead.
    """

    batch: int
    tables: tuple[str, ...]


def holding(probe: CheckpointProbe, app_id: str, batch: int) -> tuple[str, ...]:
    """The tables whose newest commit is ``batch`` of ``app_id``."""
    return tuple(t for t in TABLES_IN_ORDER if probe.table_batch(t, app_id) == batch)


def kill_mid_batch(
    child: Child,
    probe: CheckpointProbe,
    app_id: str,
    *,
    after: int = 2,
    prefer_s: float = 20.0,
    timeout_s: float = 240.0,  # a cold job on two busy cores took 53 s for its first batch
) -> Aim:
    """SIGKILL ``child`` while a batch runs, once ``after`` batches are fully written; returns when it is dead.

    Polls the checkpoint and the Delta logs every 10 ms and kills at the first moment some table
    already holds the running batch and ``checker_runs`` does not (a crash between two table
    commits); if no such moment comes within ``prefer_s``, at the next moment a batch is running.
    That is only the aim: the job goes on between the last look and the kill, so the kill may land
    anywhere from there to some batches later. Read what it interrupted with
    :meth:`CheckpointProbe.disk_state` afterwards.
    """
    deadline = time.monotonic() + timeout_s
    prefer_until: float | None = None
    while time.monotonic() < deadline:
        if not child.alive():
            raise AssertionError(f"{child.name} exited ({child.popen.returncode}) before the kill:\n{child.tail()}")
        running, written = probe.in_progress(), probe.table_batch("checker_runs", app_id)
        if running is not None and written is not None and written >= after - 1 and running > written:
            prefer_until = prefer_until or time.monotonic() + prefer_s
            tables = holding(probe, app_id, running)
            if tables or time.monotonic() >= prefer_until:
                child.kill()
                return Aim(running, tables)
        time.sleep(0.01)
    raise AssertionError(f"no batch to kill within {timeout_s} s:\n{child.tail()}")


# ---------------------------------------------------------------------------------------------- Spark standalone


_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")


@dataclass(frozen=True)
class Standalone:
    """A started standalone cluster: the master's URL and both processes."""

    url: str
    master: Child
    worker: Child

    def wait_registered(self, timeout_s: float = 60.0) -> None:
        """Until the master's log says the worker registered (and the worker's log agrees)."""
        wait_for(
            lambda: "Registering worker" in self.master.text(), timeout_s, "the worker to register", child=self.worker
        )
        wait_for(
            lambda: "Successfully registered with master" in self.worker.text(),
            timeout_s,
            "the worker",
            child=self.worker,
        )


def spark_class(main_class: str, *args: str) -> list[str]:
    """The command line running one of Spark's daemons from the pyspark wheel."""
    return [str(SPARK_HOME / "bin" / "spark-class"), main_class, *args]


@contextmanager
def spark_standalone(
    base: Path, *, cores: int = 1, memory: str = "1g", timeout_s: float = 60.0
) -> Iterator[Standalone]:
    """A Master on ephemeral ports (no REST server), and one Worker started once the master is up; both
    stopped by PID on exit.

    Yields as soon as the worker is started (a driver may connect meanwhile: executors follow the
    worker's registration); :meth:`Standalone.wait_registered` waits for it. Logs are
    ``base/master.log`` and ``base/worker.log``; the worker's work and local dirs are under ``base``.
    """
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)},
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_LOCAL_DIRS": str(base / "local"),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",  # its REST server would take fixed port 6066
    }
    master_cmd = spark_class(
        "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"
    )
    with child_process("spark master", master_cmd, env, base / "master.log") as master:
        found: list[str] = []

        def master_url() -> bool:
            match = _MASTER_URL.search(master.text())
            if match:
                found.append(match.group(1))
            return bool(match)

        wait_for(master_url, timeout_s, "the Spark master to start", child=master)
        url = found[0]
        worker_cmd = spark_class(
            "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port", "0",
            "--webui-port", "0", "--cores", str(cores), "--memory", memory, "--work-dir", str(base / "work"),
        )  # fmt: skip
        with child_process("spark worker", worker_cmd, env, base / "worker.log") as worker:
            yield Standalone(url, master, worker)
