"""The listing fetcher and the cluster cache against a simulated cluster registered in a real ZooKeeper.

The simulated bookies run on an event loop of their own thread (the fetcher is synchronous and
blocks its caller); every test stops its clusters, fetchers and readers in fixture teardown.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_acl

from scrutiny.agent.server import AgentServer, AgentServerConfig
from scrutiny.connectors.bookies.agent_client import AgentClient
from scrutiny.connectors.bookies.fetch import FetchConfig, FetchResult, ListingFetcher, shared_fetcher
from scrutiny.connectors.zookeeper.cluster_cache import (
    LEAF_LISTING_MIN,
    CachedClusterReader,
    ClusterCacheError,
    shared_reader,
)
from scrutiny.connectors.zookeeper.tree import read_locks
from scrutiny.core.replication_locks import ReplicationLock
from scrutiny.core.verdict import AnswerKind
from scrutiny.core.zk_paths import LedgerManager, available_path, layout_path, ledger_path
from scrutiny.core.zk_records import Layout, format_layout, format_lock_data, parse_bookie_service_info
from scrutiny.settings.loader import Settings
from scrutiny.simulator.bookie import MemoryListingBackend
from scrutiny.simulator.cluster import SimCluster
from scrutiny.simulator.model import Action, Event
from scrutiny.simulator.scenario import parse_scenario
from scrutiny.simulator.truth import same_entries

pytestmark = pytest.mark.integration

T = TypeVar("T")
TIMEOUT_S = 0.8
#: A bound on calls that end at a deadline of a second or less: far above any busy machine's delay, and still a
#: failure for a call that waits on a bookie that never answers (speed is measured in bench/, not here).
HANG_S = 20.0

FAULTS = """
[scenario]
seed = 3
[cluster]
bookies = 7
racks = ["/r1", "/r2", "/r3"]
readonly = ["bookie-5"]
stopped = ["bookie-4"]
[bookies.bookie-2]
fault = "unresponsive"
[bookies.bookie-3]
fault = "garbage"
[bookies.bookie-6]
limbo = [3]
[defaults]
ensemble_size = 3
write_quorum = 2
last_entry = 49
[[ledgers]]
ids = [1, [4, 6]]
ensemble = ["bookie-1", "bookie-5", "bookie-7"]
[[ledgers]]
id = 2
ensemble = ["bookie-1", "bookie-5", "bookie-7"]
holdings = [{ bookie = "bookie-7", nothing = true }]
[[ledgers]]
id = 3
ensemble = ["bookie-1", "bookie-6", "bookie-7"]
[[ledgers]]
id = 7
ensemble = ["bookie-2", "bookie-3", "bookie-4"]
[[ledgers]]
id = 8
ensemble = ["bookie-1", "bookie-2", "bookie-6"]
holdings = [{ bookie = "bookie-1", missing = [[10, 19]] }]
"""

HEALTHY = """
[scenario]
seed = 4
[cluster]
bookies = 3
racks = ["/r1", "/r2", "/r3"]
[defaults]
ensemble_size = 3
write_quorum = 3
last_entry = 9
[[ledgers]]
ids = [[1, 600]]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
"""


class LoopThread:
    """An event loop on a daemon thread, for the simulated bookies."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sim-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


