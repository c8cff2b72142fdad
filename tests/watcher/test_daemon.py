"""The watcher against a real ZooKeeper and a real Kafka broker."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from scrutiny.connectors.kafka.config import consumer_kwargs, kafka_client_config
from scrutiny.connectors.kafka.events import autorecovery_health
from scrutiny.connectors.kafka.publisher import EventPublisher, TopicConfig
from scrutiny.connectors.kafka.settings import KafkaSection
from scrutiny.connectors.zookeeper.tree import TreeLayout, read_cluster
from scrutiny.connectors.zookeeper.watch import PersistentWatchClient
from scrutiny.core.autorecovery_health import AutoRecoveryHealth, AutoRecoveryRules
from scrutiny.core.backoff import Backoff
from scrutiny.core.ledger_metadata import LedgerState, Segment, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.metadata_redaction import redacted_metadata
from scrutiny.core.zk_paths import (
    auditor_election_path,
    available_bookie_path,
    cookie_path,
    ledger_path,
    readonly_bookie_path,
    underreplication_disable_path,
    underreplication_path,
)
from scrutiny.core.zk_records import (
    UnderReplicationMark,
    format_auditor_vote,
    format_layout,
    format_pulsar_racks,
    format_underreplication_mark,
    parse_layout,
)
from scrutiny.proto import ledger_events_pb2 as pb
from scrutiny.services.servers import start_kafka
from scrutiny.settings.loader import Settings
from scrutiny.watcher import daemon
from scrutiny.watcher.daemon import Watcher, WatcherConfig
from scrutiny.watcher.redaction_pool import RedactionPool
from tests.support.event_log import Folded, Record, expected_from, fold, read_topic, wait_until
from tests.support.servers import KafkaTopicFactory

pytestmark = pytest.mark.integration

ENSEMBLE = ("bk1:3181", "bk2:3181", "bk3:3181")
LONG_ID = 2**40 + 7  # a ledger id of the long hierarchical form
LAYOUT = format_layout(parse_layout(b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"))


def metadata(state: LedgerState = LedgerState.OPEN, last: int = -1, segments: int = 1) -> bytes:
    parts = [Segment(0, ENSEMBLE)] + [Segment(10 * k, ("bk4:3181", *ENSEMBLE[1:])) for k in range(1, segments)]
    md = build_ledger_metadata(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        segments=parts,
        state=state,
        last_entry_id=last,
        length=max(0, last + 1) * 10,
        custom_metadata={"pulsar/managed-ledger": b"public/default/persistent/t"},
    )
    return encode_ledger_metadata_v3(md)


@contextmanager
def running_watcher(
    settings: Settings,
    chroot: str,
    topic: str,
    watcher_id: str,
    *,
    kafka: str | None = None,
    max_pending: int = 20_000,
    lost_after_ms: int = 300_000,
    redaction: RedactionPool | None = None,
    autorecovery: AutoRecoveryRules | None = None,
) -> Iterator[Watcher]:
    """A watcher on its own client and thread, stopped and closed afterwards whatever happens."""
    zk = PersistentWatchClient(hosts=settings.zookeeper.connect + chroot, timeout=6.0)
    kafka_settings = settings.kafka if kafka is None else _with_bootstrap(settings, kafka)
    watcher = Watcher(
        zk,
        lambda: EventPublisher(
            kafka_client_config(kafka_settings).kwargs("scrutiny-watcher"),
            TopicConfig(topic, partitions=3, max_block_ms=2000, max_pending=max_pending),
        ),
        WatcherConfig(
            layout=TreeLayout(),
            watcher_id=watcher_id,
            tick_interval_s=0.5,
            backoff=Backoff(0.05, 0.5),
            bookie_lost_after_ms=lost_after_ms,
            redaction=redaction or RedactionPool(),
            autorecovery=autorecovery or AutoRecoveryRules(),
        ),
    )
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), name=watcher_id, daemon=True)
    thread.start()
    try:
        yield watcher
    finally:
        stop.set()
        thread.join(timeout=30)
        zk.stop()
        zk.close()


def _with_bootstrap(settings: Settings, address: str) -> KafkaSection:
    return replace(settings.kafka, bootstrap_servers=address)


def events(settings: Settings, topic: str, kafka: str | None = None) -> list[Record]:
    kafka_settings = settings.kafka if kafka is None else _with_bootstrap(settings, kafka)
    return read_topic(consumer_kwargs(kafka_settings), topic)


def zk_state(client: KazooClient) -> Folded:
    return expected_from(read_cluster(client, TreeLayout()))


def converges(settings: Settings, topic: str, client: KazooClient, kafka: str | None = None) -> Folded:
    """Wait until the events describe ZooKeeper's state exactly; return the fold."""
    folded: list[Folded] = []

    def same() -> bool:
        folded[:] = [fold(events(settings, topic, kafka))]
        return _comparable(folded[0]) == _comparable(zk_state(client))

    wait_until(same, 40, "the events to describe ZooKeeper's state")
    return folded[0]


