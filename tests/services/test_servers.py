"""``scrutiny services`` and the services module against real ZooKeeper and Apache Kafka processes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import make_digest_acl

from scrutiny.cli.main import main
from scrutiny.connectors.kafka.config import consumer_kwargs, producer_kwargs
from scrutiny.connectors.zookeeper.client import build_zookeeper_client
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.core.secret import Secret
from scrutiny.services import servers as services_module
from scrutiny.services.local_stack import EmbeddedServices
from scrutiny.services.servers import (
    ServiceRecord,
    ServicesError,
    StopResult,
    is_same_process,
    kafka_answers,
    owns_listener,
    process_identity,
    read_record,
    start_kafka,
    start_zookeeper,
    stop_process,
    zookeeper_answers,
)
from scrutiny.settings.loader import Settings
from tests.support.servers import ServerEndpoint

pytestmark = pytest.mark.integration

SCRUTINY = Path(sys.executable).parent / "scrutiny"
LINE = re.compile(r"^(SCRUTINY_ZOOKEEPER|SCRUTINY_KAFKA)=127\.0\.0\.1:(\d+); export \1;$")


def variables(stdout: str) -> dict[str, str]:
    """The ``NAME=VALUE; export NAME;`` lines of ``up``/``status`` output (comments skipped)."""
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith("#"):
            continue
        match = LINE.match(line)
        assert match, f"not an eval-able line: {line!r}"
        found[match.group(1)] = f"127.0.0.1:{match.group(2)}"
    return found


def records(state_dir: Path) -> dict[str, ServiceRecord]:
    found = {name: read_record(state_dir / name) for name in ("zookeeper", "kafka")}
    return {name: record for name, record in found.items() if record is not None}


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["services", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_in_process_up_reuse_crash_restart_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "state"
    monkeypatch.setenv("SCRUTINY_SERVICES_STATE_DIR", str(state_dir))
    try:
        code, out, err = run_cli(capsys, "up")
        assert code == 0, err
        first = variables(out)
        assert set(first) == {"SCRUTINY_ZOOKEEPER", "SCRUTINY_KAFKA"} and "started" in err
        started = records(state_dir)
        assert all(is_same_process(record) for record in started.values())
        assert first["SCRUTINY_ZOOKEEPER"] == started["zookeeper"].address

        code, out, err = run_cli(capsys, "up")
        assert code == 0 and variables(out) == first and err.count("reusing") == 2
        assert records(state_dir) == started

        code, out, _ = run_cli(capsys, "status")
        assert code == 0 and variables(out) == first
        assert "# zookeeper running" in out and "# kafka running" in out

        zookeeper = started["zookeeper"]
        os.kill(zookeeper.pid, signal.SIGKILL)
        _wait_until(lambda: not is_same_process(zookeeper))
        code, out, err = run_cli(capsys, "status")
        assert (
            code == 1 and "# zookeeper crashed" in out and variables(out) == {"SCRUTINY_KAFKA": first["SCRUTINY_KAFKA"]}
        )
        assert "[zookeeper]" in err  # its log tail

        code, out, err = run_cli(capsys, "up")
        assert code == 2 and out == ""
        assert "crashed: zookeeper" in err and "scrutiny services down" in err
        assert records(state_dir)["zookeeper"] == zookeeper and not zookeeper_answers("127.0.0.1", zookeeper.port)

        code, out, err = run_cli(capsys, "up", "--restart-crashed")
        assert code == 0 and variables(out) == first, err
        restarted = records(state_dir)
        assert restarted["zookeeper"].pid != zookeeper.pid and restarted["kafka"] == started["kafka"]
        assert (state_dir / "zookeeper" / "server.log.crashed").is_file()

        code, out, err = run_cli(capsys, "down")
        assert code == 0 and out == "", err
        for record in restarted.values():
            assert not is_same_process(record)
        assert list(state_dir.iterdir()) == []
        code, out, _ = run_cli(capsys, "status")
        assert code == 3 and "# zookeeper stopped" in out and variables(out) == {}
    finally:
        EmbeddedServices(state_dir).down()


def console(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(SCRUTINY), "services", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_console_script_eval_points_commands_at_services(tmp_path: Path) -> None:
    env = dict(os.environ, SCRUTINY_SERVICES_STATE_DIR=str(tmp_path / "state"))
    for name in ("SCRUTINY_ZOOKEEPER", "SCRUTINY_KAFKA", "SCRUTINY_CONFIG"):
        env.pop(name, None)
    show = f"{sys.executable} -c 'from scrutiny.settings.loader import load_settings as l; s = l(); " + (
        "print(s.zookeeper.connect, s.kafka.bootstrap_servers)'"
    )
    script = f'printed="$({SCRUTINY} services up)" && eval "$printed" && {show}'  # a failed start fails the script
    try:
        up = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False)
        assert up.returncode == 0, up.stderr
        zookeeper, kafka = up.stdout.split()
        assert zookeeper_answers(*_host_port(zookeeper)) and kafka_answers(*_host_port(kafka))

        status = console(env, "status", "--format", "env")
        assert status.returncode == 0, status.stderr
        assert f"SCRUTINY_ZOOKEEPER={zookeeper}" in status.stdout.splitlines()
        assert f"SCRUTINY_KAFKA={kafka}" in status.stdout.splitlines()
        running = records(tmp_path / "state")

        down = console(env, "down")
        assert down.returncode == 0, down.stderr
        assert all(not is_same_process(record) for record in running.values()) and len(running) == 2
        assert not zookeeper_answers(*_host_port(zookeeper))
    finally:
        EmbeddedServices(tmp_path / "state").down()


def test_context_manager_stops_only_what_it_started(tmp_path: Path) -> None:
    with EmbeddedServices(tmp_path) as endpoints:
        started = records(tmp_path)
        assert zookeeper_answers(*_host_port(endpoints.zookeeper)) and kafka_answers(*_host_port(endpoints.kafka))
        with EmbeddedServices(tmp_path) as again:
            assert again == endpoints
        assert all(is_same_process(record) for record in started.values())  # the inner one reused them
    assert all(not is_same_process(record) for record in started.values()) and not records(tmp_path)


def test_down_never_signals_a_process_that_only_reuses_the_pid(tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        identity = process_identity(stranger.pid)
        assert identity is not None
        record = ServiceRecord(
            "zookeeper", stranger.pid, "127.0.0.1", 1, ("java",), time.time(), identity[1] + 1, "", str(tmp_path / "l")
        )
        (tmp_path / "zookeeper").mkdir()
        (tmp_path / "zookeeper" / "state.json").write_text(json.dumps(record.to_json()))
        assert EmbeddedServices(tmp_path).status()["zookeeper"].state == "crashed"
        assert EmbeddedServices(tmp_path).down()["zookeeper"] is StopResult.GONE
        assert stranger.poll() is None and not (tmp_path / "zookeeper").exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_start_failure_raises_with_the_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services_module, "ZOOKEEPER_JVM_OPTIONS", ("-Xmx1k",))
    with pytest.raises(ServicesError) as caught:
        start_zookeeper(tmp_path, timeout=20)
    assert "zookeeper did not start" in caught.value.headline and "the process exited" in caught.value.headline
    assert "heap" in caught.value.log_tail.lower()
    assert read_record(tmp_path) is None


def test_a_taken_port_is_retried_on_another(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with start_kafka(tmp_path, port=port) as server:
            assert server.record.port != port and owns_listener(server.pid, server.record.port)
            assert not owns_listener(server.pid, port) and server.answers()
        assert not is_same_process(server.record) and stop_process(server.record) is StopResult.GONE


def test_zookeeper_fixture_really_works(zk_client: KazooClient, zookeeper_server: ServerEndpoint) -> None:
    zk_client.create("/ledgers/00/0000/L0042", b"\x01metadata", makepath=True)
    data, stat = zk_client.get("/ledgers/00/0000/L0042")
    assert data == b"\x01metadata" and stat.version == 0
    assert zk_client.get_children("/") == ["ledgers"]  # confined to its own chroot
    assert zookeeper_server.external or zookeeper_answers(*_host_port(zookeeper_server.address))


def test_zookeeper_digest_auth_from_settings(zk_client: KazooClient, service_settings: Settings) -> None:
    hosts = service_settings.zookeeper.connect.partition("/")[0] + zk_client.chroot
    authed = build_zookeeper_client(_with_auth(service_settings.zookeeper, "digest", "scrutiny:s3cret"), hosts=hosts)
    anonymous = KazooClient(hosts=hosts)
    authed.start(timeout=15)
    anonymous.start(timeout=15)
    try:
        authed.create("/private", b"only for scrutiny", acl=[make_digest_acl("scrutiny", "s3cret", all=True)])
        assert authed.get("/private")[0] == b"only for scrutiny"
        with pytest.raises(NoAuthError):
            anonymous.get("/private")
    finally:
        with contextlib.suppress(NoNodeError):
            authed.delete("/private")
        for client in (authed, anonymous):
            client.stop()
            client.close()


def test_kafka_fixture_really_works(kafka_topic: str, service_settings: Settings) -> None:
    producer = KafkaProducer(**producer_kwargs(service_settings.kafka), batch_size=1, linger_ms=0)
    try:
        for n in range(5):
            producer.send(kafka_topic, key=b"%d" % n, value=b"event-%d" % n).get(timeout=10)
        producer.flush(timeout=10)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(**consumer_kwargs(service_settings.kafka), enable_auto_commit=False)
    try:
        partition = TopicPartition(kafka_topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        got: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 15
        while len(got) < 5 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got.extend((record.key, record.value) for record in batch)
    finally:
        consumer.close()
    assert got == [(b"%d" % n, b"event-%d" % n) for n in range(5)]


def _with_auth(section: ZooKeeperSection, scheme: str, credentials: str) -> ZooKeeperSection:
    return replace(section, auth_scheme=scheme, auth_credentials=Secret(credentials))


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_a_restarted_kafka_broker_keeps_its_topics_and_records(tmp_path: Path) -> None:
    """The broker's data lives in its directory: stopped and started again there, nothing is lost."""
    with start_kafka(tmp_path) as first:
        admin = KafkaAdminClient(bootstrap_servers=first.address)
        admin.create_topics([NewTopic("kept", num_partitions=1, replication_factor=1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=first.address, acks="all", linger_ms=5)
        for index in range(50):
            producer.send("kept", key=str(index).encode(), value=f"record {index}".encode())
        producer.flush()
        producer.close()
    assert (tmp_path / "data" / "meta.properties").is_file()
    with start_kafka(tmp_path) as second:
        consumer = KafkaConsumer(bootstrap_servers=second.address, enable_auto_commit=False)
        try:
            partition = TopicPartition("kept", 0)
            consumer.assign([partition])
            consumer.seek_to_beginning()
            assert consumer.end_offsets([partition]) == {partition: 50}
            values: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(values) < 50 and time.monotonic() < deadline:
                values += [r.value for records in consumer.poll(timeout_ms=200).values() for r in records]
        finally:
            consumer.close()
    assert values == [f"record {index}".encode() for index in range(50)]


def test_kafka_cluster_ids_are_what_kraft_accepts() -> None:
    ids = {services_module.kafka_cluster_id() for _ in range(200)}
    assert len(ids) == 200  # random
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", text) and not text.startswith("-") for text in ids)