class Sim:
    """Starts scenarios' clusters on the loop thread; stops them all in :meth:`close`."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client
        self.loop = LoopThread()
        self.clusters: list[SimCluster] = []

    def start(self, text: str) -> SimCluster:
        cluster = SimCluster(parse_scenario(text), self.client)
        self.loop.run(cluster.start())
        self.clusters.append(cluster)
        return cluster

    def apply(self, cluster: SimCluster, action: Action, bookie: str) -> None:
        self.loop.run(cluster.apply(Event(at_s=cluster.elapsed_s(), action=action, index=0, bookie=bookie)))

    def close(self) -> None:
        try:
            for cluster in self.clusters:
                with contextlib.suppress(Exception):
                    self.loop.run(cluster.stop())
        finally:
            self.loop.close()


@pytest.fixture
def sim(zk_client: KazooClient) -> Iterator[Sim]:
    sim = Sim(zk_client)
    try:
        yield sim
    finally:
        sim.close()


@pytest.fixture
def fetchers() -> Iterator[Callable[..., ListingFetcher]]:
    made: list[ListingFetcher] = []

    def make(**kwargs: Any) -> ListingFetcher:
        options: dict[str, Any] = {"request_timeout_s": TIMEOUT_S, "connect_timeout_s": 0.5, **kwargs}
        fetcher = ListingFetcher(FetchConfig(**options))
        made.append(fetcher)
        return fetcher

    try:
        yield make
    finally:
        for fetcher in made:
            fetcher.close()


@pytest.fixture
def zk_settings(service_settings: Settings, zk_client: KazooClient) -> Any:
    """The ``[zookeeper]`` settings pointed at the test's chroot."""
    hosts = service_settings.zookeeper.connect.partition("/")[0]
    return replace(service_settings.zookeeper, connect=f"{hosts}{zk_client.chroot}", metadata_uri="")


@pytest.fixture
def readers(zk_settings: Any) -> Iterator[Callable[..., CachedClusterReader]]:
    made: list[CachedClusterReader] = []

    def make(ttl_s: float = 0.0, **kwargs: Any) -> CachedClusterReader:
        reader = CachedClusterReader(zk_settings, "/ledgers", ttl_s=ttl_s, **kwargs)
        made.append(reader)
        return reader

    try:
        yield make
    finally:
        for reader in made:
            reader.close()


def all_pairs(cluster: SimCluster) -> dict[int, list[str]]:
    """Every ledger with its ensemble's bookies, plus a bookie outside it (which holds nothing)."""
    pairs: dict[int, list[str]] = {}
    for ledger_id, spec in cluster.state.ledgers.items():
        members = sorted(spec.bookies())
        outsider = next(b for b in ("bookie-7", "bookie-6", "bookie-5") if b not in members)
        pairs[ledger_id] = [*members, outsider]
    return pairs


def kinds(result: FetchResult) -> dict[int, dict[str, tuple[AnswerKind, object]]]:
    return {lid: {b: (a.kind, a.groups) for b, a in row.items()} for lid, row in result.answers.items()}


