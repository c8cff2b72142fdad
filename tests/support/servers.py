"""Fixtures for tests against a real ZooKeeper and a Kafka broker.

Session scope: ``zookeeper_server``, ``kafka_server`` (:class:`ServerEndpoint`) and ``services``
(both, as :class:`Endpoints`) start Debian's ZooKeeper and an Apache Kafka broker once per session with
``scrutiny.services.servers`` in a temporary directory, and always stop them: at the end of
the session, on failure, on Ctrl-C and on SIGTERM (both become KeyboardInterrupt; pytest tears
fixtures down then), at interpreter exit as a last resort, and even when pytest is killed
outright (the kernel sends them SIGTERM when their parent dies: ``die_with_parent``).
``service_settings`` is the environment's settings (``SCRUTINY_CONFIG``,
``SCRUTINY_<SECTION>_<KEY>``: auth, SASL/SSL) pointed at those servers.

External servers: with ``SCRUTINY_TEST_ZOOKEEPER=host:port[,host:port...]`` and/or
``SCRUTINY_TEST_KAFKA=host:port[,...]`` set, nothing is started for that service and the same
fixtures, clients and tests use the given servers (credentials from the settings).

Function scope: ``zk_client`` is a started KazooClient built by ``build_zookeeper_client``
confined to a fresh chroot (deleted afterwards); ``kafka_topic`` is a fresh one-partition topic
(``kafka_topic_factory`` makes others), deleted afterwards.

When a test that uses the servers fails, its report gets a section with each server's last log
lines.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.connectors.kafka.config import admin_kwargs
from scrutiny.connectors.zookeeper.client import build_zookeeper_client
from scrutiny.services.local_stack import Endpoints
from scrutiny.services.servers import RunningServer, start_kafka, start_zookeeper
from scrutiny.settings.loader import Settings, load_settings
from scrutiny.streaming.session import build_spark_session
from tests.support.spark_class_archive import archive_options, ensure_archive

EXTERNAL_ZOOKEEPER_ENV = "SCRUTINY_TEST_ZOOKEEPER"
EXTERNAL_KAFKA_ENV = "SCRUTINY_TEST_KAFKA"
TEST_CHROOT_PARENT = "/scrutiny-test"
_SERVER_FIXTURES = ("zookeeper_server", "kafka_server", "services")

#: Servers this session started, by service name: for log tails on failure and the exit guard.
_live_servers: dict[str, RunningServer] = {}


@dataclass(frozen=True, slots=True)
class ServerEndpoint:
    """A server the tests use: its address, and the server object when this session started it."""

    name: str
    address: str
    server: RunningServer | None

    @property
    def external(self) -> bool:
        """True when the server was given by SCRUTINY_TEST_* and not started here."""
        return self.server is None


def _stop_leftovers() -> None:
    """Last resort at interpreter exit: stop what a teardown did not (never anything else)."""
    for server in list(_live_servers.values()):
        server.stop()
    _live_servers.clear()


atexit.register(_stop_leftovers)


def _terminate_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


#: How the suite's Spark JVMs start (this process's session and every child's, which inherit the variable): each
#: lives for one test or a few, so C1's quick compilation serves it better than C2's, and the serial collector spends
#: no threads of two cores. Measured on a Spark start with three Delta appends and a MERGE: 70 → 41 s of CPU. The
#: product's own JVMs keep the JVM's defaults (a long-running checker wants C2's code).
#:
#: C1 alone reserves only 48 MB for compiled code (both compilers: 240 MB), and the session's JVM, which serves the
#: whole suite, filled it within minutes: the code cache sweeper then kept evicting compiled methods that were
#: compiled again soon after (seen with ``jcmd PID Compiler.codecache``: 43-46 MB of 48 MB in use all along, 29 MB
#: just after a sweep). With 256 MB reserved nothing is evicted (65 MB used after 5 minutes, growing slowly) and
#: ``tests/streaming/test_delta_writer.py`` with ``tests/streaming/checker/test_checker.py`` took 318 s against 366 s.
#:
#: Their queries run without generated code: the tests' tables hold tens of rows, and writing and compiling Java
#: source for each new plan cost more than it saved. Measured on two Delta writer tests (MERGEs, appends and reads):
#: 111 → 86 s of CPU, 81 → 64 s of wall. Spark's interpreted evaluation gives the same rows (Spark tests both).
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m"
SHORT_LIVED_CONF = {
    **{f"spark.{side}.defaultJavaOptions": SHORT_LIVED_JVM for side in ("driver", "executor")},
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def short_lived_spark(extra_driver_options: str = "") -> str:
    """``PYSPARK_SUBMIT_ARGS`` for :data:`SHORT_LIVED_CONF`, the driver's JVM with ``extra_driver_options`` too."""
    conf = dict(SHORT_LIVED_CONF)
    conf["spark.driver.defaultJavaOptions"] = f"{SHORT_LIVED_JVM} {extra_driver_options}".strip()
    return " ".join(f"--conf {key}='{value}'" for key, value in conf.items()) + " pyspark-shell"