def _comparable(state: Folded) -> tuple[object, ...]:
    return (state.ledgers, state.marks, state.writable, state.readonly, state.racks)


def seed(client: KazooClient) -> None:
    client.create("/ledgers/LAYOUT", LAYOUT, makepath=True)
    client.create(ledger_path(1), metadata(), makepath=True)
    client.create(ledger_path(LONG_ID), metadata(LedgerState.CLOSED, 99), makepath=True)
    client.create(available_bookie_path("bk1:3181"), b"", ephemeral=True, makepath=True)


def test_snapshot_then_live_changes_in_order(
    service_settings: Settings, zk_client: KazooClient, kafka_topic_factory: KafkaTopicFactory
) -> None:
    topic = kafka_topic_factory(partitions=3)
    seed(zk_client)
    with running_watcher(service_settings, zk_client.chroot, topic, "w1") as watcher:
        assert watcher.leading.wait(20)
        converges(service_settings, topic, zk_client)
        zk_client.set(ledger_path(1), metadata(LedgerState.OPEN, segments=2))  # ensemble change
        zk_client.set(ledger_path(1), metadata(LedgerState.CLOSED, 25, segments=2))  # closed
        zk_client.create(ledger_path(5), b"not metadata at all", makepath=True)
        mark = format_underreplication_mark(UnderReplicationMark(("bk2:3181",), 1_700_000_000_000))
        zk_client.create(underreplication_path(LONG_ID), mark, makepath=True)
        zk_client.create(available_bookie_path("bk2:3181"), b"", ephemeral=True, makepath=True)
        # A node changed again before the watcher read it is published once, in its newest state: wait for the
        # mark and the registration before they go, so that each step is seen.
        wait_until(lambda: _published(service_settings, topic, "UNDER_REPLICATION_MARKED"), 20, "the mark")
        wait_until(lambda: _published(service_settings, topic, "BOOKIE_REGISTERED", "bk2:3181"), 20, "bk2")
        zk_client.delete(available_bookie_path("bk1:3181"))
        zk_client.create(readonly_bookie_path("bk1:3181"), b"", ephemeral=True, makepath=True)
        zk_client.create("/bookies", format_pulsar_racks({"default": {"bk1:3181": "/r1"}}))
        zk_client.delete(underreplication_path(LONG_ID))
        zk_client.delete(ledger_path(LONG_ID))
        zk_client.delete(available_bookie_path("bk2:3181"))  # a bookie lost
        final = converges(service_settings, topic, zk_client)
        wait_until(lambda: _ticked_everywhere(events(service_settings, topic)), 20, "a tick on every partition")
    records = events(service_settings, topic)
    assert final.backwards == 0
    by_ledger = _kinds_by_ledger(records)
    # Two quick changes may be read as one: the last event always carries the final version.
    assert by_ledger[1][0] == ("LEDGER_CREATED", "SNAPSHOT")
    assert set(by_ledger[1][1:]) == {("LEDGER_CHANGED", "LIVE")} and len(by_ledger[1]) in (2, 3)
    assert by_ledger[LONG_ID][0] == ("LEDGER_CREATED", "SNAPSHOT")
    assert by_ledger[LONG_ID][-1] == ("LEDGER_DELETED", "LIVE")
    assert ("UNDER_REPLICATION_MARKED", "LIVE") in by_ledger[LONG_ID]
    bad = next(r.event for r in records if r.event.ledger_id == 5)
    assert bad.metadata == b"" and "missing header" in bad.decode_error  # unsearchable bytes: only their error
    assert all(r.key == str(r.event.ledger_id).encode() for r in records if r.event.ledger_id)
    partitions = {r.partition for r in records}
    cluster_kinds = ("SNAPSHOT_BEGIN", "SNAPSHOT_END", "BOOKIE_READONLY", "BOOKIE_UNREGISTERED", "RACKS_CHANGED")
    for kind in (*cluster_kinds, "TICK"):
        assert {r.partition for r in records if pb.EventKind.Name(r.event.kind) == kind} == partitions, kind
    assert all(r.key == b"cluster" for r in records if not r.event.ledger_id)


