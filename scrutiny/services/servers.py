"""The embedded servers: a real ZooKeeper and a real Apache Kafka broker (KRaft, one node) on free loopback ports.

Used by ``scrutiny services up|status|down``, by the embedded default and by the test fixtures.

* :func:`start_zookeeper` / :func:`start_kafka` start one server in a directory of its own, on a
  free ``127.0.0.1`` port, and return only once it answers (ZooKeeper: ``ruok`` -> ``imok``;
  Kafka: an ``ApiVersions`` request) *and* the listening socket belongs to the process just
  started. Otherwise they stop that process and raise :class:`ServicesError` carrying the last
  lines of its log. A port someone else took meanwhile is retried on another free port.
* Each started server leaves ``state.json`` in its directory at once (pid, port, command, start
  time and the kernel's start time of the process), so the process can be found, checked and
  stopped later from another command: a recorded pid counts as ours only while the kernel still
  reports the same start time (pid reuse is never mistaken for our server).
* :class:`EmbeddedServices` manages both under one state directory: ``up`` reuses servers that
  run and answer, refuses (:class:`ServicesCrashedError`) when a recorded server died unless asked to
  restart it, and starts what is missing, all or nothing; ``status`` reports each server;
  ``down`` stops exactly the recorded processes (SIGTERM, then SIGKILL) and removes the state.

The servers run in their own session (``start_new_session``) so they outlive the command that
started them and ignore its terminal's Ctrl-C.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType

from scrutiny.core.errors import ScrutinyError
from scrutiny.paths import JVM_DIR, KAFKA_LOGGING

LOOPBACK = "127.0.0.1"
ZOOKEEPER = "zookeeper"
KAFKA = "kafka"
#: The services in start order (``down`` stops them in reverse).
SERVICE_NAMES = (ZOOKEEPER, KAFKA)
#: Record names of the real local bookies and their agents (``scrutiny.services.bookkeeper``).
BOOKIE = "bookie"
BOOKIE_AGENT = "bookie-agent"
#: Record name of BookKeeper's AutoRecovery beside them (``scrutiny.services.autorecovery``): it has no port.
AUTORECOVERY = "autorecovery"
#: Record name of a Pulsar broker beside them (``scrutiny.services.pulsar``).
PULSAR = "pulsar"
#: The environment variable that points every command at each service.
ENV_NAMES = {ZOOKEEPER: "SCRUTINY_ZOOKEEPER", KAFKA: "SCRUTINY_KAFKA"}
STATE_FILE = "state.json"
LOG_FILE = "server.log"
#: Where a crashed server's log is kept when ``up --restart-crashed`` starts it again.
CRASHED_LOG_FILE = "server.log.crashed"

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
#: slf4j binding that makes ZooKeeper log to stderr (Debian's jar has none: it would log nothing).
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
ZOOKEEPER_JVM_OPTIONS = (
    "-Xms64m",
    "-Xmx2g",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",  # a development server: the client compiler alone starts it in less CPU time
    "-Dzookeeper.admin.enableServer=false",
    "-Dzookeeper.4lw.commands.whitelist=*",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
    # Every readiness or status probe would otherwise log two lines.
    "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn",
    "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.command.FourLetterCommands=warn",
)
#: Standalone ZooKeeper for development and tests: loopback only, no fsync per transaction, short
#: ticks so tests can use small session timeouts (1 s .. 60 s), no limit on connections per client IP.
ZOOKEEPER_CONFIG = """\
dataDir={data_dir}
clientPort={port}
clientPortAddress={host}
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
maxClientCnxns=0
forceSync=no
admin.enableServer=false
4lw.commands.whitelist=*
"""
#: Apache Kafka's broker: the jars ``scripts/setup`` resolves from ``jvm/kafka/pom.xml``.
KAFKA_JARS = JVM_DIR / "kafka"
KAFKA_MAIN = "kafka.Kafka"
KAFKA_STORAGE_TOOL = "kafka.tools.StorageTool"
#: A small heap and the serial collector: a development broker with a few topics.
KAFKA_JVM_OPTIONS = (
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)
#: The broker's and its storage tool's log configuration.
KAFKA_LOGGING_OPTION = f"-Dlog4j2.configurationFile=file:{KAFKA_LOGGING}"
#: A one-node KRaft cluster (broker and controller in one process) on loopback; everything replicated once, no
#: rebalance delay. Its data (log.dirs) stays in the service's directory, so a restarted broker keeps its topics.
KAFKA_CONFIG = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{host}:{controller_port}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data_dir}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
"""

