"""The local stack under one state directory: ZooKeeper, Apache Kafka and, when asked, real BookKeeper bookies.

:class:`EmbeddedServices` is what ``scrutiny services up|status|down|bookie``, the embedded default and the test
fixtures use. Layout: ``<state_dir>/zookeeper/``, ``<state_dir>/kafka/`` (:mod:`scrutiny.services.servers`) and
``<state_dir>/bookies/`` (:mod:`scrutiny.services.bookkeeper`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from scrutiny.services.autorecovery import LocalAutoRecovery
from scrutiny.services.bookkeeper import BookieOptions, BookieStatus, LocalBookies, agent_overrides
from scrutiny.services.servers import (
    CRASHED_LOG_FILE,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    ENV_NAMES,
    KAFKA,
    LOG_FILE,
    PROBES,
    SERVICE_NAMES,
    STATE_FILE,
    ZOOKEEPER,
    Progress,
    RunningServer,
    ServiceRecord,
    ServicesCrashedError,
    ServicesError,
    ServiceState,
    ServiceStatus,
    StopResult,
    is_same_process,
    log_tail,
    quiet,
    read_record,
    recorded_state,
    start_kafka,
    start_zookeeper,
    stop_process,
)

#: The variable ``services up`` prints for the bookie agents of the local bookies (``[bookies] agent_overrides``).
AGENT_OVERRIDES_ENV = "SCRUTINY_BOOKIES_AGENT_OVERRIDES"
BOOKIES_DIR = "bookies"
_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where the services listen (``host:port``)."""

    zookeeper: str
    kafka: str

    def env(self) -> dict[str, str]:
        """The variables that point every command at these services."""
        return {ENV_NAMES[ZOOKEEPER]: self.zookeeper, ENV_NAMES[KAFKA]: self.kafka}


@dataclass(frozen=True, slots=True)
class UpResult:
    """What ``up`` did: the endpoints, and which services it started or found running."""

    endpoints: Endpoints
    started: tuple[str, ...]
    reused: tuple[str, ...]
    bookies: tuple[BookieStatus, ...] = ()

    def env(self) -> dict[str, str]:
        """The endpoints' variables, and the bookie agents' addresses when there are local bookies with agents."""
        overrides = agent_overrides(self.bookies)
        return self.endpoints.env() | ({AGENT_OVERRIDES_ENV: overrides} if overrides else {})


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/scrutiny/services`` (an absolute XDG_STATE_HOME), else ``~/.local/state/...``."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path(env.get("HOME") or Path.home()) / ".local" / "state"
    return base / "scrutiny" / "services"


def resolve_state_dir(configured: str, env: Mapping[str, str] | None = None) -> Path:
    """``services.state_dir`` when set (``~`` expanded), else :func:`default_state_dir`."""
    return Path(configured).expanduser() if configured else default_state_dir(env)


