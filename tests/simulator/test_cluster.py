"""The simulated cluster against a real ZooKeeper: real-format nodes, bookies on both APIs, faults, schedule.

Each test runs its own event loop and stops its cluster in ``finally`` (ephemeral nodes, ports, and
the nodes it wrote), inside the per-test chroot of the ``zk_client`` fixture.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from scrutiny.connectors.bookies.agent_client import AgentClient
from scrutiny.connectors.bookies.agent_protocol import AGENT_ENDPOINT_PROTOCOL
from scrutiny.connectors.bookies.v3_client import BookieClientConfig, BookieV3Client
from scrutiny.core.backoff import Backoff
from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.errors import MetadataFormatError
from scrutiny.core.ledger_metadata import LedgerState, decode_ledger_metadata
from scrutiny.core.verdict import AnswerKind, BookieAnswer
from scrutiny.core.vocabulary import Category
from scrutiny.core.zk_paths import (
    LedgerManager,
    auditor_election_path,
    available_bookie_path,
    ledger_id_from_path,
    ledger_id_from_underreplication_lock_path,
    ledger_path,
    readonly_bookie_path,
    underreplication_disable_path,
    underreplication_lock_path,
    underreplication_locks_path,
    underreplication_path,
)
from scrutiny.core.zk_records import (
    format_lock_data,
    parse_bookie_service_info,
    parse_layout,
    parse_pulsar_racks,
    parse_underreplication_mark,
)
from scrutiny.paths import PROJECT_ROOT
from scrutiny.services.servers import start_zookeeper
from scrutiny.simulator.cluster import AppliedChange, SimCluster
from scrutiny.simulator.generator import generate, parse_fault_mix
from scrutiny.simulator.model import Scenario
from scrutiny.simulator.scenario import load_scenario, parse_scenario
from scrutiny.simulator.state import ClusterState
from scrutiny.simulator.truth import cluster_truth, load_truth, same_entries
from tests.support.servers import ServerEndpoint

pytestmark = pytest.mark.integration

REPO = PROJECT_ROOT
EXAMPLE = REPO / "conf" / "scenarios" / "example.toml"
V3_CONFIG = BookieClientConfig(
    request_timeout_s=0.6, connect_timeout_s=0.5, retry=Backoff(initial_s=0.01, maximum_s=0.05)
)
ROOT = "/ledgers"

HEAD = """
[scenario]
seed = 5
[cluster]
bookies = 6
racks = ["/r1", "/r2", "/r3"]
[defaults]
ensemble_size = 3
write_quorum = 2
last_entry = 49
"""


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())


async def with_cluster(scenario: Scenario, client: KazooClient, check: Callable[[SimCluster], Awaitable[None]]) -> None:
    cluster = SimCluster(scenario, client)
    await cluster.start()
    try:
        await check(cluster)
    finally:
        await cluster.stop()


def v3_address(cluster: SimCluster, bookie: str) -> tuple[str, int]:
    return cluster.bookies[bookie].v3_address


async def v3_answers(address: tuple[str, int], ledgers: Iterable[int], timeout: float = 2.0) -> dict[int, BookieAnswer]:
    client = BookieV3Client(*address, config=V3_CONFIG)
    try:
        return await client.get_listings(list(ledgers), timeout=timeout)
    finally:
        await client.close()


async def entry_headers(address: tuple[str, int], entries: list[tuple[int, int]]) -> dict[tuple[int, int], Any]:
    client = BookieV3Client(*address, config=V3_CONFIG)
    try:
        return await client.read_entry_headers(entries, timeout=2.0)
    finally:
        await client.close()


async def agent_answers(address: str, ledgers: Iterable[int], timeout: float = 2.0) -> dict[int, BookieAnswer]:
    def ask() -> dict[int, BookieAnswer]:
        with AgentClient(address, timeout_s=timeout) as client:
            return client.get_listings(list(ledgers))

    return await asyncio.to_thread(ask)


def assert_holds(answer: BookieAnswer, state: ClusterState, bookie: str, ledger_id: int) -> None:
    expected = state.held_groups(bookie, ledger_id)
    if expected is None:
        assert answer.kind is AnswerKind.NO_LEDGER, (bookie, ledger_id, answer)
    else:
        assert answer.kind is AnswerKind.LISTING, (bookie, ledger_id, answer)
        assert same_entries(answer.groups, expected), (bookie, ledger_id)


def closed_port(address: tuple[str, int]) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(address) != 0


def ledger_nodes(client: KazooClient, root: str = ROOT) -> list[str]:
    """Every ledger znode below the root (hierarchical layout), by walking the 2- and 4-digit directories."""
    out: list[str] = []
    for top in (c for c in client.get_children(root) if c.isdigit()):
        for middle in client.get_children(f"{root}/{top}"):
            out += [f"{root}/{top}/{middle}/{leaf}" for leaf in client.get_children(f"{root}/{top}/{middle}")]
    return out


async def poll(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Return once ``condition()`` holds; fail after ``timeout`` seconds (a hang, never mere slowness)."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# --------------------------------------------------------------------------- the example cluster


def test_the_example_cluster_in_zookeeper_and_on_both_apis(zk_client: KazooClient) -> None:
    scenario = load_scenario(EXAMPLE)

    async def check(cluster: SimCluster) -> None:
        assert cluster.started_at_ms is not None
        data, _ = zk_client.get(f"{ROOT}/LAYOUT")
        assert data == b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
        assert parse_layout(data).manager is LedgerManager.HIERARCHICAL
        assert zk_client.get(f"{ROOT}/INSTANCEID")[0].decode() == scenario.cluster.instance_id
        specs = {spec.ledger_id: spec for spec in scenario.ledgers}
        found = {ledger_id_from_path(p, root=ROOT) for p in ledger_nodes(zk_client)}
        assert found == set(specs)
        for ledger_id, spec in specs.items():
            data, _ = zk_client.get(ledger_path(ledger_id, root=ROOT))
            if spec.corrupt is not None:
                with pytest.raises(MetadataFormatError):
                    decode_ledger_metadata(data)
                continue
            metadata = decode_ledger_metadata(data)
            assert metadata.format_version == 3 and metadata.state is spec.state
            assert (metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum) == (
                spec.ensemble_size,
                spec.write_quorum,
                spec.ack_quorum,
            )
            assert [(s.first_entry_id, s.ensemble) for s in metadata.segments] == [
                (s.first, s.ensemble) for s in spec.segments
            ]
            assert metadata.last_entry_id == (spec.last_entry if spec.closed else None)
        assert decode_ledger_metadata(zk_client.get(ledger_path(1, root=ROOT))[0]).pulsar_topic == (
            "persistent://public/default/orders-1"
        )
        mark = parse_underreplication_mark(zk_client.get(underreplication_path(9, root=ROOT))[0])
        assert mark.replicas == ("bookie-3",) and mark.ctime_ms == cluster.started_at_ms - 7_200_000
        assert dict(parse_pulsar_racks(zk_client.get("/bookies")[0]).racks) == scenario.racks()
        assert sorted(zk_client.get_children(f"{ROOT}/available")) == [
            "bookie-1",
            "bookie-2",
            "bookie-3",
            "bookie-4",
            "bookie-6",
            "readonly",
        ]
        assert zk_client.get_children(f"{ROOT}/available/readonly") == ["bookie-5"]
        for bookie_id, bookie in cluster.bookies.items():
            path = (readonly_bookie_path if bookie_id == "bookie-5" else available_bookie_path)(bookie_id, root=ROOT)
            data, stat = zk_client.get(path)
            assert stat.ephemeralOwner != 0
            info = parse_bookie_service_info(data)
            assert info is not None and info.rpc_address() == bookie.v3_address
            agent = [e for e in info.endpoints if e.protocol == AGENT_ENDPOINT_PROTOCOL]
            assert [f"{e.host}:{e.port}" for e in agent] == [bookie.agent_address]
            assert zk_client.get(f"{ROOT}/cookies/{bookie_id}")[0].startswith(b"5\n")
        state = cluster.state
        for bookie_id, bookie in cluster.bookies.items():
            over_v3 = await v3_answers(bookie.v3_address, specs)
            over_agent = await agent_answers(bookie.agent_address, specs)
            for ledger_id in specs:
                if state.bookies[bookie_id].answers_unknown(ledger_id, state.checker):
                    continue
                assert_holds(over_v3[ledger_id], state, bookie_id, ledger_id)
                assert_holds(over_agent[ledger_id], state, bookie_id, ledger_id)
        eio_v3, eio_agent = (
            (await v3_answers(v3_address(cluster, "bookie-4"), [6]))[6],
            (await agent_answers(cluster.bookies["bookie-4"].agent_address, [6]))[6],
        )
        assert eio_v3.kind is AnswerKind.UNKNOWN and "EIO" in eio_v3.reason
        assert eio_agent.kind is AnswerKind.UNKNOWN and "EIO" in eio_agent.reason
        limbo_v3 = (await v3_answers(v3_address(cluster, "bookie-6"), [12]))[12]
        limbo_agent = (await agent_answers(cluster.bookies["bookie-6"].agent_address, [12]))[12]
        assert limbo_v3.kind is AnswerKind.UNKNOWN and "EUNKNOWNLEDGERSTATE" in limbo_v3.reason
        assert limbo_agent.kind is AnswerKind.UNKNOWN and "limbo" in limbo_agent.reason
        # Plain entry reads: ledger 13 was closed at 99 too low; bookie-1 alone kept 100..129.
        read = await entry_headers(v3_address(cluster, "bookie-1"), [(13, 129), (13, 130), (999, 0)])
        assert read[13, 129] == EntryHeader(13, 129, 128, 130 * 1024)  # the writer had 128 acknowledged
        assert (read[13, 130], read[999, 0]) == ("status ENOENTRY", "status ENOLEDGER")
        assert (await entry_headers(v3_address(cluster, "bookie-2"), [(13, 129)]))[13, 129] == "status ENOENTRY"
        eio = await entry_headers(v3_address(cluster, "bookie-4"), [(6, 1)])  # the bookie's faults apply too
        limbo = await entry_headers(v3_address(cluster, "bookie-6"), [(12, 0)])
        assert (eio[6, 1], limbo[12, 0]) == ("status EIO", "status EUNKNOWNLEDGERSTATE")

    cluster_ports: list[tuple[str, int]] = []

    async def body() -> None:
        cluster = SimCluster(scenario, zk_client)
        await cluster.start()
        try:
            await check(cluster)
            for bookie in cluster.bookies.values():
                host, port = bookie.agent_address.split(":")
                cluster_ports.extend([bookie.v3_address, (host, int(port))])
        finally:
            await cluster.stop()
        assert zk_client.exists(ROOT) is None and zk_client.exists("/bookies") is None

    run(body)
    assert cluster_ports and all(closed_port(address) for address in cluster_ports)


def test_refuses_to_overwrite_a_cluster_and_keeps_metadata_when_asked(zk_client: KazooClient) -> None:
    scenario = parse_scenario(HEAD + '[[ledgers]]\nids = [[1, 3]]\nensemble = "auto"\n')

    async def body() -> None:
        first = SimCluster(scenario, zk_client)
        await first.start()
        await first.stop(keep_metadata=True)
        assert zk_client.get_children(f"{ROOT}/available") == ["readonly"]  # registrations are gone
        assert len(ledger_nodes(zk_client)) == 3
        with pytest.raises(Exception, match="already holds a cluster"):
            await SimCluster(scenario, zk_client).start()
        again = SimCluster(scenario, zk_client, replace=True)
        await again.start()
        await again.stop()
        assert zk_client.exists(ROOT) is None

    run(body)


# --------------------------------------------------------------------------- faults


def test_faults_behave_as_described_on_both_apis(zk_client: KazooClient) -> None:
    scenario = parse_scenario(
        HEAD
        + """