DEFAULT_START_TIMEOUT = 30.0
DEFAULT_STOP_TIMEOUT = 10.0
_PORT_ATTEMPTS = 3
_POLL_SECONDS = 0.05
_LOG_TAIL_LINES = 30
_PORT_IN_USE_MARKERS = ("address already in use", "addrinuse", "address in use")


class ServicesError(ScrutinyError):
    """A server that cannot be started, checked or stopped. ``log_tail`` holds its last log lines."""

    def __init__(self, headline: str, *, log_tail: str = "") -> None:
        self.headline = headline
        self.log_tail = log_tail
        text = f"{headline}\nlast lines of the log:\n{log_tail}" if log_tail else headline
        super().__init__(text)


class ServicesCrashedError(ServicesError):
    """``up`` found recorded servers whose process is gone; ``crashed`` holds their status."""

    def __init__(self, crashed: list[ServiceStatus]) -> None:
        self.crashed = crashed
        names = ", ".join(f"{s.name} (pid {s.record.pid}, {s.record.address})" for s in crashed if s.record)
        headline = (
            f"crashed: {names}; not restarting it silently: run 'scrutiny services down' first "
            "or 'scrutiny services up --restart-crashed'"
        )
        super().__init__(headline, log_tail="\n".join(s.log_tail() for s in crashed))


class ServiceState(StrEnum):
    """What ``status`` finds for one service."""

    RUNNING = "running"
    UNRESPONSIVE = "unresponsive"
    CRASHED = "crashed"
    STOPPED = "stopped"