def _published(settings: Settings, topic: str, kind: str, bookie: str = "") -> bool:
    return any(
        pb.EventKind.Name(r.event.kind) == kind and (not bookie or r.event.bookie_id == bookie)
        for r in events(settings, topic)
    )


def _ticked_everywhere(records: list[Record]) -> bool:
    ticked = {r.partition for r in records if r.event.kind == pb.EventKind.TICK}
    return bool(ticked) and ticked == {r.partition for r in records}


def _kinds_by_ledger(records: list[Record]) -> dict[int, list[tuple[str, str]]]:
    """Each ledger's event kinds and origins in order, LEDGER_RECHECK aside (a bookie moved from writable to
    read-only may be read unregistered in between: a restart, whose rechecks the bookie-lifecycle test covers)."""
    out: dict[int, list[tuple[str, str]]] = {}
    for record in records:
        if record.event.ledger_id and record.event.kind != pb.EventKind.LEDGER_RECHECK:
            out.setdefault(record.event.ledger_id, []).append(
                (pb.EventKind.Name(record.event.kind), pb.Origin.Name(record.event.origin))
            )
    return out


def test_a_snapshot_redacted_by_worker_processes_publishes_each_ledger_without_its_password(
    service_settings: Settings, zk_client: KazooClient, kafka_topic_factory: KafkaTopicFactory
) -> None:
    topic = kafka_topic_factory(partitions=3)
    seed(zk_client)
    stored = {1: zk_client.get(ledger_path(1))[0], LONG_ID: zk_client.get(ledger_path(LONG_ID))[0]}
    for ledger_id in range(100, 160):
        password = b"pw-%d" % ledger_id
        md = build_ledger_metadata(
            ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[Segment(0, ENSEMBLE)], password=password
        )
        stored[ledger_id] = encode_ledger_metadata_v3(md) + (b"x" if ledger_id % 10 == 0 else b"")  # some undecodable
        zk_client.create(ledger_path(ledger_id), stored[ledger_id], makepath=True)
    pool = RedactionPool(workers=1, min_ledgers=10, chunk=7)
    with running_watcher(service_settings, zk_client.chroot, topic, "w1", redaction=pool) as watcher:
        assert watcher.leading.wait(20)
        converges(service_settings, topic, zk_client)
    records = [r for r in events(service_settings, topic) if r.event.kind == pb.EventKind.LEDGER_CREATED]
    assert sorted(r.event.ledger_id for r in records) == sorted(stored)
    for record in records:
        expected = redacted_metadata(stored[record.event.ledger_id])
        assert (record.event.metadata, record.event.decode_error) == (expected.data, expected.decode_error)
        assert b"pw-" not in record.value
    assert sum(bool(r.event.decode_error) for r in records) == 6


def test_session_expiry_in_the_middle_of_changes(
    service_settings: Settings, zk_client: KazooClient, kafka_topic_factory: KafkaTopicFactory
) -> None:
    topic = kafka_topic_factory(partitions=2)
    seed(zk_client)
    with running_watcher(service_settings, zk_client.chroot, topic, "w1") as watcher:
        assert watcher.leading.wait(20)
        converges(service_settings, topic, zk_client)
        for ledger_id in range(100, 120):
            zk_client.create(ledger_path(ledger_id), metadata(), makepath=True)
        _expire_session(service_settings, watcher.zk)
        for ledger_id in range(100, 110):
            zk_client.set(ledger_path(ledger_id), metadata(LedgerState.CLOSED, 3))
        for ledger_id in range(110, 115):
            zk_client.delete(ledger_path(ledger_id))
        final = converges(service_settings, topic, zk_client)
        assert watcher.metrics.resyncs.labels("SNAPSHOT")._value.get() >= 1
        assert watcher.metrics.resyncs.labels("RESYNC")._value.get() >= 1
    assert final.backwards == 0


def _expire_session(settings: Settings, zk: KazooClient) -> None:
    """ZooKeeper's own way to expire a session: another client takes it over and closes it."""
    session_id, password = zk.client_id
    thief = KazooClient(hosts=settings.zookeeper.connect, client_id=(session_id, password))
    thief.start(timeout=10)
    thief.stop()
    thief.close()