[bookies.bookie-1]
fault = "unresponsive"
[bookies.bookie-2]
fault = { kind = "garbage", garbage = "negative_length" }
[bookies.bookie-3]
fault = { kind = "slow", delay_s = 0.3 }
[bookies.bookie-4]
mode = "stopped"
[bookies.bookie-5]
fault = { kind = "status", status = "ETOOMANYREQUESTS", ledgers = [3] }
[[ledgers]]
ids = [1, 2]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
[[ledgers]]
id = 3
ensemble = ["bookie-4", "bookie-5", "bookie-6"]
[[ledgers]]
id = 4
ensemble = ["bookie-6", "bookie-5", "bookie-3"]
"""
    )

    async def check(cluster: SimCluster) -> None:
        state = cluster.state
        agent = {b: s.agent_address for b, s in cluster.bookies.items()}
        started = time.monotonic()
        v3, ag = await asyncio.gather(
            v3_answers(v3_address(cluster, "bookie-1"), [1], timeout=0.5), agent_answers(agent["bookie-1"], [1], 0.5)
        )
        assert v3[1].kind is AnswerKind.UNKNOWN and "timeout" in v3[1].reason  # unresponsive
        assert ag[1].kind is AnswerKind.UNKNOWN and "DEADLINE_EXCEEDED" in ag[1].reason
        assert time.monotonic() - started < 20.0  # the 0.5 s deadlines ended both: the bookie never answers
        v3 = await v3_answers(v3_address(cluster, "bookie-2"), [1])
        ag = await agent_answers(agent["bookie-2"], [1])
        assert v3[1].kind is AnswerKind.UNKNOWN and ag[1].kind is AnswerKind.UNKNOWN  # garbage
        assert "malformed" in ag[1].reason
        started = time.monotonic()
        v3 = await v3_answers(v3_address(cluster, "bookie-3"), [1, 4])
        ag = await agent_answers(agent["bookie-3"], [1, 4])
        assert time.monotonic() - started >= 0.6  # slow: 0.3 s each way, but answered
        for ledger_id in (1, 4):
            assert_holds(v3[ledger_id], state, "bookie-3", ledger_id)
            assert_holds(ag[ledger_id], state, "bookie-3", ledger_id)
        stopped = cluster.bookies["bookie-4"]  # never started: nothing listens, nothing is registered
        assert not stopped.running and zk_client.exists(available_bookie_path("bookie-4", root=ROOT)) is None
        assert zk_client.exists(readonly_bookie_path("bookie-4", root=ROOT)) is None
        v3 = await v3_answers(v3_address(cluster, "bookie-5"), [2, 3, 4])
        ag = await agent_answers(agent["bookie-5"], [2, 3, 4])
        assert v3[3].kind is AnswerKind.UNKNOWN and "ETOOMANYREQUESTS" in v3[3].reason
        assert ag[3].kind is AnswerKind.UNKNOWN and "ETOOMANYREQUESTS" in ag[3].reason
        for ledger_id in (2, 4):  # the fault is scoped to ledger 3
            assert_holds(v3[ledger_id], state, "bookie-5", ledger_id)
            assert_holds(ag[ledger_id], state, "bookie-5", ledger_id)
        # The truth says what a perfect checker makes of this.
        truth = {(v.ledger_id, v.category, v.bookie) for v in cluster_truth(state, 0.0)}
        assert (1, Category.BOOKIE_UNRESPONSIVE, "bookie-1") in truth
        assert (1, Category.BOOKIE_UNRESPONSIVE, "bookie-2") in truth
        assert (3, Category.BOOKIE_UNRESPONSIVE, "bookie-5") in truth
        assert (3, Category.BOOKIE_NOT_REGISTERED, "bookie-4") in truth
        assert not any(v[2] == "bookie-3" for v in truth)

    async def body() -> None:
        started = time.monotonic()
        await with_cluster(scenario, zk_client, check)
        assert time.monotonic() - started < 60.0  # a hanging agent call does not hold up the stop forever

    run(body)


# --------------------------------------------------------------------------- the schedule


def test_scheduled_changes_happen_at_their_time(zk_client: KazooClient) -> None:
    scenario = parse_scenario(
        HEAD
        + """
