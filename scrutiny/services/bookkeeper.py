"""A real local Apache BookKeeper cluster for development and tests: bookies and the bookie agents beside them.

``scrutiny services up --bookies N`` and the tests that judge the checker against BookKeeper itself use it. Each
bookie is ``org.apache.bookkeeper.server.Main`` from the jars of ``jvm/bookkeeper/pom.xml``, one JVM of its own on
``127.0.0.1``, registered in the services' ZooKeeper under the default metadata root ``/ledgers`` (the cluster is
initialised first with BookKeeper's own ``shell initnewcluster``). Layout under ``<state_dir>/bookies/``::

    bookie-1/bookie.json   its fixed identity: port (the bookie id is 127.0.0.1:PORT), agent port, storage, caches
    bookie-1/bk.conf       the bookie's configuration, written from bookie.json at every start
    bookie-1/journal/      its journal directory
    bookie-1/ledgers/      its ledger (and index) directory
    bookie-1/state.json    the running process (as for ZooKeeper and Kafka), server.log its output
    bookie-1/agent/        the bookie agent beside a DbLedgerStorage bookie: state.json, server.log

A bookie keeps its port for life: the id is in its cookie (in ZooKeeper and in its directories), so a restart on
another port would be refused by BookKeeper's cookie check. DbLedgerStorage (Pulsar's storage, the default) never
answers BookKeeper's v3 listing request, so beside each such bookie runs ``scrutiny agent`` over the bookie's index
(forwarding entry header reads to the bookie's v3 port: ``--bookie-address``), as docs/agent.md tells an operator to
deploy it; SortedLedgerStorage bookies answer v3 themselves and get no agent.

``stop`` kills a bookie (SIGKILL: a crash, not a clean shutdown) and leaves its agent serving the index on disk;
``wipe`` kills it, deletes its journal, ledger and index directories and its cookie as an operator replacing a disk
would, and starts it again empty (as ``bookieformat`` and a restart do).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from scrutiny.connectors.zookeeper.client import (
    ZooKeeperUnreachableError,
    close_zookeeper_client,
    start_zookeeper_client,
)
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.paths import BOOKKEEPER_LOGGING
from scrutiny.services.bookkeeper_tools import (
    METADATA_ROOT,
    bookkeeper_classpath,
    bookkeeper_shell,
    jvm_options,
    metadata_service_uri,
    stats_config,
)
from scrutiny.services.servers import (
    BOOKIE,
    BOOKIE_AGENT,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    LOG_FILE,
    LOOPBACK,
    STATE_FILE,
    Progress,
    RunningServer,
    ServicesError,
    ServiceState,
    free_port,
    java_binary,
    kill_process,
    quiet,
    read_record,
    recorded_state,
    spawn_server,
    stop_process,
    wait_ready,
)

__all__ = [
    "BookieOptions",
    "BookieStatus",
    "BookieStorage",
    "LocalBookies",
    "agent_overrides",
]

BOOKIE_MAIN = "org.apache.bookkeeper.server.Main"
IDENTITY_FILE = "bookie.json"
CONFIG_FILE = "bk.conf"
AGENT_DIR = "agent"
#: A killed bookie's registration (an ephemeral znode) lasts this long; a restart waits for it to go.
ZK_SESSION_TIMEOUT_MS = 4000
_REGISTRATION_POLL_S = 0.1
#: How far the ZooKeeper server's clock may lag this process's when a registration's ctime is compared (one host).
_CLOCK_SLACK_MS = 1000


class BookieStorage(StrEnum):
    """The bookie's ledger storage: DbLedgerStorage (Pulsar's) or SortedLedgerStorage (BookKeeper's default)."""

    DB = "db"
    SORTED = "sorted"


STORAGE_CLASSES = {
    BookieStorage.DB: "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    BookieStorage.SORTED: "org.apache.bookkeeper.bookie.SortedLedgerStorage",
}


@dataclass(frozen=True, slots=True)
class BookieOptions:
    """How new bookies are made. ``flush_interval_ms``: how often DbLedgerStorage flushes its write cache into its
    index (entries reach the index, and so the agent's answers, only then); ``write_cache_mb``: its size (a half-full
    cache is flushed early)."""

    storage: BookieStorage = BookieStorage.DB
    write_cache_mb: int = 16
    flush_interval_ms: int = 10_000
    heap_mb: int = 128

    def __post_init__(self) -> None:
        for name in ("write_cache_mb", "flush_interval_ms", "heap_mb"):
            if getattr(self, name) <= 0:
                raise ServicesError(f"bookie option {name} must be positive, not {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class BookieIdentity:
    """What ``bookie.json`` fixes for the life of one bookie."""

    name: str
    port: int
    agent_port: int
    options: BookieOptions
    #: Where the bookie serves its metrics (Prometheus text on ``/metrics``); 0 for none.
    metrics_port: int = 0

    @property
    def id(self) -> str:
        """BookKeeper's bookie id: ``127.0.0.1:PORT``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def has_agent(self) -> bool:
        """True for DbLedgerStorage bookies (they need the agent to be listed)."""
        return self.options.storage is BookieStorage.DB


@dataclass(frozen=True, slots=True)
class BookieStatus:
    """One bookie and its agent as found now."""

    name: str
    id: str
    state: ServiceState
    pid: int | None
    port: int
    storage: BookieStorage
    journal_dir: Path
    ledger_dir: Path
    log_file: Path
    agent: str | None
    agent_state: ServiceState | None
    agent_pid: int | None
    metrics: str | None = None

    def to_json(self) -> dict[str, object]:
        """The bookie's entry in ``services status --format json``."""
        return {
            "id": self.id,
            "name": self.name,
            "state": str(self.state),
            "pid": self.pid,
            "port": self.port,
            "storage": str(self.storage),
            "journal_dir": str(self.journal_dir),
            "ledger_dir": str(self.ledger_dir),
            "log_file": str(self.log_file),
            "agent": self.agent,
            "agent_state": None if self.agent_state is None else str(self.agent_state),
            "agent_pid": self.agent_pid,
            "metrics": self.metrics,
        }

    def describe(self) -> str:
        """One human line, as ``services status`` prints it."""
        agent = f" agent={self.agent} ({self.agent_state})" if self.agent else ""
        pid = f" pid={self.pid}" if self.pid else ""
        metrics = f" metrics=http://{self.metrics}/metrics" if self.metrics else ""
        return f"bookie {self.id} {self.state}{pid} storage={self.storage}{agent}{metrics} log={self.log_file}"


def bookie_config(identity: BookieIdentity, directory: Path, zookeeper: str) -> str:
    """The ``bk.conf`` of one local bookie."""
    options = identity.options
    lines = {
        "metadataServiceUri": metadata_service_uri(zookeeper),
        "bookiePort": str(identity.port),
        "advertisedAddress": LOOPBACK,
        "allowLoopback": "true",
        "listeningInterface": "lo",
        "journalDirectories": str(directory / "journal"),
        "ledgerDirectories": str(directory / "ledgers"),
        "ledgerStorageClass": STORAGE_CLASSES[options.storage],
        "dbStorage_writeCacheMaxSizeMb": str(options.write_cache_mb),
        "dbStorage_readAheadCacheMaxSizeMb": str(options.write_cache_mb),
        "flushInterval": str(options.flush_interval_ms),
        "zkTimeout": str(ZK_SESSION_TIMEOUT_MS),
        "httpServerEnabled": "false",
        **stats_config(identity.metrics_port),
        # A development machine: no fsync per journal write, small preallocation, nearly full disks accepted.
        "journalSyncData": "false",
        "journalPreAllocSizeMB": "1",
        "diskUsageThreshold": "0.99",
        "diskUsageWarnThreshold": "0.98",
        "autoRecoveryDaemonEnabled": "false",
    }
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def _read_identity(directory: Path) -> BookieIdentity | None:
    path = directory / IDENTITY_FILE
    try:
        document = json.loads(path.read_text())
        options = document["options"]
        return BookieIdentity(
            name=directory.name,
            port=int(document["port"]),
            agent_port=int(document["agent_port"]),
            metrics_port=int(document.get("metrics_port", 0)),
            options=BookieOptions(
                storage=BookieStorage(options["storage"]),
                write_cache_mb=int(options["write_cache_mb"]),
                flush_interval_ms=int(options["flush_interval_ms"]),
                heap_mb=int(options["heap_mb"]),
            ),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ServicesError(f"{path} is not a bookie identity ({error}); remove {directory}") from None


def _write_identity(directory: Path, identity: BookieIdentity) -> None:
    document = {
        "port": identity.port,
        "agent_port": identity.agent_port,
        "metrics_port": identity.metrics_port,
        "options": asdict(identity.options),
    }
    (directory / IDENTITY_FILE).write_text(json.dumps(document, indent=2) + "\n")


def _state_of(name: str, directory: Path) -> tuple[ServiceState, int | None]:
    state, record = recorded_state(name, directory)
    return state, None if record is None else record.pid


def agent_overrides(bookies: Iterable[BookieStatus]) -> str:
    """``[bookies] agent_overrides`` for these bookies: ``id=host:port,...`` (those with an agent)."""
    return ",".join(f"{b.id}={b.agent}" for b in bookies if b.agent)


class LocalBookies:
    """The real bookies (and agents) under ``directory``, registered in the ZooKeeper at ``zookeeper``."""

    def __init__(
        self,
        directory: Path | str,
        zookeeper: str,
        *,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
    ) -> None:
        self.directory = Path(directory)
        self.zookeeper = zookeeper
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout

    @property
    def metadata_service_uri(self) -> str:
        """The cluster's ``metadataServiceUri`` (what BookKeeper's clients and tools are given)."""
        return metadata_service_uri(self.zookeeper)

    # --- what exists ---------------------------------------------------------------------------

    def identities(self) -> list[BookieIdentity]:
        """Every bookie made here, in order (bookie-1, bookie-2, ...)."""
        if not self.directory.is_dir():
            return []
        found = [_read_identity(d) for d in self.directory.iterdir() if d.is_dir()]
        return sorted((i for i in found if i is not None), key=lambda i: int(i.name.rpartition("-")[2]))

    def find(self, bookie: str) -> BookieIdentity:
        """The bookie named ``bookie``: its id (``127.0.0.1:PORT``) or its name (``bookie-1``)."""
        for identity in self.identities():
            if bookie in (identity.id, identity.name):
                return identity
        known = ", ".join(i.id for i in self.identities()) or "none"
        raise ServicesError(f"no local bookie {bookie!r} (bookies: {known})")

    def status(self) -> list[BookieStatus]:
        """Every bookie's state and its agent's."""
        return [self._status_of(identity) for identity in self.identities()]

    def _status_of(self, identity: BookieIdentity) -> BookieStatus:
        directory = self.directory / identity.name
        state, pid = _state_of(BOOKIE, directory)
        agent_state, agent_pid = _state_of(BOOKIE_AGENT, directory / AGENT_DIR) if identity.has_agent else (None, None)
        return BookieStatus(
            name=identity.name,
            id=identity.id,
            state=state,
            pid=pid,
            port=identity.port,
            storage=identity.options.storage,
            journal_dir=directory / "journal",
            ledger_dir=directory / "ledgers",
            log_file=directory / LOG_FILE,
            agent=f"{LOOPBACK}:{identity.agent_port}" if identity.has_agent else None,
            agent_state=agent_state,
            agent_pid=agent_pid,
            metrics=f"{LOOPBACK}:{identity.metrics_port}" if identity.metrics_port else None,
        )

    # --- bringing up -----------------------------------------------------------------------------

    def up(self, count: int, options: BookieOptions | None = None, progress: Progress = quiet) -> list[BookieStatus]:
        """Make bookies 1..``count`` run (new ones made with ``options``; existing ones keep theirs), with agents.

        The cluster is initialised first when ZooKeeper has none. All bookies start at once and this returns
        once each is registered in ZooKeeper. On failure the processes this call started are stopped again.
        """
        options = options or BookieOptions()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.init_cluster(progress)
        existing = {i.name: i for i in self.identities()}
        identities = [existing.get(f"bookie-{n}") or self._make(f"bookie-{n}", options) for n in range(1, count + 1)]
        started: list[RunningServer] = []
        try:
            begun = time.monotonic()
            down = [i for i in identities if self._status_of(i).state is not ServiceState.RUNNING]
            spawned_ms = _now_ms()
            pending = [self._spawn_bookie(i) for i in down]
            started += pending
            for server in pending:
                self._wait_bookie(server, spawned_ms)
            if pending:
                progress(f"bookies: started {len(pending)} in {time.monotonic() - begun:.2f} s")
            for identity in identities:
                agent = self._ensure_agent(identity)
                if agent is not None:
                    started.append(agent)
        except BaseException:
            for server in reversed(started):
                server.stop(self.stop_timeout)
            raise
        return [self._status_of(i) for i in identities]

    def init_cluster(self, progress: Progress = quiet) -> None:
        """Initialise the BookKeeper cluster in ZooKeeper (``shell initnewcluster``) unless it exists."""
        with self.zookeeper_client() as client:
            if client.exists(f"{METADATA_ROOT}/INSTANCEID") is not None:
                return
        done = bookkeeper_shell(self.metadata_service_uri, "initnewcluster", timeout=60.0)
        if done.returncode != 0:
            raise ServicesError("BookKeeper's initnewcluster failed", log_tail=done.stderr[-4000:])
        progress(f"bookies: initialised a BookKeeper cluster at {METADATA_ROOT}")

    def _make(self, name: str, options: BookieOptions) -> BookieIdentity:
        taken = {p for i in self.identities() for p in (i.port, i.agent_port, i.metrics_port) if p}
        needs_agent = options.storage is BookieStorage.DB
        while True:
            port, agent_port, metrics_port = free_port(), free_port() if needs_agent else 0, free_port()
            mine = [p for p in (port, agent_port, metrics_port) if p]
            if not taken & set(mine) and len(set(mine)) == len(mine):
                break
        identity = BookieIdentity(name, port, agent_port, options, metrics_port)
        directory = self.directory / name
        (directory / "journal").mkdir(parents=True, exist_ok=True)
        (directory / "ledgers").mkdir(parents=True, exist_ok=True)
        _write_identity(directory, identity)
        return identity

    def _spawn_bookie(self, identity: BookieIdentity) -> RunningServer:
        directory = self.directory / identity.name
        for sub in ("journal", "ledgers"):
            (directory / sub).mkdir(parents=True, exist_ok=True)
        config = directory / CONFIG_FILE
        config.write_text(bookie_config(identity, directory, self.zookeeper))
        heap = identity.options.heap_mb
        direct = max(128, 2 * identity.options.write_cache_mb + 64)
        command = [
            java_binary(),
            f"-Xmx{heap}m",
            f"-XX:MaxDirectMemorySize={direct}m",
            "-XX:+UseSerialGC",
            *jvm_options(BOOKKEEPER_LOGGING),
            "-cp",
            bookkeeper_classpath(),
            BOOKIE_MAIN,
            "-c",
            str(config),
        ]
        with contextlib.suppress(FileNotFoundError):
            (directory / STATE_FILE).unlink()
        return spawn_server(BOOKIE, directory, command, identity.port)

    def _wait_bookie(self, server: RunningServer, spawned_ms: int) -> None:
        """Wait until the bookie spawned at ``spawned_ms`` (or after) serves and has registered."""
        deadline = time.monotonic() + self.start_timeout
        failure = wait_ready(server, deadline)
        bookie_id = server.record.address
        if failure is None:
            failure = self._wait_registered(server, bookie_id, deadline, spawned_ms - _CLOCK_SLACK_MS)
        if failure is not None:
            server.stop(self.stop_timeout)
            raise ServicesError(f"bookie {bookie_id} did not start: {failure}", log_tail=server.log_tail())

    def _wait_registered(self, server: RunningServer, bookie_id: str, deadline: float, since_ms: int) -> str | None:
        """Wait for the registration of the process just started: a killed bookie's registration (an ephemeral
        node of its dead session) stays until that session expires, and the new process registers only then."""
        with self.zookeeper_client() as client:
            while (stat := client.exists(f"{METADATA_ROOT}/available/{bookie_id}")) is None or stat.ctime < since_ms:
                if not server.is_alive():
                    return "the process exited"
                if time.monotonic() >= deadline:
                    return "it did not register in ZooKeeper in time"
                time.sleep(_REGISTRATION_POLL_S)
        return None

    def _ensure_agent(self, identity: BookieIdentity) -> RunningServer | None:
        """Start the bookie's agent unless it runs (or the bookie needs none); the started agent."""
        if not identity.has_agent:
            return None
        directory = self.directory / identity.name / AGENT_DIR
        if _state_of(BOOKIE_AGENT, directory)[0] is ServiceState.RUNNING:
            return None
        directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (directory / STATE_FILE).unlink()
        command = [
            sys.executable,
            "-m",
            "scrutiny.cli",
            "agent",
            "--ledger-dirs",
            str(self.directory / identity.name / "ledgers"),
            "--listen",
            f"{LOOPBACK}:{identity.agent_port}",
            "--bookie-id",
            identity.id,
            "--bookie-address",  # entry header reads are forwarded to the bookie's own v3 port
            f"{LOOPBACK}:{identity.port}",
            "--state-dir",
            str(directory),
        ]
        server = spawn_server(BOOKIE_AGENT, directory, command, identity.agent_port)
        failure = wait_ready(server, time.monotonic() + self.start_timeout)
        if failure is not None:
            server.stop(self.stop_timeout)
            headline = f"the agent of bookie {identity.id} did not start: {failure}"
            raise ServicesError(headline, log_tail=server.log_tail())
        return server

    # --- one bookie ------------------------------------------------------------------------------

    def stop(self, bookie: str) -> BookieStatus:
        """Kill one bookie (SIGKILL, as a crash); its agent keeps serving the index it left on disk."""
        identity = self.find(bookie)
        self._kill(identity)
        return self._status_of(identity)

    def start(self, bookie: str) -> BookieStatus:
        """Start one stopped or crashed bookie again (same id, same directories) and its agent if it is down."""
        identity = self.find(bookie)
        if self._status_of(identity).state is not ServiceState.RUNNING:
            spawned_ms = _now_ms()
            self._wait_bookie(self._spawn_bookie(identity), spawned_ms)
        self._ensure_agent(identity)
        return self._status_of(identity)

    def wipe(self, bookie: str) -> BookieStatus:
        """Kill one bookie, delete its journal, ledger and index directories and its cookie, start it again empty."""
        identity = self.find(bookie)
        self._kill(identity)
        agent_dir = self.directory / identity.name / AGENT_DIR
        agent = read_record(agent_dir)
        if agent is not None:
            stop_process(agent, self.stop_timeout)
            (agent_dir / STATE_FILE).unlink(missing_ok=True)
        for sub in ("journal", "ledgers"):
            shutil.rmtree(self.directory / identity.name / sub, ignore_errors=True)
        with self.zookeeper_client() as client, contextlib.suppress(NoNodeError):
            client.delete(f"{METADATA_ROOT}/cookies/{identity.id}")
        return self.start(bookie)

    def _kill(self, identity: BookieIdentity) -> None:
        directory = self.directory / identity.name
        record = read_record(directory)
        if record is not None:
            kill_process(record)
            (directory / STATE_FILE).unlink(missing_ok=True)

    def down(self, progress: Progress = quiet) -> None:
        """Stop every agent and bookie recorded here (SIGTERM, then SIGKILL) and remove their state and data."""
        failures: list[str] = []
        for identity in self.identities():
            directory = self.directory / identity.name
            for name, where in ((BOOKIE_AGENT, directory / AGENT_DIR), (BOOKIE, directory)):
                record = read_record(where)
                if record is None:
                    continue
                try:
                    result = stop_process(record, self.stop_timeout)
                except ServicesError as error:
                    failures.append(error.headline)
                    continue
                progress(f"{name} {identity.id}: {result} (pid {record.pid})")
        if failures:
            raise ServicesError("; ".join(failures))
        shutil.rmtree(self.directory, ignore_errors=True)

    @contextlib.contextmanager
    def zookeeper_client(self) -> Iterator[KazooClient]:
        """A started client of the cluster's ZooKeeper (the project's client and retries), closed on exit."""
        try:
            client = start_zookeeper_client(ZooKeeperSection(), timeout_s=10.0, hosts=self.zookeeper)
        except ZooKeeperUnreachableError as error:
            raise ServicesError(str(error)) from None
        try:
            yield client
        finally:
            close_zookeeper_client(client)


def _now_ms() -> int:
    """The wall clock in milliseconds (what ZooKeeper's ctime on this host is compared with)."""
    return time.time_ns() // 1_000_000