def closed_port() -> int:
    """A loopback port nothing listens on (just released by the kernel)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def served(cluster: SimCluster) -> tuple[int, int]:
    """(GetListings calls, v3 requests) the simulated bookies served so far: what really went over the wire.

    Reads the bookies' servers (private attributes of the simulator: test-only).
    """
    calls = requests = 0
    for bookie in cluster.bookies.values():
        if bookie._agent is not None:
            sample = {"method": "GetListings", "code": "OK"}
            calls += int(bookie._agent.metrics.registry.get_sample_value("scrutiny_agent_requests_total", sample) or 0)
        if bookie._v3 is not None:
            requests += bookie._v3.stats.requests
    return calls, requests


def assert_truth(cluster: SimCluster, result: FetchResult, wanted: dict[int, list[str]]) -> None:
    """Each answer is what the scenario says the bookie gives: unknown for faults, else exactly its holdings."""
    state = cluster.state
    for ledger_id, bookies in wanted.items():
        assert set(result.answers[ledger_id]) == set(bookies)
        for bookie in bookies:
            answer = result.answers[ledger_id][bookie]
            where = (ledger_id, bookie, answer)
            if state.bookies[bookie].answers_unknown(ledger_id, state.checker):
                assert answer.kind is AnswerKind.UNKNOWN and answer.reason, where
                assert answer.limbo is state.bookies[bookie].answers_limbo(ledger_id, state.checker), where
                continue
            held = state.held_groups(bookie, ledger_id)
            if held is None:
                assert answer.kind is AnswerKind.NO_LEDGER, where
            else:
                assert answer.kind is AnswerKind.LISTING and same_entries(answer.groups, held), where


# --------------------------------------------------------------------------- answers


@pytest.mark.parametrize("protocol", ["v3", "agent"])
def test_answers_match_the_scenario_over_each_protocol(
    protocol: str, sim: Sim, fetchers: Callable[..., ListingFetcher], readers: Callable[..., CachedClusterReader]
) -> None:
    cluster = sim.start(FAULTS)
    snapshot = readers().get()
    fetcher = fetchers(protocol=protocol)
    wanted = all_pairs(cluster)
    started = time.monotonic()
    result = fetcher.fetch(wanted, snapshot.registrations)
    elapsed = time.monotonic() - started
    assert_truth(cluster, result, wanted)
    assert elapsed < HANG_S, elapsed  # the fetch ends at its deadline: the unresponsive bookie never answers
    # The not-so-obvious unknowns, for the record: stopped (no registration), unresponsive, garbage.
    assert "bookie-4" in result.answers[7]["bookie-4"].reason  # not registered: no address
    assert result.answers[2]["bookie-7"].kind is AnswerKind.NO_LEDGER
    stats = result.per_bookie
    assert {s.protocol for s in stats.values()} == {protocol}
    assert stats["bookie-4"].rpcs == 0 and stats["bookie-4"].address is None
    assert stats["bookie-2"].unknown == stats["bookie-2"].ledgers > 0
    asked = {b: sum(b in bs for bs in wanted.values()) for b in stats}
    expected_rpcs = sum(n if protocol == "v3" else 1 for b, n in asked.items() if b != "bookie-4")
    assert result.rpcs == expected_rpcs
    # A second fetch reuses the connections and gives the same answers (unknown reasons may differ).
    assert kinds(fetcher.fetch(wanted, snapshot.registrations)) == kinds(result)


@pytest.mark.parametrize("protocol", ["v3", "agent"])
def test_overall_deadline_and_refused_connections(
    protocol: str, sim: Sim, fetchers: Callable[..., ListingFetcher], readers: Callable[..., CachedClusterReader]
) -> None:
    cluster = sim.start(FAULTS)
    registrations = readers().get().registrations
    assert not cluster.bookies["bookie-4"].running
    overrides = {f"{protocol}_overrides": {"bookie-4": f"127.0.0.1:{closed_port()}"}}
    fetcher = fetchers(protocol=protocol, request_timeout_s=60.0, **overrides)
    started = time.monotonic()
    result = fetcher.fetch({7: ["bookie-2", "bookie-4"], 1: ["bookie-1"]}, registrations, timeout_s=0.3)
    assert time.monotonic() - started < HANG_S  # the fetch's 0.3 s deadline, not the 60 s request timeout
    assert result.answers[7]["bookie-2"].kind is AnswerKind.UNKNOWN
    refused = result.answers[7]["bookie-4"]
    assert refused.kind is AnswerKind.UNKNOWN and "refused" in refused.reason.lower(), refused
    assert result.answers[1]["bookie-1"].kind is AnswerKind.LISTING


def test_auto_uses_the_agent_and_batches_many_ledgers_per_call(
    sim: Sim, fetchers: Callable[..., ListingFetcher], readers: Callable[..., CachedClusterReader]
) -> None:
    cluster = sim.start(HEALTHY)
    registrations = readers().get().registrations
    wanted = {ledger_id: ["bookie-1", "bookie-2", "bookie-3"] for ledger_id in range(1, 601)}
    one_call = fetchers(max_ledgers_per_call=1000).fetch(wanted, registrations)
    assert {s.protocol for s in one_call.per_bookie.values()} == {"agent"}
    assert one_call.rpcs == 3 == served(cluster)[0]  # one call per bookie for its 600 ledgers
    assert_truth(cluster, one_call, wanted)
    chunked = fetchers(max_ledgers_per_call=250, max_in_flight_per_bookie=500).fetch(wanted, registrations)
    assert chunked.rpcs == 9 == served(cluster)[0] - 3
    assert chunked.answers == one_call.answers
    # The agent reads an index: each answer says as of when (the verdict's write-cache rule needs it).
    assert all(a.as_of_ms is not None for answers in one_call.answers.values() for a in answers.values())
    # v3: one request per ledger, at most max_in_flight_per_bookie in flight, same answers.
    v3 = fetchers(protocol="v3", max_in_flight_per_bookie=64).fetch(wanted, registrations, timeout_s=5.0)
    assert v3.rpcs == 1800 == served(cluster)[1]
    assert {s.protocol for s in v3.per_bookie.values()} == {"v3"}
    assert v3.answers == one_call.answers
    assert all(a.as_of_ms is None for answers in v3.answers.values() for a in answers.values())  # the bookie itself


@pytest.mark.parametrize("protocol", ["auto", "v3"])
def test_a_bookie_restarted_on_new_ports_is_reached_again(
    protocol: str, sim: Sim, fetchers: Callable[..., ListingFetcher], readers: Callable[..., CachedClusterReader]
) -> None:
    cluster = sim.start(HEALTHY)
    reader = readers(ttl_s=60.0)
    fetcher = fetchers(protocol=protocol)
    wanted = {1: ["bookie-1"], 2: ["bookie-1", "bookie-2"]}
    before = fetcher.fetch(wanted, reader.get().registrations)
    assert before.answers[1]["bookie-1"].kind is AnswerKind.LISTING
    old_address = before.per_bookie["bookie-1"].address
    stale = reader.get().registrations

    sim.apply(cluster, Action.KILL, "bookie-1")
    gone = fetcher.fetch(wanted, reader.get(refresh=True).registrations)
    assert gone.answers[1]["bookie-1"].kind is AnswerKind.UNKNOWN
    assert gone.answers[2]["bookie-2"].kind is AnswerKind.LISTING
    refused = fetcher.fetch(wanted, stale)  # the old registration: the connection is lost / refused
    assert refused.answers[1]["bookie-1"].kind is AnswerKind.UNKNOWN

    bookie = cluster.bookies["bookie-1"]
    with holding_ports(bookie.v3_address[1], int(bookie.agent_address.rsplit(":", 1)[1])):
        sim.apply(cluster, Action.REVIVE, "bookie-1")
    after = fetcher.fetch(wanted, reader.get(refresh=True).registrations)
    assert after.per_bookie["bookie-1"].address != old_address
    assert_truth(cluster, after, wanted)


@contextlib.contextmanager
def holding_ports(*ports: int) -> Iterator[None]:
    """Listen on these loopback ports meanwhile, so that a restarted bookie must take other ones."""
    with contextlib.ExitStack() as stack:
        for port in ports:
            sock = stack.enter_context(socket.socket())
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the old port may be in TIME_WAIT
            sock.bind(("127.0.0.1", port))
            sock.listen()
        yield


def test_close_and_shared_fetchers(sim: Sim, readers: Callable[..., CachedClusterReader]) -> None:
    sim.start(HEALTHY)
    registrations = readers().get().registrations
    config = FetchConfig(request_timeout_s=TIMEOUT_S)
    fetcher = shared_fetcher(config)
    try:
        assert shared_fetcher(FetchConfig(request_timeout_s=TIMEOUT_S)) is fetcher
        assert fetcher.fetch({1: ["bookie-1"]}, registrations).answers[1]["bookie-1"].kind is AnswerKind.LISTING
    finally:
        fetcher.close()
    loop_threads = [t for t in threading.enumerate() if t.name == "scrutiny-listing-fetch" and t.is_alive()]
    assert fetcher._thread not in loop_threads
    closed = fetcher.fetch({1: ["bookie-1"]}, registrations).answers[1]["bookie-1"]
    assert closed.kind is AnswerKind.UNKNOWN and "closed" in closed.reason
    replacement = shared_fetcher(config)
    try:
        assert replacement is not fetcher
        assert replacement.fetch({1: ["bookie-1"]}, registrations).answers[1]["bookie-1"].kind is AnswerKind.LISTING
    finally:
        replacement.close()


# --------------------------------------------------------------------------- the cluster cache


def test_cluster_cache_reads_registrations_and_racks_and_refreshes_after_ttl(
    sim: Sim, readers: Callable[..., CachedClusterReader]
) -> None:
    cluster = sim.start(FAULTS)
    reader = readers(ttl_s=0.3)
    first = reader.get()
    view = first.view
    assert view.writable == frozenset({"bookie-1", "bookie-2", "bookie-3", "bookie-6", "bookie-7"})
    assert view.readonly == {"bookie-5"}
    assert dict(view.racks) == {f"bookie-{i}": f"/r{(i - 1) % 3 + 1}" for i in range(1, 8)}
    assert view.writable is not None and set(first.registrations) == view.writable | view.readonly
    info = parse_bookie_service_info(first.registrations["bookie-5"] or b"")
    assert info is not None and info.rpc_address() == cluster.bookies["bookie-5"].v3_address
    assert reader.get() is first  # cached within the TTL

    sim.apply(cluster, Action.READONLY, "bookie-1")
    deadline = time.monotonic() + 5.0
    latest = reader.get()
    while "bookie-1" not in latest.view.readonly and time.monotonic() < deadline:
        time.sleep(0.05)
        latest = reader.get()
    assert "bookie-1" in latest.view.readonly and "bookie-1" not in (latest.view.writable or ())
    assert latest.read_at_ms >= first.read_at_ms


def test_cluster_cache_serves_the_last_snapshot_when_zookeeper_fails(
    sim: Sim, zk_client: KazooClient, readers: Callable[..., CachedClusterReader]
) -> None:
    sim.start(HEALTHY)
    reader = readers()
    first = reader.get()
    path = available_path(root="/ledgers")
    zk_client.set_acls(path, [make_acl("world", "anyone", write=True, create=True, delete=True, admin=True)])
    try:
        again = reader.get(refresh=True)  # NoAuth on the read: the last snapshot, flagged stale
        assert again is first and reader.stale
        with pytest.raises(ClusterCacheError, match="registrations"):
            readers().get()
    finally:
        zk_client.set_acls(path, OPEN_ACL_UNSAFE)
    assert reader.get(refresh=True) is not first and not reader.stale


def test_shared_reader_is_one_per_process_and_pickles_as_its_settings(sim: Sim, zk_settings: Any) -> None:
    sim.start(HEALTHY)
    one = shared_reader(zk_settings, "/ledgers", ttl_s=1.0)
    try:
        assert shared_reader(zk_settings, "/ledgers", ttl_s=1.0) is one
        assert shared_reader(zk_settings, "/other", ttl_s=1.0) is not one
        writable = one.get().view.writable
        copy = pickle.loads(pickle.dumps(one))
        try:
            assert copy is not one and copy.ledgers_root == "/ledgers" and copy.ttl_s == 1.0
            assert copy.get().view.writable == writable == frozenset({"bookie-1", "bookie-2", "bookie-3"})
        finally:
            copy.close()
    finally:
        one.close()


def test_ledgers_present_reads_the_znodes_after_a_sync_in_the_layout_s_manager(
    zk_client: KazooClient, readers: Callable[..., CachedClusterReader]
) -> None:
    long_id, short_ids = 2**40 + 7, [0, 5, 64, 9_999_999]
    for ledger in [*short_ids, long_id]:
        zk_client.create(ledger_path(ledger, root="/ledgers"), b"x", makepath=True)
    reader = readers()
    asked = [*short_ids, long_id, 6, 65, 2**40 + 8]
    assert reader.ledgers_present(asked) == frozenset([*short_ids, long_id])
    zk_client.delete(ledger_path(64, root="/ledgers"))
    assert reader.ledgers_present(asked) == frozenset([0, 5, 9_999_999, long_id])  # never cached
    assert reader.ledgers_present([]) == frozenset()
    zk_client.set(ledger_path(5, root="/ledgers"), b"changed")
    read = reader.ledgers_metadata(asked)
    assert sorted(read) == [0, 5, 9_999_999, long_id]
    assert read[5].version == 1 and read[0].version == 0
    # Bytes that cannot be searched for a password are not given, only why they do not decode.
    assert read[5].data == b"" and "missing header" in read[5].decode_error
    assert read[5].mtime_ms == zk_client.exists(ledger_path(5, root="/ledgers")).mtime


def test_ledgers_present_lists_a_leaf_once_for_many_of_its_ids_and_asks_for_the_few_one_by_one(
    zk_client: KazooClient, readers: Callable[..., CachedClusterReader], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page of held ledgers spans a leaf or two: one ``get_children`` per leaf answers for the ids of a leaf with
    many of them, with the same answer as an ``exists`` per id; a leaf with few stays one ``exists`` per id."""
    many = list(range(20_000, 20_000 + LEAF_LISTING_MIN * 3, 3))  # one leaf (ids 20,000-29,999)
    few = [30_001, 2**40 + 1]
    held = {i for i in many if i % 2} | {30_001}
    for ledger in held:
        zk_client.create(ledger_path(ledger, root="/ledgers"), b"x", makepath=True)
    reader = readers()
    assert reader.ledgers_present([5]) == frozenset()  # connected, the layout read
    client = reader._client
    assert client is not None
    calls: dict[str, list[str]] = {"get_children_async": [], "exists_async": []}
    for name, paths in calls.items():
        original = getattr(client, name)

        def counted(path: str, *args: Any, _original: Any = original, _paths: list[str] = paths) -> Any:
            _paths.append(path)
            return _original(path, *args)

        monkeypatch.setattr(client, name, counted)
    assert reader.ledgers_present([*many, *few]) == frozenset(held)
    assert calls["get_children_async"] == [ledger_path(20_000, root="/ledgers").rpartition("/")[0]]
    assert sorted(calls["exists_async"]) == sorted(ledger_path(i, root="/ledgers") for i in few)
    # A missing leaf: none of its ids has metadata.
    assert reader.ledgers_present(list(range(50_000, 50_000 + LEAF_LISTING_MIN))) == frozenset()