[[ledgers]]
id = 1
state = "OPEN"
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
[[ledgers]]
ids = [2, 3]
ensemble = ["bookie-2", "bookie-3", "bookie-4"]

[[schedule]]
at = 0.3
action = "close"
ledger = 1
[[schedule]]
at = 0.3
action = "kill"
bookie = "bookie-2"
[[schedule]]
at = 0.8
action = "revive"
bookie = "bookie-2"
[[schedule]]
at = 0.8
action = "wipe"
bookie = "bookie-3"
[[schedule]]
at = 0.8
action = "readonly"
bookie = "bookie-4"
[[schedule]]
at = 0.8
action = "mark"
ledger = 2
replicas = ["bookie-3"]
[[schedule]]
at = 0.8
action = "delete"
ledger = 3
[[schedule]]
at = 0.8
action = "fault"
bookie = "bookie-1"
fault = { kind = "status", status = "EIO" }
"""
    )

    def metadata(ledger_id: int) -> LedgerState:
        return decode_ledger_metadata(zk_client.get(ledger_path(ledger_id, root=ROOT))[0]).state

    async def check(cluster: SimCluster) -> None:
        before = await v3_answers(v3_address(cluster, "bookie-2"), [1, 2])
        assert metadata(1) is LedgerState.OPEN
        cluster.start_schedule()
        await poll(lambda: metadata(1) is LedgerState.CLOSED, "ledger 1 closed")
        await poll(lambda: zk_client.exists(available_bookie_path("bookie-2", root=ROOT)) is None, "bookie-2 gone")
        if cluster.elapsed_s() < 0.75:  # still stopped: refused, on the address it was registered with
            refused = (await v3_answers(v3_address(cluster, "bookie-2"), [1], timeout=0.3))[1]
            assert refused.kind is AnswerKind.UNKNOWN and "refused" in refused.reason
        await poll(lambda: zk_client.exists(ledger_path(3, root=ROOT)) is None, "ledger 3 deleted")
        await poll(lambda: len(cluster.applied) == len(scenario.schedule), "the whole schedule")
        assert all(0 <= c.applied_s - c.planned_s < 0.5 for c in cluster.applied)
        info = parse_bookie_service_info(zk_client.get(available_bookie_path("bookie-2", root=ROOT))[0])
        assert info is not None and info.rpc_address() == cluster.bookies["bookie-2"].v3_address
        after = await v3_answers(v3_address(cluster, "bookie-2"), [1, 2])
        for ledger_id in (1, 2):  # revived with its data
            assert same_entries(after[ledger_id].groups, before[ledger_id].groups)
        wiped = cluster.bookies["bookie-3"]
        assert zk_client.exists(available_bookie_path("bookie-3", root=ROOT)) is not None
        assert all(a.kind is AnswerKind.NO_LEDGER for a in (await v3_answers(wiped.v3_address, [1, 2])).values())
        assert all(a.kind is AnswerKind.NO_LEDGER for a in (await agent_answers(wiped.agent_address, [1, 2])).values())
        assert zk_client.exists(readonly_bookie_path("bookie-4", root=ROOT)) is not None
        assert zk_client.exists(available_bookie_path("bookie-4", root=ROOT)) is None
        mark = parse_underreplication_mark(zk_client.get(underreplication_path(2, root=ROOT))[0])
        assert mark.replicas == ("bookie-3",) and mark.ctime_ms is not None
        eio = (await v3_answers(v3_address(cluster, "bookie-1"), [1]))[1]
        assert eio.kind is AnswerKind.UNKNOWN and "EIO" in eio.reason

    run(lambda: with_cluster(scenario, zk_client, check))


def test_the_autorecovery_nodes_appear_and_disappear_at_their_time(zk_client: KazooClient) -> None:
    scenario = parse_scenario(
        HEAD.replace("bookies = 6\n", "bookies = 6\nautorecovery_disabled = true\n")
        + """