class EmbeddedServices:
    """ZooKeeper and Kafka under one state directory: ``<state_dir>/zookeeper/``, ``<state_dir>/kafka/``, and the
    real local bookies ``up(bookies=N)`` adds under ``<state_dir>/bookies/``.

    Commands on one state directory are serialised by an exclusive lock on the directory. As a
    context manager it brings the services up and, on exit, stops exactly those it started
    itself (services it found running are left running).
    """

    def __init__(
        self,
        state_dir: Path | str,
        *,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        lock_timeout: float = 120.0,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.lock_timeout = lock_timeout
        self._started_here: list[RunningServer] = []

    def service_dir(self, name: str) -> Path:
        """The directory of one service's state, data and log."""
        return self.state_dir / name

    def bookies(self) -> LocalBookies:
        """The real local bookies, registered in this state directory's ZooKeeper."""
        record = read_record(self.service_dir(ZOOKEEPER))
        zookeeper = record.address if record is not None else ""
        return LocalBookies(
            self.state_dir / BOOKIES_DIR, zookeeper, start_timeout=self.start_timeout, stop_timeout=self.stop_timeout
        )

    def autorecovery(self) -> LocalAutoRecovery:
        """BookKeeper's AutoRecovery beside the local bookies (started on demand)."""
        return LocalAutoRecovery(self.bookies())

    def bookie_status(self) -> list[BookieStatus]:
        """Each local bookie's state and its agent's (empty when ``up`` started none)."""
        with self._locked():
            return self.bookies().status()

    @contextlib.contextmanager
    def _locked(self, *, create: bool = False) -> Iterator[None]:
        """Hold the exclusive lock on the state directory (made first if ``create``; absent: nothing to lock)."""
        if create:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        elif not self.state_dir.is_dir():
            yield
            return
        fd = os.open(self.state_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise ServicesError(f"another command holds the lock on {self.state_dir}") from None
                    time.sleep(0.1)
            yield
        finally:
            os.close(fd)

    def status(self) -> dict[str, ServiceStatus]:
        """Each service's state, in start order. Runs no server and changes nothing."""
        with self._locked():
            return self._status()

    def _status(self) -> dict[str, ServiceStatus]:
        return {name: self._status_of(name) for name in SERVICE_NAMES}

    def _status_of(self, name: str) -> ServiceStatus:
        directory = self.service_dir(name)
        state, record = recorded_state(name, directory)
        log_file = Path(record.log_file) if record is not None else directory / LOG_FILE
        return ServiceStatus(name, state, record, log_file)

    def up(
        self,
        *,
        restart_crashed: bool = False,
        progress: Progress = quiet,
        bookies: int = 0,
        bookie_options: BookieOptions | None = None,
    ) -> UpResult:
        """Make both services run and answer, and ``bookies`` real bookies (with agents) after them; return the
        endpoints (and the bookies).

        Running services are reused. A recorded service whose process died raises
        :class:`ServicesCrashedError` (nothing is started) unless ``restart_crashed``: then it is started
        again, on its old port if that is free, keeping ZooKeeper's data and the old log as
        ``server.log.crashed``. A service that runs but does not answer is waited for up to the
        start timeout, then ServicesError. If anything fails, the servers this call started are
        stopped again (all or nothing).
        """
        with self._locked(create=True):
            statuses = self._status()
            crashed = [s for s in statuses.values() if s.state is ServiceState.CRASHED]
            if crashed and not restart_crashed:
                raise ServicesCrashedError(crashed)
            started: list[RunningServer] = []
            reused: list[str] = []
            try:
                for name, status in statuses.items():
                    server = self._bring_up(status, progress)
                    if server is None:
                        reused.append(name)
                    else:
                        started.append(server)
                bookie_statuses = self.bookies().up(bookies, bookie_options, progress) if bookies else []
            except BaseException:
                for server in reversed(started):
                    server.stop(self.stop_timeout)
                raise
            self._started_here.extend(started)
            endpoints = self._endpoints()
        return UpResult(endpoints, tuple(s.record.name for s in started), tuple(reused), tuple(bookie_statuses))

    def _bring_up(self, status: ServiceStatus, progress: Progress) -> RunningServer | None:
        """Start one service, or None when the running one is reused."""
        name, record, directory = status.name, status.record, self.service_dir(status.name)
        if status.state is ServiceState.RUNNING and record is not None:
            progress(f"{name}: running, reusing pid {record.pid} on {record.address}")
            return None
        if status.state is ServiceState.UNRESPONSIVE and record is not None:
            self._wait_answering(record)
            progress(f"{name}: running, reusing pid {record.pid} on {record.address}")
            return None
        port = None
        if status.state is ServiceState.CRASHED and record is not None:
            progress(f"{name}: pid {record.pid} crashed; restarting (old log kept as {CRASHED_LOG_FILE})")
            if Path(record.log_file).exists():
                os.replace(record.log_file, directory / CRASHED_LOG_FILE)
            (directory / STATE_FILE).unlink()
            port = record.port
        begun = time.monotonic()
        start = start_zookeeper if name == ZOOKEEPER else start_kafka
        server = start(directory, port=port, timeout=self.start_timeout)
        progress(f"{name}: started pid {server.pid} on {server.address} in {time.monotonic() - begun:.2f} s")
        return server

    def _wait_answering(self, record: ServiceRecord) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not PROBES[record.name](record.host, record.port, 1.0):
            if not is_same_process(record):
                raise ServicesCrashedError([self._status_of(record.name)])
            if time.monotonic() >= deadline:
                raise ServicesError(
                    f"{record.name} (pid {record.pid}) runs but does not answer on {record.address}; "
                    "run 'scrutiny services down' first",
                    log_tail=log_tail(record.log_file),
                )
            time.sleep(_POLL_S)

    def _endpoints(self) -> Endpoints:
        records = {name: read_record(self.service_dir(name)) for name in SERVICE_NAMES}
        zookeeper, kafka = records[ZOOKEEPER], records[KAFKA]
        if zookeeper is None or kafka is None:
            raise ServicesError(f"the services in {self.state_dir} are not both up")
        return Endpoints(zookeeper=zookeeper.address, kafka=kafka.address)

    def endpoints(self) -> Endpoints:
        """The endpoints recorded for both services (whether or not they still answer)."""
        with self._locked():
            return self._endpoints()

    def down(self, progress: Progress = quiet) -> dict[str, StopResult]:
        """Stop every recorded server (only if it is still the recorded process) and remove the state.

        Stops the bookies and their agents first, then Kafka, then ZooKeeper. The state directory itself stays
        (empty). ServicesError if a process survives SIGKILL; its state is then kept.
        """
        results: dict[str, StopResult] = {}
        failures: list[ServicesError] = []
        with self._locked():
            try:
                self.autorecovery().stop()
                self.bookies().down(progress)
            except ServicesError as error:
                failures.append(error)
            for name in reversed(SERVICE_NAMES):
                directory = self.service_dir(name)
                record = read_record(directory)
                try:
                    result = stop_process(record, self.stop_timeout) if record else StopResult.NOT_RECORDED
                except ServicesError as error:
                    failures.append(error)
                    continue
                results[name] = result
                where = f" (pid {record.pid}, {record.address})" if record else ""
                progress(f"{name}: {result}{where}")
                shutil.rmtree(directory, ignore_errors=True)
        self._started_here.clear()
        if failures:
            raise ServicesError("; ".join(error.headline for error in failures))
        return results

    def stop_started(self) -> None:
        """Stop the servers this object started (all of them: ``down``; some: only those)."""
        started = {server.record.name for server in self._started_here}
        if started == set(SERVICE_NAMES):
            self.down()
            return
        with self._locked():
            for server in reversed(self._started_here):
                server.stop(self.stop_timeout)
        self._started_here.clear()

    def __enter__(self) -> Endpoints:
        return self.up().endpoints

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop_started()