def test_standby_takes_over_without_gaps(
    service_settings: Settings, zk_client: KazooClient, kafka_topic_factory: KafkaTopicFactory
) -> None:
    topic = kafka_topic_factory(partitions=2)
    seed(zk_client)
    with (
        running_watcher(service_settings, zk_client.chroot, topic, "standby") as standby,
        running_watcher(service_settings, zk_client.chroot, topic, "leader") as leader,
    ):
        assert leader.leading.wait(20) or standby.leading.wait(20)
        first = leader if leader.leading.is_set() else standby
        second = standby if first is leader else leader
        converges(service_settings, topic, zk_client)
        assert not second.leading.is_set()
        first_epoch = first.epoch
        for ledger_id in range(200, 210):
            zk_client.create(ledger_path(ledger_id), metadata(), makepath=True)
        first.zk.stop()  # the active watcher dies: its session ends, its election node goes
        zk_client.set(ledger_path(200), metadata(LedgerState.CLOSED, 5))
        zk_client.delete(ledger_path(201))
        assert second.leading.wait(30)
        assert second.epoch > first_epoch
        final = converges(service_settings, topic, zk_client)
    assert final.backwards == 0


def test_kafka_unavailable_for_a_while(service_settings: Settings, zk_client: KazooClient, tmp_path: Path) -> None:
    broker = start_kafka(tmp_path / "kafka")
    try:
        seed(zk_client)
        with running_watcher(service_settings, zk_client.chroot, "events", "w1", kafka=broker.address) as watcher:
            assert watcher.leading.wait(20)
            converges(service_settings, "events", zk_client, broker.address)
            os.kill(broker.pid, signal.SIGSTOP)  # the broker stops answering, keeps its data
            try:
                for ledger_id in range(300, 310):
                    zk_client.create(ledger_path(ledger_id), metadata(), makepath=True)
                zk_client.set(ledger_path(1), metadata(LedgerState.CLOSED, 7))
                zk_client.delete(ledger_path(LONG_ID))
                time.sleep(4)
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            final = converges(service_settings, "events", zk_client, broker.address)
        assert final.backwards == 0
    finally:
        broker.stop()


def test_changes_cut_off_by_a_lost_session_while_kafka_is_down_are_published_later(
    service_settings: Settings, zk_client: KazooClient, tmp_path: Path
) -> None:
    """The remembered state advances only past what Kafka acknowledged: nothing a lost session interrupts is lost."""
    broker = start_kafka(tmp_path / "kafka")
    try:
        seed(zk_client)
        with running_watcher(
            service_settings, zk_client.chroot, "events", "w1", kafka=broker.address, max_pending=3
        ) as watcher:
            assert watcher.leading.wait(20)
            converges(service_settings, "events", zk_client, broker.address)
            os.kill(broker.pid, signal.SIGSTOP)  # the broker stops answering, keeps its data
            try:
                for ledger_id in range(400, 420):
                    zk_client.create(ledger_path(ledger_id), metadata(), makepath=True)
                zk_client.delete(ledger_path(LONG_ID))
                held = watcher.metrics.held_back.labels("events")
                wait_until(lambda: held._value.get() >= 1, 30, "the watcher to hold events back")
                _expire_session(service_settings, watcher.zk)  # publishing stops half-way through the batch
                wait_until(lambda: watcher.epoch > 0 and watcher.leading.is_set(), 30, "a new leadership")
                zk_client.delete(ledger_path(1))  # while the new leadership's walk waits for Kafka too
                zk_client.delete(ledger_path(401))
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            final = converges(service_settings, "events", zk_client, broker.address)
            assert watcher.metrics.resyncs.labels("RESYNC")._value.get() >= 1
        assert final.backwards == 0
    finally:
        broker.stop()