def test_ledgers_present_follows_a_flat_layout_and_fails_loudly_without_zookeeper(
    zk_client: KazooClient, readers: Callable[..., CachedClusterReader], zk_settings: Any
) -> None:
    layout = format_layout(Layout(1, "flat", 1))
    zk_client.create(layout_path(root="/ledgers"), layout, makepath=True)
    zk_client.create(ledger_path(12, manager=LedgerManager.FLAT, root="/ledgers"), b"x", makepath=True)
    zk_client.create(ledger_path(13, root="/ledgers"), b"x", makepath=True)  # where hierarchical would put it
    assert readers().ledgers_present([12, 13]) == frozenset([12])
    unreachable = replace(zk_settings, connect="127.0.0.1:1")
    with pytest.raises(ClusterCacheError, match="ledgers' znodes"):
        CachedClusterReader(unreachable, "/ledgers", connect_timeout_s=0.5).ledgers_present([12])


def test_replication_locks_name_their_worker_and_creation_through_both_readers(
    zk_client: KazooClient, readers: Callable[..., CachedClusterReader]
) -> None:
    locks = "/ledgers/underreplication/locks"
    held = zk_client.create(f"{locks}/urL0000000007", format_lock_data("bk2:3181"), ephemeral=True, makepath=True)
    zk_client.create(f"{locks}/urL0000000009", b"\xff not a lock's text", ephemeral=True)
    zk_client.create(f"{locks}/notalock", b"")
    since = zk_client.exists(held).ctime
    unnamed = zk_client.exists(f"{locks}/urL0000000009").ctime
    expected = {7: ReplicationLock("bk2:3181", since), 9: ReplicationLock(None, unnamed)}
    assert readers().replication_locks([7, 8, 9]) == expected  # the streaming job's, for the stuck marks it reports
    assert read_locks(zk_client, "/ledgers") == expected  # the scan's, once per snapshot
    zk_client.delete(held)
    assert readers().replication_locks([7]) == {}