class StopResult(StrEnum):
    """What stopping a recorded process did."""

    STOPPED = "stopped"
    KILLED = "killed"
    GONE = "gone"
    NOT_RECORDED = "not recorded"


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    """What ``state.json`` says about one started server."""

    name: str
    pid: int
    host: str
    port: int
    command: tuple[str, ...]
    started_at: float
    process_start_ticks: int
    boot_id: str
    log_file: str

    @property
    def address(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self.host}:{self.port}"

    def to_json(self) -> dict[str, object]:
        """The JSON document of ``state.json``."""
        return {
            "name": self.name,
            "pid": self.pid,
            "host": self.host,
            "port": self.port,
            "command": list(self.command),
            "started_at": self.started_at,
            "process_start_ticks": self.process_start_ticks,
            "boot_id": self.boot_id,
            "log_file": self.log_file,
        }

    @classmethod
    def from_json(cls, document: object, source: Path) -> ServiceRecord:
        """Parse a ``state.json`` document; ServicesError naming ``source`` if it is not one."""
        try:
            if not isinstance(document, dict):
                raise TypeError("not an object")
            record = cls(
                name=str(document["name"]),
                pid=int(document["pid"]),
                host=str(document["host"]),
                port=int(document["port"]),
                command=tuple(str(part) for part in document["command"]),
                started_at=float(document["started_at"]),
                process_start_ticks=int(document["process_start_ticks"]),
                boot_id=str(document["boot_id"]),
                log_file=str(document["log_file"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ServicesError(f"state file {source} is not a service record ({error}); remove it") from None
        if record.pid <= 0:
            raise ServicesError(f"state file {source} records pid {record.pid}; remove it")
        return record


def read_record(directory: Path) -> ServiceRecord | None:
    """The record in ``directory/state.json``, or None when there is none."""
    path = directory / STATE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ServicesError(f"cannot read state file {path}: {error.strerror or error}") from error
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        raise ServicesError(f"state file {path} is not JSON; remove it") from None
    return ServiceRecord.from_json(document, path)


def _write_record(directory: Path, record: ServiceRecord) -> None:
    """Write ``state.json`` atomically (a reader sees the old file or the new one, never half)."""
    path = directory / STATE_FILE
    partial = directory / f".{STATE_FILE}.partial"
    partial.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    os.replace(partial, path)


def log_tail(log_file: Path | str, lines: int = _LOG_TAIL_LINES, *, since: int = 0) -> str:
    """The last ``lines`` lines of a log file (written after byte offset ``since``; empty when there is none)."""
    try:
        with open(log_file, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(since, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


# --- processes ---------------------------------------------------------------------------------

#: Servers this Python process started, kept so they are reaped (no zombies) and never reported
#: as leaked by the garbage collector while they run.
_children: dict[int, subprocess.Popen[bytes]] = {}


def boot_id() -> str:
    """This boot's id (a recorded pid from an earlier boot is never ours)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_identity(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of ``pid`` from /proc, or None if absent."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Field 2 (the command name, in parentheses) may hold spaces; fields 3.. follow the last ')'.
    fields = text.rpartition(")")[2].split()
    return fields[0], int(fields[19])


def _reap(pid: int) -> None:
    """Collect the exit status of ``pid`` if this process started it (so it is not a zombie)."""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


def is_same_process(record: ServiceRecord) -> bool:
    """True while the recorded process still lives: same pid, same kernel start time, same boot."""
    _reap(record.pid)
    identity = process_identity(record.pid)
    if identity is None or identity[0] in ("Z", "X"):
        return False
    return identity[1] == record.process_start_ticks and record.boot_id == boot_id()


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _send(pid: int, pidfd: int | None, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signum)
        else:
            os.kill(pid, signum)


def _wait_gone(record: ServiceRecord, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_same_process(record):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def stop_process(
    record: ServiceRecord, timeout: float = DEFAULT_STOP_TIMEOUT, *, kill_at_once: bool = False
) -> StopResult:
    """Stop the recorded process and nothing else: SIGTERM, ``timeout`` s, then SIGKILL (only SIGKILL if
    ``kill_at_once``).

    A pid that is gone or now belongs to another process is left alone (``GONE``). The process
    is pinned with a pidfd before it is checked, so the signal cannot reach a process that took
    the pid over in between. ServicesError if it survives SIGKILL.
    """
    if not is_same_process(record):
        return StopResult.GONE
    pidfd = _open_pidfd(record.pid)
    try:
        if not is_same_process(record):
            return StopResult.GONE
        if not kill_at_once:
            _send(record.pid, pidfd, signal.SIGTERM)
            if _wait_gone(record, timeout):
                return StopResult.STOPPED
        _send(record.pid, pidfd, signal.SIGKILL)
        if _wait_gone(record, 5.0):
            return StopResult.KILLED
    finally:
        if pidfd is not None:
            os.close(pidfd)
    raise ServicesError(f"{record.name} (pid {record.pid}) is still running after SIGKILL")


def kill_process(record: ServiceRecord) -> StopResult:
    """SIGKILL the recorded process at once (a crash: no shutdown hook runs) and wait until it is gone."""
    return stop_process(record, kill_at_once=True)


# --- probes --------------------------------------------------------------------------------------


def free_port(host: str = LOOPBACK) -> int:
    """A port that was free on ``host`` a moment ago (the server may still lose a race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def zookeeper_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if a ZooKeeper server answers ``ruok`` with ``imok`` on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(b"ruok")
            return _read_until_closed(conn, 16) == b"imok"
    except OSError:
        return False


def kafka_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if a Kafka broker answers an ``ApiVersions`` (v0) request without error."""
    correlation_id = 0x5C7
    client = b"scrutiny-probe"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(struct.pack(">i", len(body)) + body)
            (size,) = struct.unpack(">i", _read_exactly(conn, 4))
            reply = _read_exactly(conn, min(size, 6))
    except (OSError, struct.error):
        return False
    if len(reply) < 6:
        return False
    answered_id, error_code = struct.unpack(">ih", reply)
    return bool(answered_id == correlation_id and error_code == 0)


def _read_until_closed(conn: socket.socket, limit: int) -> bytes:
    data = b""
    while len(data) < limit:
        chunk = conn.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on ``port`` (IPv4 or IPv6 table; state 0A = LISTEN)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rpartition(":")[2], 16) == port:
                inodes.add(cols[9])
    return inodes


def owns_listener(pid: int, port: int) -> bool:
    """True if process ``pid`` holds the socket listening on ``port`` (not some other server)."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                return True
    return False


def accepts_connections(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if something accepts a TCP connection on host:port (bookies, bookie agents: checked further by callers)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


PROBES: dict[str, Callable[[str, int, float], bool]] = {
    ZOOKEEPER: zookeeper_answers,
    KAFKA: kafka_answers,
    BOOKIE: accepts_connections,
    BOOKIE_AGENT: accepts_connections,
    AUTORECOVERY: lambda _host, _port, _timeout: True,  # no port: its process living is all there is to probe
    PULSAR: accepts_connections,
}


def recorded_state(name: str, directory: Path) -> tuple[ServiceState, ServiceRecord | None]:
    """What ``directory/state.json`` says of a server and whether it holds: stopped (no record), crashed (its
    process is gone), running (it answers its probe) or unresponsive."""
    record = read_record(directory)
    if record is None:
        return ServiceState.STOPPED, None
    if not is_same_process(record):
        return ServiceState.CRASHED, record
    if PROBES[name](record.host, record.port, 1.0):
        return ServiceState.RUNNING, record
    return ServiceState.UNRESPONSIVE, record


# --- one server ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A started server and its directory; ``stop()`` ends it and removes its ``state.json``."""

    record: ServiceRecord
    directory: Path

    @property
    def address(self) -> str:
        """``127.0.0.1:port``."""
        return self.record.address

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.record.pid

    def is_alive(self) -> bool:
        """True while the recorded process runs."""
        return is_same_process(self.record)

    def answers(self, timeout: float = 1.0) -> bool:
        """True if the server answers its protocol's probe."""
        return PROBES[self.record.name](self.record.host, self.record.port, timeout)

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the server's log."""
        return log_tail(self.record.log_file, lines)

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> StopResult:
        """Stop the process (only if it is still the recorded one) and remove ``state.json``."""
        result = stop_process(self.record, timeout)
        with contextlib.suppress(FileNotFoundError):
            (self.directory / STATE_FILE).unlink()
        return result

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def java_binary() -> str:
    """The ``java`` on PATH; ServicesError when there is none."""
    java = shutil.which("java")
    if java is None:
        raise ServicesError("java is not on PATH: install a JDK (scripts/setup installs Debian's zookeeper and java)")
    return java


def zookeeper_command(config_file: Path, *, jaas_file: Path | None = None) -> list[str]:
    """The command line of a standalone Debian ZooKeeper reading ``config_file`` (and a JAAS file for SASL)."""
    if not ZOOKEEPER_JAR.is_file():
        raise ServicesError(f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper package (scripts/setup does)")
    classpath = ":".join(str(jar) for jar in (ZOOKEEPER_JAR, SLF4J_BINDING) if jar.is_file())
    jaas = [f"-Djava.security.auth.login.config={jaas_file}"] if jaas_file is not None else []
    return [java_binary(), *ZOOKEEPER_JVM_OPTIONS, *jaas, "-cp", classpath, ZOOKEEPER_MAIN, str(config_file)]


def _sasl_files(directory: Path, users: Mapping[str, str]) -> tuple[str, Path]:
    """The zoo.cfg lines and JAAS file that make ZooKeeper accept SASL DIGEST-MD5 logins of ``users``."""
    jaas = directory / "jaas.conf"
    accounts = "\n".join(f'    user_{name}="{password}"' for name, password in users.items())
    jaas.write_text(f"Server {{\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n{accounts};\n}};\n")
    jaas.chmod(0o600)
    return "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n", jaas


def kafka_classpath() -> str:
    """The broker's class path (``.jvm/kafka/*``); ServicesError when ``scripts/setup`` has not resolved it."""
    if not (KAFKA_JARS / "kafka_2.13.jar").is_file():
        raise ServicesError(f"Apache Kafka's jars are not in {KAFKA_JARS}: run scripts/setup (it resolves jvm/pom.xml)")
    return str(KAFKA_JARS / "*")


def kafka_cluster_id() -> str:
    """A new KRaft cluster id: 16 random bytes, URL-safe base64 without padding, never starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _format_kafka_storage(directory: Path, config: Path) -> None:
    """Format the broker's data directory once (KRaft needs it); a formatted one is kept as it is."""
    if (directory / "data" / "meta.properties").is_file():
        return
    command = [java_binary(), "-Xmx256m", KAFKA_LOGGING_OPTION, "-cp", kafka_classpath(), KAFKA_STORAGE_TOOL]
    command += ["format", "--ignore-formatted", "-t", kafka_cluster_id(), "-c", str(config)]
    with (directory / LOG_FILE).open("ab") as log:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise ServicesError("could not format the Kafka broker's storage", log_tail=log_tail(directory / LOG_FILE))


def kafka_command(directory: Path, port: int, host: str = LOOPBACK) -> list[str]:
    """Write ``server.properties`` for ``host:port`` (and a free controller port), format once; the command line."""
    config = directory / "server.properties"
    data_dir = directory / "data"
    text = KAFKA_CONFIG.format(host=host, port=port, controller_port=free_port(host), data_dir=data_dir)
    config.write_text(text)
    _format_kafka_storage(directory, config)
    return [java_binary(), *KAFKA_JVM_OPTIONS, KAFKA_LOGGING_OPTION, "-cp", kafka_classpath(), KAFKA_MAIN, str(config)]


def start_zookeeper(
    directory: Path,
    *,
    port: int | None = None,
    timeout: float = DEFAULT_START_TIMEOUT,
    die_with_parent: bool = False,
    sasl_users: Mapping[str, str] | None = None,
) -> RunningServer:
    """Start a standalone ZooKeeper with its data, config and log in ``directory``; return once it answers.

    ``port`` is tried first when given (another free port if it is taken). Its data survives a
    restart in the same directory. ``die_with_parent``: the kernel sends the server SIGTERM when
    the calling process dies, even by SIGKILL (for test sessions; needs util-linux ``setpriv``).
    ``sasl_users`` (name -> password) turns on SASL DIGEST-MD5 authentication for those users.
    """

    def command(chosen: int) -> list[str]:
        config = directory / "zoo.cfg"
        data_dir = directory / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        text = ZOOKEEPER_CONFIG.format(data_dir=data_dir, port=chosen, host=LOOPBACK)
        jaas: Path | None = None
        if sasl_users:
            extra, jaas = _sasl_files(directory, sasl_users)
            text += extra
        config.write_text(text)
        return zookeeper_command(config, jaas_file=jaas)

    return _start(ZOOKEEPER, directory, command, port=port, timeout=timeout, die_with_parent=die_with_parent)


def start_kafka(
    directory: Path,
    *,
    port: int | None = None,
    timeout: float = DEFAULT_START_TIMEOUT,
    die_with_parent: bool = False,
) -> RunningServer:
    """Start a one-node Apache Kafka broker (KRaft) with its data, config and log in ``directory``; return once it
    answers Kafka requests.

    Its topics survive a restart in the same directory. ``port`` and ``die_with_parent`` as for
    :func:`start_zookeeper`.
    """
    directory.mkdir(parents=True, exist_ok=True)
    return _start(
        KAFKA,
        directory,
        lambda chosen: kafka_command(directory, chosen),
        port=port,
        timeout=timeout,
        die_with_parent=die_with_parent,
    )


def _start(
    name: str,
    directory: Path,
    command: Callable[[int], list[str]],
    *,
    port: int | None,
    timeout: float,
    die_with_parent: bool,
) -> RunningServer:
    directory.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    prefix = _parent_death_prefix() if die_with_parent else []
    for attempt in range(_PORT_ATTEMPTS):
        chosen = port if port is not None and attempt == 0 else free_port()
        log_offset = _size(directory / LOG_FILE)
        server = spawn_server(name, directory, [*prefix, *command(chosen)], chosen)
        try:
            failure = wait_ready(server, deadline)
        except BaseException:
            server.stop()
            raise
        if failure is None:
            return server
        server.stop()
        tail = log_tail(server.record.log_file, since=log_offset)
        if not _port_was_taken(tail) or attempt == _PORT_ATTEMPTS - 1:
            raise ServicesError(f"{name} did not start on {server.address}: {failure}", log_tail=tail)
    raise AssertionError("unreachable")


def _parent_death_prefix() -> list[str]:
    """``setpriv --pdeathsig TERM --``: the server gets SIGTERM when the process that started it dies."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ServicesError("die_with_parent needs util-linux's setpriv, which is not on PATH")
    return [setpriv, "--pdeathsig", "TERM", "--"]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def spawn_server(name: str, directory: Path, command: list[str], port: int) -> RunningServer:
    """Start ``command`` in its own session, logging to ``directory/server.log``; record it in ``state.json``."""
    log_file = directory / LOG_FILE
    env = dict(os.environ, NO_COLOR="1")
    with log_file.open("ab") as log:
        log.write(f"=== scrutiny: starting {name} on {LOOPBACK}:{port}: {' '.join(command)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=directory,
            env=env,
            start_new_session=True,
        )
    _children[process.pid] = process
    identity = process_identity(process.pid)
    record = ServiceRecord(
        name=name,
        pid=process.pid,
        host=LOOPBACK,
        port=port,
        command=tuple(command),
        started_at=time.time(),
        process_start_ticks=identity[1] if identity else -1,
        boot_id=boot_id(),
        log_file=str(log_file),
    )
    _write_record(directory, record)
    return RunningServer(record, directory)


def wait_ready(server: RunningServer, deadline: float) -> str | None:
    """None once the server answers on its own socket; else why not (exited, or the deadline passed)."""
    while True:
        if not server.is_alive():
            return "the process exited"
        if server.answers(timeout=0.5) and owns_listener(server.pid, server.record.port):
            return None
        if time.monotonic() >= deadline:
            return "it did not answer in time"
        time.sleep(_POLL_SECONDS)


def _port_was_taken(tail: str) -> bool:
    lowered = tail.lower()
    return any(marker in lowered for marker in _PORT_IN_USE_MARKERS)


# --- what status reports ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """One service as ``status`` found it."""

    name: str
    state: ServiceState
    record: ServiceRecord | None
    log_file: Path

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the service's log, each prefixed with the service name."""
        return "\n".join(f"[{self.name}] {line}" for line in log_tail(self.log_file, lines).splitlines())

    def describe(self) -> str:
        """One human line: name, state, pid, address, uptime, log."""
        if self.record is None:
            return f"{self.name} {self.state}"
        uptime = max(0.0, time.time() - self.record.started_at)
        return (
            f"{self.name} {self.state} pid={self.record.pid} address={self.record.address} "
            f"up={uptime:.0f}s log={self.log_file}"
        )


Progress = Callable[[str], None]


def quiet(_: str) -> None:
    return None