def test_scrutiny_watch_command(
    service_settings: Settings, zk_client: KazooClient, kafka_topic_factory: KafkaTopicFactory
) -> None:
    """The console script, configured only through the environment, publishes the snapshot and stops on time."""
    topic = kafka_topic_factory(partitions=2)
    seed(zk_client)
    env = {
        **os.environ,
        "SCRUTINY_ZOOKEEPER": service_settings.zookeeper.connect + zk_client.chroot,
        "SCRUTINY_KAFKA": service_settings.kafka.bootstrap_servers,
        "SCRUTINY_KAFKA_TOPIC": topic,
        "SCRUTINY_WATCHER_TICK_INTERVAL_SECONDS": "1",
    }
    scrutiny = Path(sys.executable).parent / "scrutiny"
    done = subprocess.run(
        [str(scrutiny), "watch", "--duration", "6", "--watcher-id", "cli"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "watcher cli stopped" in done.stderr
    records = events(service_settings, topic)
    assert _comparable(fold(records)) == _comparable(zk_state(zk_client))
    assert {r.event.watcher_id for r in records} == {"cli"}
    assert any(r.event.kind == pb.EventKind.TICK for r in records)


def _bookie_events(settings: Settings, topic: str) -> list[tuple[str, str, int]]:
    """(kind, bookie, ledger id) of the BOOKIE_LOST (once per event: every partition has a copy) and LEDGER_RECHECK
    events, with the recheck's reason in the kind."""
    out: list[tuple[str, str, int]] = []
    seen: set[int] = set()
    for record in events(settings, topic):
        event = record.event
        if event.kind == pb.EventKind.BOOKIE_LOST and event.sequence not in seen:
            seen.add(event.sequence)
            out.append(("lost", event.bookie_id, event.lost.ledgers * 1000 + event.lost.entries))
        elif event.kind == pb.EventKind.LEDGER_RECHECK:
            out.append((pb.RecheckReason.Name(event.recheck), event.bookie_id, event.ledger_id))
    return out


def test_bookie_lost_back_and_reformatted_have_their_ledgers_checked_again(
    service_settings: Settings,
    zk_client: KazooClient,
    kafka_topic_factory: KafkaTopicFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(daemon, "SEARCH_STEP", 1)  # each search spread over passes of the loop, one ledger a pass
    monkeypatch.setattr(daemon, "SEARCH_SLICE_S", 0.0)
    topic = kafka_topic_factory(partitions=3)
    zk_client.create("/ledgers/LAYOUT", LAYOUT, makepath=True)
    zk_client.create(ledger_path(1), metadata(), makepath=True)  # open, nothing sealed: its writer only looked at
    zk_client.create(ledger_path(2), metadata(LedgerState.CLOSED, 9), makepath=True)  # bk1..bk3, entries 0..9
    zk_client.create(ledger_path(3), metadata(LedgerState.CLOSED, 19, segments=2), makepath=True)  # bk1 gone at 10
    for bookie in ENSEMBLE:
        zk_client.create(cookie_path(bookie), b"cookie", makepath=True)
        zk_client.create(available_bookie_path(bookie), b"", ephemeral=True, makepath=True)
    with running_watcher(service_settings, zk_client.chroot, topic, "w1", lost_after_ms=1500) as watcher:
        assert watcher.leading.wait(20)
        converges(service_settings, topic, zk_client)
        zk_client.delete(available_bookie_path("bk1:3181"))
        # bk1 (index 0 of E=3, WQ=2) holds entries e with -e mod 3 < 2: 7 of 0..9 in ledger 2, 7 of 0..9 in ledger 3.
        lost = [("lost", "bk1:3181", 2 * 1000 + 14)]
        lost += [("BOOKIE_LOST_RECHECK", "bk1:3181", 2), ("BOOKIE_LOST_RECHECK", "bk1:3181", 3)]
        lost += [("BOOKIE_LOST_RECHECK", "bk1:3181", 1)]  # open, being written to bk1: is its writer stalled?
        wait_until(lambda: sorted(_bookie_events(service_settings, topic)) == sorted(lost), 30, "bk1 lost")
        zk_client.create(available_bookie_path("bk1:3181"), b"", ephemeral=True, makepath=True)
        back = [("BOOKIE_RETURNED", "bk1:3181", n) for n in (1, 2, 3)]
        wait_until(lambda: sorted(_bookie_events(service_settings, topic)) == sorted(lost + back), 30, "bk1 back")
        # bk2 formatted again: unregistered, cookie deleted and made again, registered (quicker than the delay).
        zk_client.delete(available_bookie_path("bk2:3181"))
        zk_client.delete(cookie_path("bk2:3181"))
        zk_client.create(cookie_path("bk2:3181"), b"cookie")
        zk_client.create(available_bookie_path("bk2:3181"), b"", ephemeral=True, makepath=True)
        formatted = [("COOKIE_CHANGED", "bk2:3181", 2), ("COOKIE_CHANGED", "bk2:3181", 3)]
        wait_until(
            lambda: sorted(_bookie_events(service_settings, topic)) == sorted(lost + back + formatted), 30, "bk2"
        )
        # bk3 restarted: away for less than the delay, back with its cookie.
        zk_client.delete(available_bookie_path("bk3:3181"))
        time.sleep(1)
        zk_client.create(available_bookie_path("bk3:3181"), b"", ephemeral=True, makepath=True)
        restarted = [("BOOKIE_RESTARTED", "bk3:3181", 2), ("BOOKIE_RESTARTED", "bk3:3181", 3)]
        wait_until(
            lambda: sorted(_bookie_events(service_settings, topic)) == sorted(lost + back + formatted + restarted),
            30,
            "bk3",
        )
        # bk3's cookie rewritten in place (another instance id): a cookie change too.
        zk_client.set(cookie_path("bk3:3181"), b"another instance")
        rewritten = [("COOKIE_CHANGED", "bk3:3181", 2), ("COOKIE_CHANGED", "bk3:3181", 3)]
        everything = sorted(lost + back + formatted + restarted + rewritten)
        wait_until(lambda: sorted(_bookie_events(service_settings, topic)) == everything, 30, "bk3's cookie rewritten")
        time.sleep(2)  # nothing more: bk3 was never away for the delay
        assert sorted(_bookie_events(service_settings, topic)) == everything


def _health_events(settings: Settings, topic: str) -> list[AutoRecoveryHealth]:
    """The AUTORECOVERY_HEALTH judgements published, in order, once each (every partition has a copy)."""
    seen: dict[int, AutoRecoveryHealth] = {}
    for record in events(settings, topic):
        if record.event.kind == pb.EventKind.AUTORECOVERY_HEALTH:
            seen.setdefault(record.event.sequence, autorecovery_health(record.event))
    return [seen[s] for s in sorted(seen)]


def test_autorecovery_disabled_and_the_auditor_s_absence_are_judged_and_published_as_they_change(
    service_settings: Settings, zk_client: KazooClient, kafka_topic_factory: KafkaTopicFactory
) -> None:
    topic = kafka_topic_factory(partitions=3)
    zk_client.create("/ledgers/LAYOUT", LAYOUT, makepath=True)
    votes = auditor_election_path() + "/V_"
    vote = zk_client.create(votes, format_auditor_vote("bk1:3181"), ephemeral=True, sequence=True, makepath=True)
    rules = AutoRecoveryRules(disabled_critical_ms=2000, auditor_expected=True, no_auditor_grace_ms=2000)
    with running_watcher(service_settings, zk_client.chroot, topic, "w1", autorecovery=rules) as watcher:
        assert watcher.leading.wait(20)
        healthy = AutoRecoveryHealth(auditor="bk1:3181")
        wait_until(lambda: _health_events(service_settings, topic) == [healthy], 30, "the first judgement")
        zk_client.create(underreplication_disable_path(), b"")
        since = zk_client.exists(underreplication_disable_path()).ctime
        disabled = AutoRecoveryHealth(disabled_since_ms=since, auditor="bk1:3181")
        critical = AutoRecoveryHealth(disabled_since_ms=since, disabled_critical=True, auditor="bk1:3181")
        wait_until(lambda: _health_events(service_settings, topic)[1:] == [disabled, critical], 30, "critical")
        zk_client.delete(vote)
        wait_until(lambda: len(_health_events(service_settings, topic)) == 5, 30, "the auditor's absence")
        unsettled, absent = _health_events(service_settings, topic)[3:]
        assert unsettled.auditor_unsettled and not unsettled.no_auditor and unsettled.disabled_critical
        assert absent.no_auditor and not absent.auditor_unsettled
        assert absent.no_auditor_since_ms == unsettled.no_auditor_since_ms
        assert absent.no_auditor_since_ms is not None and absent.no_auditor_since_ms >= since
        zk_client.delete(underreplication_disable_path())
        zk_client.create(votes, b"\xff not a vote's text", ephemeral=True, sequence=True)  # the lowest: the auditor
        zk_client.create(votes, format_auditor_vote("bk2:3181"), ephemeral=True, sequence=True)
        unnamed = AutoRecoveryHealth(auditor="")  # a vote whose text does not parse is a vote all the same
        wait_until(lambda: _health_events(service_settings, topic)[-1] == unnamed, 30, "the auditor back")
        time.sleep(1)
        published = _health_events(service_settings, topic)
        assert published[-1] == unnamed and len(published) <= 7  # at most one step between, none repeated
        assert all(a != b for a, b in itertools.pairwise(published))