def test_a_simulated_bookie_s_agent_lists_exactly_the_ledgers_the_scenario_puts_on_it(sim: Sim) -> None:
    cluster = sim.start(FAULTS.replace('fault = "unresponsive"', 'fault = { kind = "slow", delay_s = 0.01 }'))
    state = cluster.state
    listed_somewhere = False
    for bookie_id, bookie in cluster.bookies.items():
        if bookie_id == "bookie-4":  # stopped
            continue
        with AgentClient(bookie.agent_address, expected_bookie_id=bookie_id) as client:
            held = list(client.held_ledgers(page_size=2))
        expected = {}
        for ledger_id in sorted(state.ledgers_of(bookie_id)):
            groups = state.held_groups(bookie_id, ledger_id)
            if groups:
                expected[ledger_id] = (min(g.first for g in groups), max(g.last for g in groups))
        assert {h.ledger_id: (h.first_entry_id, h.last_entry_id) for h in held} == expected, bookie_id
        listed_somewhere |= bool(held)
    assert listed_somewhere


TOO_LOW = """
[scenario]
seed = 5
[cluster]
bookies = 3
[defaults]
ensemble_size = 3
write_quorum = 3
ack_quorum = 2
last_entry = 59
[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
too_low = 5
"""


def test_the_proof_beyond_the_end_comes_through_the_agent_when_the_bookie_itself_is_out_of_reach(
    sim: Sim, fetchers: Callable[..., ListingFetcher], readers: Callable[..., CachedClusterReader]
) -> None:
    cluster = sim.start(TOO_LOW)
    spec = cluster.state.ledgers[1]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    # Every bookie's own v3 address is a closed port: only the agents can be reached.
    unreachable = {bookie: f"127.0.0.1:{closed}" for bookie in cluster.bookies}
    fetcher = fetchers(protocol="agent", v3_overrides=unreachable)
    wanted = {1: set(spec.segments[0].ensemble)}
    result = fetcher.fetch(wanted, readers().get().registrations, ends={1: spec.last_entry})
    assert spec.kept_by is not None
    keeper = result.answers[1][spec.kept_by]
    assert keeper.beyond == cluster.state.entry_header(1, spec.written)  # the highest entry kept: its LAC proves it
    assert keeper.beyond is not None and keeper.beyond.last_add_confirmed > spec.last_entry
    assert all(answer.beyond is None for bookie, answer in result.answers[1].items() if bookie != spec.kept_by)