def pytest_configure(config: pytest.Config) -> None:
    """Treat SIGTERM (e.g. from ``timeout``) like Ctrl-C, so that fixture teardown stops the servers.

    A suite started with SIGINT ignored (a script's background job, ``nohup``) takes Ctrl-C again: its children
    would inherit the ignored signal, and the tests that stop a command with Ctrl-C need it to start as it does from a
    terminal (a command keeps a signal it was started ignoring ignored, as a shell's background job must).
    Spark's JVMs start as :func:`short_lived_spark` says unless ``PYSPARK_SUBMIT_ARGS`` is set already.
    """
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if "PYSPARK_SUBMIT_ARGS" not in os.environ:
        # Made by the first process to configure (xdist's workers inherit the variable from their controller).
        os.environ["PYSPARK_SUBMIT_ARGS"] = short_lived_spark(archive_options(ensure_archive(short_lived_spark)))


def _serve(
    name: str, env_name: str, start: Callable[..., RunningServer], base: Path
) -> Generator[ServerEndpoint, None, None]:
    external = os.environ.get(env_name, "").strip()
    if external:
        yield ServerEndpoint(name, external, None)
        return
    server = start(base, die_with_parent=True)
    _live_servers[name] = server
    try:
        yield ServerEndpoint(name, server.address, server)
    finally:
        _live_servers.pop(name, None)
        server.stop()


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerEndpoint]:
    """A ZooKeeper for the whole session (or the external one of SCRUTINY_TEST_ZOOKEEPER)."""
    yield from _serve("zookeeper", EXTERNAL_ZOOKEEPER_ENV, start_zookeeper, tmp_path_factory.mktemp("zookeeper"))


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerEndpoint]:
    """A Kafka broker for the whole session (or the external one of SCRUTINY_TEST_KAFKA)."""
    yield from _serve("kafka", EXTERNAL_KAFKA_ENV, start_kafka, tmp_path_factory.mktemp("kafka"))


@pytest.fixture(scope="session")
def services(zookeeper_server: ServerEndpoint, kafka_server: ServerEndpoint) -> Endpoints:
    """Both servers' addresses."""
    return Endpoints(zookeeper=zookeeper_server.address, kafka=kafka_server.address)


@pytest.fixture(scope="session")
def service_settings(services: Endpoints) -> Settings:
    """The environment's settings (auth, SASL/SSL, ...) with the connection strings of the test servers."""
    base = load_settings()
    return replace(
        base,
        zookeeper=replace(base.zookeeper, connect=services.zookeeper, metadata_uri=""),
        kafka=replace(base.kafka, bootstrap_servers=services.kafka),
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Attach the servers' last log lines to the report of a failed test that used them."""
    report = yield
    uses_servers = any(name in getattr(item, "fixturenames", ()) for name in _SERVER_FIXTURES)
    if report.failed and uses_servers:
        for name, server in _live_servers.items():
            report.sections.append((f"{name} log {server.record.log_file} (last lines)", server.log_tail()))
    return report


def _unique(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60].strip("-")
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _with_chroot(connect: str, chroot: str) -> str:
    hosts, _, existing = connect.partition("/")
    prefix = "/" + existing.strip("/") if existing.strip("/") else ""
    return f"{hosts}{prefix}{chroot}"


@pytest.fixture(scope="session")
def zk_root_client(service_settings: Settings) -> Iterator[KazooClient]:
    """A session-wide client on the real root (creates and deletes the per-test chroots)."""
    client = build_zookeeper_client(service_settings.zookeeper)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def zk_client(
    request: pytest.FixtureRequest, service_settings: Settings, zk_root_client: KazooClient
) -> Iterator[KazooClient]:
    """A started client confined to a fresh chroot ``/scrutiny-test/<test>-<random>``, deleted after the test."""
    chroot = f"{TEST_CHROOT_PARENT}/{_unique(request)}"
    zk_root_client.ensure_path(chroot)
    client = build_zookeeper_client(
        service_settings.zookeeper, hosts=_with_chroot(service_settings.zookeeper.connect, chroot)
    )
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()
        zk_root_client.delete(chroot, recursive=True)


@pytest.fixture(scope="session")
def kafka_admin(service_settings: Settings) -> Iterator[KafkaAdminClient]:
    """A session-wide admin client of the test broker."""
    admin = KafkaAdminClient(**admin_kwargs(service_settings.kafka, client_id="scrutiny-test-admin"))
    try:
        yield admin
    finally:
        admin.close()


KafkaTopicFactory = Callable[..., str]


@pytest.fixture
def kafka_topic_factory(
    request: pytest.FixtureRequest, service_settings: Settings, kafka_admin: KafkaAdminClient
) -> Iterator[KafkaTopicFactory]:
    """``make(partitions=1) -> name``: creates fresh topics for this test, all deleted after it."""
    created: list[str] = []

    def make(partitions: int = 1) -> str:
        name = f"scrutiny-test-{_unique(request)}"
        spec = {"num_partitions": partitions, "replication_factor": service_settings.kafka.replication_factor}
        kafka_admin.create_topics({name: spec}, wait_for_metadata=True)
        created.append(name)
        return name

    try:
        yield make
    finally:
        remaining = set(created) & set(kafka_admin.list_topics())  # a test may have deleted its own
        if remaining:
            kafka_admin.delete_topics(sorted(remaining))


@pytest.fixture
def kafka_topic(kafka_topic_factory: KafkaTopicFactory) -> str:
    """A fresh one-partition topic, deleted after the test."""
    return kafka_topic_factory()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local Spark session (``local[2]``) for the whole test session, stopped at the end."""
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = build_spark_session(
        "scrutiny-tests",
        master="local[2]",
        conf={"spark.sql.warehouse.dir": str(warehouse), "spark.sql.shuffle.partitions": "2"},
    )
    try:
        yield session
    finally:
        session.stop()