[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3"]

[[schedule]]
at = 0.3
action = "enable_autorecovery"
[[schedule]]
at = 0.3
action = "stop_auditor"
[[schedule]]
at = 0.8
action = "disable_autorecovery"
[[schedule]]
at = 0.8
action = "start_auditor"
"""
    )
    disable = underreplication_disable_path(root=ROOT)
    election = auditor_election_path(root=ROOT)
    vote = b'bookieId: "bookie-1"\n'  # AuditorVoteFormat as protobuf text, the first bookie's id

    def votes() -> list[str]:
        return sorted(zk_client.get_children(election)) if zk_client.exists(election) is not None else []

    def nodes() -> tuple[bool, list[str]]:
        return zk_client.exists(disable) is not None, votes()

    async def body() -> None:
        cluster = SimCluster(scenario, zk_client)
        seen: list[tuple[str, tuple[bool, list[str]]]] = []

        def after(change: AppliedChange) -> None:
            seen.append((change.event.action.value, nodes()))

        cluster.on_change(after)
        await cluster.start()
        try:
            data, stat = zk_client.get(disable)
            assert data == b"" and stat.ephemeralOwner == 0  # persistent, empty
            (first,) = votes()
            assert re.fullmatch(r"V_\d{10}", first)
            data, stat = zk_client.get(f"{election}/{first}")
            assert data == vote and stat.ephemeralOwner == zk_client.client_id[0]  # on the cluster's session
            cluster.start_schedule()
            await poll(lambda: len(cluster.applied) == len(scenario.schedule), "the whole schedule")
            assert all(0 <= c.applied_s - c.planned_s < 0.5 for c in cluster.applied)
            (second,) = votes()
            assert seen == [
                ("enable_autorecovery", (False, [first])),
                ("stop_auditor", (False, [])),
                ("disable_autorecovery", (True, [])),
                ("start_auditor", (True, [second])),
            ]
            assert int(second[2:]) > int(first[2:])  # a new election: a new sequence
            assert zk_client.get(f"{election}/{second}")[0] == vote and zk_client.get(disable)[0] == b""
        finally:
            await cluster.stop(keep_metadata=True)
        assert nodes() == (True, [])  # the vote goes with the auditor, the node stays with the metadata
        zk_client.delete(ROOT, recursive=True)

    run(body)


def test_replication_locks_are_taken_and_released_at_their_time(zk_client: KazooClient) -> None:
    scenario = parse_scenario(
        HEAD
        + """
[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
under_replicated = { replicas = ["bookie-2"], age_s = 7200, locked_by = "bookie-4" }
[[ledgers]]
ids = [2, 5]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
[[ledgers]]
ids = [3, 4]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
under_replicated = { replicas = [0], locked_by = 2 }

[[schedule]]
at = 0.3
action = "unlock"
ledger = 1
[[schedule]]
at = 0.3
action = "mark"
ledger = 2
replicas = ["bookie-1"]
locked_by = "bookie-5"
[[schedule]]
at = 0.3
action = "repair"
ledger = 3
[[schedule]]
at = 0.8
action = "lock"
ledger = 1
bookie = "bookie-6"
[[schedule]]
at = 0.8
action = "unmark"
ledger = 2
[[schedule]]
at = 0.8
action = "delete"
ledger = 4
[[schedule]]
at = 0.8
action = "mark"
ledger = 5
"""
    )
    locks = underreplication_locks_path(root=ROOT)

    def held() -> dict[int, bytes]:
        """Ledger id -> the lock node's data, for every lock node."""
        out = {}
        for child in zk_client.get_children(locks):
            path = f"{locks}/{child}"
            out[ledger_id_from_underreplication_lock_path(path, root=ROOT)] = zk_client.get(path)[0]
        return out

    def lock_stat(ledger_id: int) -> Any:
        return zk_client.get(underreplication_lock_path(ledger_id, root=ROOT))[1]

    async def body() -> None:
        cluster = SimCluster(scenario, zk_client)
        seen: list[tuple[str, dict[int, bytes]]] = []

        def after(change: AppliedChange) -> None:
            seen.append((change.event.describe(), held()))

        cluster.on_change(after)
        await cluster.start()
        try:
            assert cluster.started_at_ms is not None
            assert held() == {
                1: format_lock_data("bookie-4"),
                3: format_lock_data("bookie-3"),
                4: b'bookieId: "bookie-3"\n',
            }
            assert format_lock_data("bookie-4") == b'bookieId: "bookie-4"\n'  # LockDataFormat as protobuf text
            initial = lock_stat(1)
            assert initial.ephemeralOwner == zk_client.client_id[0]  # on the cluster's session
            assert cluster.started_at_ms - 1000 <= initial.ctime <= int(time.time() * 1000)  # at t = 0
            assert {lid: (lock.bookie_id, lock.since_s) for lid, lock in cluster.state.locks.items()} == {
                1: ("bookie-4", 0.0),
                3: ("bookie-3", 0.0),
                4: ("bookie-3", 0.0),
            }
            cluster.start_schedule()
            await poll(lambda: len(cluster.applied) == len(scenario.schedule), "the whole schedule")
            assert all(0 <= c.applied_s - c.planned_s < 0.5 for c in cluster.applied)
            three, five, six = (format_lock_data(f"bookie-{n}") for n in (3, 5, 6))
            assert seen == [
                ("unlock ledger 1", {3: three, 4: three}),
                ("mark ledger 2", {2: five, 3: three, 4: three}),  # marked and locked at once
                ("repair ledger 3", {2: five, 4: three}),
                ("lock ledger 1 bookie bookie-6", {1: six, 2: five, 4: three}),
                ("unmark ledger 2", {1: six, 4: three}),
                ("delete ledger 4", {1: six}),
                ("mark ledger 5", {1: six}),  # a mark without locked_by: unlocked
            ]
            taken = lock_stat(1)
            assert taken.ephemeralOwner == zk_client.client_id[0]
            assert taken.ctime >= cluster.started_at_ms + 800 - 50 and taken.czxid > initial.czxid  # a new node
            assert zk_client.exists(underreplication_path(3, root=ROOT)) is not None  # repaired: the mark stays
            assert zk_client.exists(underreplication_path(2, root=ROOT)) is None
            lock = cluster.state.locks[1]
            assert (lock.bookie_id, lock.since_s) == ("bookie-6", 0.8) and sorted(cluster.state.locks) == [1]
        finally:
            await cluster.stop(keep_metadata=True)
        assert held() == {}  # the locks go with the session's processes, the marks stay with the metadata
        assert zk_client.exists(underreplication_path(1, root=ROOT)) is not None
        zk_client.delete(ROOT, recursive=True)

    run(body)


# --------------------------------------------------------------------------- a large generated cluster


def test_a_generated_cluster_of_100k_ledgers(zk_client: KazooClient) -> None:
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    text, plan = generate(100_000, parse_fault_mix("ledgers"), 7)
    timings["generate"] = time.perf_counter() - clock
    clock = time.perf_counter()
    scenario = parse_scenario(text)
    timings["parse"] = time.perf_counter() - clock
    clock = time.perf_counter()
    truth = cluster_truth(ClusterState.from_scenario(scenario), 0.0)
    timings["truth"] = time.perf_counter() - clock
    counts: dict[Category, int] = {}
    for violation in truth:
        counts[violation.category] = counts.get(violation.category, 0) + 1
    assert counts[Category.METADATA_UNREADABLE] == len(plan.ledgers["corrupt"]) == 50
    assert counts[Category.NO_REPLICA] == len(plan.ledgers["no_replica"]) == 100
    assert counts[Category.PLACEMENT_FAIL] == len(plan.ledgers["placement"]) == 500
    assert counts[Category.ACK_QUORUM_ONE] == len(plan.ledgers["aq1"]) == 1000
    assert counts[Category.LEDGER_IN_LIMBO] == len(plan.ledgers["limbo"]) == 100
    assert counts[Category.UNDER_REPLICATION_STUCK] == len(plan.ledgers["stuck"]) == 100
    below = counts.get(Category.BELOW_ACK_QUORUM, 0) + counts.get(Category.BELOW_WRITE_QUORUM, 0)
    assert below == len(plan.ledgers["missing"]) + len(plan.ledgers["nothing"])

    async def body() -> None:
        cluster = SimCluster(scenario, zk_client)
        clock = time.perf_counter()
        await cluster.start()
        timings["start (write 100k ledgers, start 9 bookies)"] = time.perf_counter() - clock
        try:
            nodes = await asyncio.to_thread(ledger_nodes, zk_client)
            assert len(nodes) == 100_000
            for ledger_id in random.Random(1).sample(range(1, 100_001), 50):
                spec = cluster.state.ledgers[ledger_id]
                data, _ = zk_client.get(ledger_path(ledger_id, root=ROOT))
                if spec.corrupt is None:
                    segments = decode_ledger_metadata(data).segments
                    assert [s.ensemble for s in segments] == [s.ensemble for s in spec.segments]
            marks = len(plan.ledgers["stuck"]) + len(plan.ledgers["marked"])
            assert cluster.stats.marks == marks
            bookie = cluster.bookies["bookie-1"]
            sample = sorted(cluster.state.ledgers_of("bookie-1"))[:500]
            answers = await v3_answers(bookie.v3_address, sample, timeout=5.0)
            for ledger_id in sample:
                if not cluster.state.bookies["bookie-1"].answers_unknown(ledger_id, cluster.state.checker):
                    assert_holds(answers[ledger_id], cluster.state, "bookie-1", ledger_id)
        finally:
            clock = time.perf_counter()
            await cluster.stop()
            timings["stop (delete everything)"] = time.perf_counter() - clock

    run(body)
    print("\n100k-ledger cluster: " + ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()))
    assert zk_client.exists(ROOT) is None


# --------------------------------------------------------------------------- the command


def test_the_simulate_command(tmp_path: Path, zookeeper_server: ServerEndpoint, zk_root_client: KazooClient) -> None:
    chroot = f"/scrutiny-test/simulate-cli-{uuid.uuid4().hex[:8]}"
    zk_root_client.ensure_path(chroot)
    truth = tmp_path / "truth.json"
    command = [
        sys.executable,
        "-m",
        "scrutiny.cli",
        "simulate",
        str(EXAMPLE),
        "--zookeeper",
        f"{zookeeper_server.address}{chroot}",
        "--duration",
        "1.0",
        "--truth-out",
        str(truth),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        assert ready["scenario"] == "example" and set(ready["bookies"]) == {f"bookie-{i}" for i in range(1, 7)}
        registered = zk_root_client.get_children(f"{chroot}{ROOT}/available")
        assert "bookie-1" in registered
        assert process.wait(timeout=15) == 0
        header, states = load_truth(truth)
        assert header["started_at_ms"] == ready["started_at_ms"] and header["bookies"] == ready["bookies"]
        assert [s.at_s for s in states][:3] == [0.0, 2.0, 3.0]  # --duration 1 cuts only grace points
        assert zk_root_client.exists(f"{chroot}{ROOT}") is None  # cleaned up on exit
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        zk_root_client.delete(chroot, recursive=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_simulate_command_stops_within_seconds_when_zookeeper_is_gone(tmp_path: Path, signum: int) -> None:
    """With its ZooKeeper stopped (the README's block ends with ``services down``), a signal to the simulator's
    process group still ends it within seconds, exit 0, every bookie port closed."""
    zookeeper = start_zookeeper(tmp_path / "zookeeper", die_with_parent=True)
    command = [sys.executable, "-m", "scrutiny.cli", "simulate", str(EXAMPLE), "--zookeeper", zookeeper.address]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        ports = [int(a.rpartition(":")[2]) for b in ready["bookies"].values() for a in (b["v3"], b["agent"])]
        assert ports and all(_listening(port) for port in ports)
        zookeeper.stop()
        time.sleep(2)  # the client notices: reconnection attempts begin
        started = time.monotonic()
        os.killpg(process.pid, signum)
        assert process.wait(timeout=30) == 0
        assert time.monotonic() - started < 10
        assert not any(_listening(port) for port in ports)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        zookeeper.stop()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_the_agents_see_a_ledger_only_after_the_write_cache_is_flushed(zk_client: KazooClient) -> None:
    """As measured on real DbLedgerStorage bookies: NO_LEDGER from every agent until the first flush after the
    ledger's last write, then its entries; BookKeeper's v3 request (the bookie itself) lists them at once."""
    flush_s = 1.5
    scenario = parse_scenario(HEAD.replace("bookies = 6", f"bookies = 6\nwrite_cache_flush_seconds = {flush_s}")
                              + '[[ledgers]]\nid = 1\nensemble = ["bookie-1", "bookie-2", "bookie-3"]\n')  # fmt: skip

    async def check(cluster: SimCluster) -> None:
        agent = cluster.bookies["bookie-1"].agent_address
        first = (await agent_answers(agent, [1]))[1]
        assert first.kind is AnswerKind.NO_LEDGER and first.as_of_ms is not None  # still in the write cache
        assert (await v3_answers(v3_address(cluster, "bookie-1"), [1]))[1].kind is AnswerKind.LISTING
        deadline = time.monotonic() + 2 * flush_s + 1
        later = first
        while later.kind is AnswerKind.NO_LEDGER and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            later = (await agent_answers(agent, [1]))[1]
        assert later.kind is AnswerKind.LISTING and later.groups  # the flush put it in the index
        assert later.as_of_ms is not None and later.as_of_ms > first.as_of_ms

    run(lambda: with_cluster(scenario, zk_client, check))


def test_a_second_stop_signal_while_simulate_winds_down_is_still_a_clean_stop(
    zookeeper_server: ServerEndpoint, zk_root_client: KazooClient
) -> None:
    """Ctrl-C, then ``kill`` (SIGTERM) again and again until it is gone, as a script stopping it does: exit 0."""
    chroot = f"/scrutiny-test/simulate-twice-{uuid.uuid4().hex[:8]}"
    zk_root_client.ensure_path(chroot)
    command = [sys.executable, "-m", "scrutiny.cli", "simulate", str(EXAMPLE)]
    command += ["--zookeeper", f"{zookeeper_server.address}{chroot}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert json.loads(process.stdout.readline())["scenario"] == "example"
        process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 20
        while process.poll() is None and time.monotonic() < deadline:
            process.send_signal(signal.SIGTERM)  # lands in every phase of the stop, the interpreter's exit too
            time.sleep(0.005)
        assert process.wait(timeout=5) == 0, process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        zk_root_client.delete(chroot, recursive=True)