def test_an_agent_that_cannot_read_entries_is_passed_by_for_the_bookie_itself(
    sim: Sim, fetchers: Callable[..., ListingFetcher], readers: Callable[..., CachedClusterReader]
) -> None:
    cluster = sim.start(TOO_LOW)
    spec = cluster.state.ledgers[1]
    assert spec.kept_by is not None
    keeper = cluster.bookies[spec.kept_by]
    # An agent of the keeper's storage without the bookie's address (an older agent, or none given): UNIMPLEMENTED.
    backend = MemoryListingBackend(keeper.store, keeper.faults)
    older = AgentServer(backend, AgentServerConfig(bookie_id=spec.kept_by))
    port = older.start()
    try:
        fetcher = fetchers(protocol="agent", agent_overrides={spec.kept_by: f"127.0.0.1:{port}"})
        wanted = {1: {spec.kept_by}}
        result = fetcher.fetch(wanted, readers().get().registrations, ends={1: spec.last_entry})
        assert result.answers[1][spec.kept_by].beyond == cluster.state.entry_header(1, spec.written)
        asked = {"method": "ReadEntryHeaders", "code": "UNIMPLEMENTED"}
        assert older.metrics.registry.get_sample_value("scrutiny_agent_requests_total", asked) == 1
    finally:
        older.stop(0)
        backend.close()
