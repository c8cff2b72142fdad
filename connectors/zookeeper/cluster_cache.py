"""The cluster as the checker's executors see it: bookie registrations and racks, read from ZooKeeper and cached.

:class:`CachedClusterReader` reads the writable (``<root>/available/<id>``) and read-only
(``<root>/available/readonly/<id>``) registrations and Pulsar's rack map (``/bookies``) with its
own kazoo client (built from the ``[zookeeper]`` settings by
:func:`~scrutiny.connectors.zookeeper.client.build_zookeeper_client`, started on first use), and
serves the result as a :class:`ClusterSnapshot` for ``ttl_s`` seconds.

Guarantees: a snapshot is one consistent read (never a mix of two); when ZooKeeper fails (not
connected, an error during the read) the last snapshot is served again, with a warning logged, and
the read is retried after ``ttl_s``; with no snapshot at all :class:`ClusterCacheError` is raised.
:meth:`CachedClusterReader.ledgers_present` answers whether ledgers still exist, and
:meth:`CachedClusterReader.ledgers_metadata` reads their znodes, after a sync (never from a server behind the one
the watcher read), and gives their bytes without the ledgers' passwords; neither is cached.
A rack node that does not parse keeps the racks of the last snapshot (none at first) and says so in
:attr:`ClusterSnapshot.racks_problem`: racks are never silently replaced by defaults, which would
make healthy placements fail.

The reader pickles as its settings (the Spark job ships it to executors); the client and cache are
rebuilt where it is unpickled. :func:`shared_reader` gives one reader per (connection, root) per
process and closes them at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from scrutiny.connectors.zookeeper.client import (
    ZooKeeperUnreachableError,
    close_zookeeper_client,
    start_zookeeper_client,
)
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.connectors.zookeeper.tree import read_optional, read_registrations
from scrutiny.core.errors import ConfigError, FormatError, PathError, ScrutinyError
from scrutiny.core.metadata_redaction import redacted_metadata
from scrutiny.core.replication_locks import ReplicationLock, replication_lock
from scrutiny.core.verdict import ClusterView
from scrutiny.core.zk_paths import LedgerManager, check_root, layout_path, ledger_path, underreplication_lock_path
from scrutiny.core.zk_records import parse_layout, parse_pulsar_racks

logger = logging.getLogger(__name__)

DEFAULT_TTL_S: Final = 2.0
#: Ids of one leaf znode from which :meth:`CachedClusterReader.ledgers_present` lists the leaf (one answer of up to
#: 10,000 names) rather than asking for each id (one request and answer per id).
LEAF_LISTING_MIN: Final = 100
DEFAULT_RACKS_PATH: Final = "/bookies"
_K = TypeVar("_K")
#: Errors of a ZooKeeper read after which the last snapshot is served.
ZOOKEEPER_ERRORS: Final = (KazooException, KazooTimeoutError, OSError, ZooKeeperUnreachableError)


@dataclass(frozen=True, slots=True)
class LedgerZnode:
    """A ledger's metadata znode as read: its bytes without the ledger's password
    (:func:`~scrutiny.core.metadata_redaction.redacted_metadata`), version, last modification (ms since the epoch),
    and why its own bytes do not decode (empty when they do)."""

    data: bytes
    version: int
    mtime_ms: int
    decode_error: str = ""


class ClusterCacheError(ScrutinyError):
    """No snapshot of the cluster can be served: ZooKeeper failed before the first successful read."""


class _NotConnectedError(Exception):
    """The reader's ZooKeeper client is not connected (internal: handled like a ZooKeeper error)."""


@dataclass(frozen=True)
class ClusterSnapshot:
    """One read of the cluster: the verdict's view, each registered bookie's node bytes, when it was read.

    ``registrations`` maps writable and read-only bookie ids to their node's bytes (a bookie in both
    places, in the middle of a move, keeps its writable node's bytes). ``read_at_ms`` is wall-clock
    time of the read. ``racks_problem`` is empty unless the rack node did not parse (see the module).
    """

    view: ClusterView
    registrations: dict[str, bytes | None] = field(hash=False)
    read_at_ms: int
    racks_problem: str = ""


class CachedClusterReader:
    """Registrations and racks under ``ledgers_root`` (and ``racks_path``), cached for ``ttl_s`` seconds.

    ``zk_settings``: the ``[zookeeper]`` section (any object with its attributes; picklable and
    hashable for :func:`shared_reader`). ``connect_timeout_s`` bounds the first connection. Raises
    :class:`~scrutiny.core.errors.ConfigError` for an invalid root or TTL. Thread-safe.
    """

    def __init__(
        self,
        zk_settings: ZooKeeperSection,
        ledgers_root: str = "/ledgers",
        *,
        ttl_s: float = DEFAULT_TTL_S,
        racks_path: str = DEFAULT_RACKS_PATH,
        connect_timeout_s: float = 5.0,
    ) -> None:
        try:
            self.ledgers_root = check_root(ledgers_root)
        except PathError as error:
            raise ConfigError(f"ledgers root: {error}") from None
        if ttl_s < 0 or connect_timeout_s <= 0:
            raise ConfigError("ttl_s must not be negative and connect_timeout_s must be positive")
        self.zk_settings = zk_settings
        self.ttl_s = ttl_s
        self.racks_path = racks_path
        self.connect_timeout_s = connect_timeout_s
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._client: KazooClient | None = None
        self._snapshot: ClusterSnapshot | None = None
        self._read_at = 0.0
        self._stale = False
        self._manager: LedgerManager | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "zk_settings": self.zk_settings,
            "ledgers_root": self.ledgers_root,
            "ttl_s": self.ttl_s,
            "racks_path": self.racks_path,
            "connect_timeout_s": self.connect_timeout_s,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def __repr__(self) -> str:
        return f"CachedClusterReader(root={self.ledgers_root!r}, racks_path={self.racks_path!r}, ttl_s={self.ttl_s})"

    @property
    def stale(self) -> bool:
        """Whether the last :meth:`get` served an old snapshot because ZooKeeper failed."""
        return self._stale

    def get(self, *, refresh: bool = False) -> ClusterSnapshot:
        """The cached snapshot if younger than ``ttl_s`` (and not ``refresh``), else a new read.

        On a ZooKeeper failure: the last snapshot (logged), or :class:`ClusterCacheError` if none.
        """
        with self._lock:
            now = time.monotonic()
            snapshot = self._snapshot
            if snapshot is not None and not refresh and now - self._read_at < self.ttl_s:
                return snapshot
            try:
                fresh = self._read(snapshot)
            except (*ZOOKEEPER_ERRORS, _NotConnectedError) as error:
                return self._serve_stale(snapshot, now, error)
            self._snapshot, self._read_at, self._stale = fresh, now, False
            return fresh

    def _serve_stale(self, snapshot: ClusterSnapshot | None, now: float, error: BaseException) -> ClusterSnapshot:
        reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if snapshot is None:
            raise ClusterCacheError(f"cannot read the bookies' registrations from ZooKeeper: {reason}") from error
        self._read_at, self._stale = now, True  # retried after ttl_s, not on every call
        age_s = time.time() - snapshot.read_at_ms / 1000
        logger.warning("ZooKeeper read failed (%s); serving the cluster snapshot of %.1f s ago", reason, age_s)
        return snapshot

    def ledgers_present(self, ledger_ids: Collection[int]) -> frozenset[int]:
        """Those of ``ledger_ids`` whose metadata znode exists now (where the LAYOUT node's ledger manager puts it).

        The reads follow a ``sync`` of the ledgers root, so a server lagging behind the leader cannot call a
        ledger gone that the watcher has seen. In the hierarchical layouts a leaf znode holds the ledgers of one
        block of 10,000 ids: where :data:`LEAF_LISTING_MIN` or more of the ids share a leaf, one ``get_children`` of
        the leaf answers for all of them instead of an ``exists`` each. ClusterCacheError when ZooKeeper cannot
        answer them all.
        """
        if not ledger_ids:
            return frozenset()
        with self._ledger_reads() as (client, manager):
            leaves: dict[str, dict[str, int]] = {}
            for ledger in ledger_ids:
                parent, _, name = ledger_path(ledger, manager=manager, root=self.ledgers_root).rpartition("/")
                leaves.setdefault(parent, {})[name] = ledger
            listed = {
                parent: client.get_children_async(parent)
                for parent, names in leaves.items()
                if manager is not LedgerManager.FLAT and len(names) >= LEAF_LISTING_MIN
            }
            single = {
                ledger: client.exists_async(f"{parent}/{name}")
                for parent, names in leaves.items()
                if parent not in listed
                for name, ledger in names.items()
            }
            deadline = time.monotonic() + self.connect_timeout_s
            present = set(_answered(single, deadline))
            for parent, children in _answered(listed, deadline).items():
                names = set(children)
                present.update(ledger for name, ledger in leaves[parent].items() if name in names)
            return frozenset(present)

    def ledger_versions(self, ledger_ids: Collection[int]) -> dict[int, int]:
        """The metadata version of those of ``ledger_ids`` that exist now, read as in :meth:`ledgers_present`."""
        stats = self._read_ledgers(ledger_ids, lambda client, path: client.exists_async(path))
        return {ledger: stat.version for ledger, stat in stats.items()}

    def ledgers_metadata(self, ledger_ids: Collection[int]) -> dict[int, LedgerZnode]:
        """The metadata znodes of those of ``ledger_ids`` that exist now, read after a ``sync`` as in
        :meth:`ledgers_present` (a ledger without one was deleted), their bytes without the ledgers' passwords.
        ClusterCacheError when ZooKeeper cannot answer them all."""
        read = self._read_ledgers(ledger_ids, lambda client, path: client.get_async(path))
        return {ledger: _znode(bytes(data), stat) for ledger, (data, stat) in read.items()}

    def replication_locks(self, ledger_ids: Collection[int]) -> dict[int, ReplicationLock]:
        """The replication workers' locks held now on those of ``ledger_ids`` (``underreplication/locks/urL%010d``),
        read after a ``sync``: who holds each and since when. ClusterCacheError when ZooKeeper cannot answer them
        all."""
        root = self.ledgers_root
        read = self._read_ledgers(
            ledger_ids,
            lambda client, path: client.get_async(path),
            path_of=lambda ledger, _: underreplication_lock_path(ledger, root=root),
        )
        return {ledger: replication_lock(bytes(data), stat.ctime) for ledger, (data, stat) in read.items()}

    def _read_ledgers(
        self,
        ledger_ids: Collection[int],
        request: Callable[[KazooClient, str], Any],
        *,
        path_of: Callable[[int, LedgerManager], str] | None = None,
    ) -> dict[int, Any]:
        """``request`` for each ledger's znode (or the node ``path_of`` names), all at once after one sync: the answers
        of those that exist."""
        if not ledger_ids:
            return {}
        with self._ledger_reads() as (client, manager):
            root = self.ledgers_root
            where = path_of or (lambda ledger, manager: ledger_path(ledger, manager=manager, root=root))
            pending = {ledger: request(client, where(ledger, manager)) for ledger in ledger_ids}
            return _answered(pending, time.monotonic() + self.connect_timeout_s)

    @contextmanager
    def _ledger_reads(self) -> Iterator[tuple[KazooClient, LedgerManager]]:
        """The connected client, after a ``sync`` of the ledgers root, and the layout's ledger manager, for reads of
        ledgers' znodes; a ZooKeeper failure in the block is a ClusterCacheError."""
        try:
            with self._lock:
                client = self._connected_client()
            client.sync(self.ledgers_root)
            yield client, self._ledger_manager(client)
        except (*ZOOKEEPER_ERRORS, _NotConnectedError) as error:
            reason = str(error) or type(error).__name__
            raise ClusterCacheError(f"cannot read the ledgers' znodes from ZooKeeper: {reason}") from error

    def _ledger_manager(self, client: KazooClient) -> LedgerManager:
        """The LAYOUT node's ledger manager (read once; hierarchical, BookKeeper's default, when there is none)."""
        if self._manager is None:
            data = read_optional(client, layout_path(root=self.ledgers_root))
            try:
                self._manager = parse_layout(data).manager if data is not None else LedgerManager.HIERARCHICAL
            except FormatError as error:
                raise ClusterCacheError(f"the LAYOUT node does not parse: {error}") from error
        return self._manager

    def invalidate(self) -> None:
        """Make the next :meth:`get` read ZooKeeper."""
        with self._lock:
            self._read_at = float("-inf")

    def close(self) -> None:
        """Stop and close the ZooKeeper client (a later :meth:`get` starts a new one)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            close_zookeeper_client(client)

    # ----------------------------------------------------------------------- reading

    def _connected_client(self) -> KazooClient:
        client = self._client
        if client is None:
            client = start_zookeeper_client(self.zk_settings, timeout_s=self.connect_timeout_s)
            self._client = client
        if not client.connected:
            raise _NotConnectedError("not connected to ZooKeeper")
        return client

    def _read(self, previous: ClusterSnapshot | None) -> ClusterSnapshot:
        client = self._connected_client()
        writable, readonly = read_registrations(client, self.ledgers_root)
        racks_data = read_optional(client, self.racks_path) if self.racks_path else None
        racks, racks_problem = _racks(racks_data, previous)
        registrations: dict[str, bytes | None] = {**readonly, **writable}
        view = ClusterView(racks=racks, writable=frozenset(writable), readonly=frozenset(readonly))
        return ClusterSnapshot(view, registrations, int(time.time() * 1000), racks_problem)


def _answered(pending: Mapping[_K, Any], deadline: float) -> dict[_K, Any]:
    """The answers of asynchronous reads sent together, waited for until ``deadline`` (``time.monotonic``): those of
    nodes that exist (no ``NoNodeError``, no None)."""
    answers = {}
    for key, result in pending.items():
        try:
            answer = result.get(timeout=max(0.0, deadline - time.monotonic()))
        except NoNodeError:
            continue
        if answer is not None:
            answers[key] = answer
    return answers


def _znode(data: bytes, stat: Any) -> LedgerZnode:
    """A ledger znode as read for the checker: its bytes without the password, and their decode error."""
    redacted = redacted_metadata(data)
    return LedgerZnode(redacted.data, stat.version, stat.mtime, redacted.decode_error)


def _racks(data: bytes | None, previous: ClusterSnapshot | None) -> tuple[dict[str, str], str]:
    """Bookie id -> rack from the rack node's bytes; on bad bytes the previous racks and the problem."""
    if data is None:
        return {}, ""
    try:
        return dict(parse_pulsar_racks(data).racks), ""
    except FormatError as error:
        kept = dict(previous.view.racks) if previous is not None else {}
        logger.error("the rack node does not parse (%s); keeping the %d racks known before", error, len(kept))
        return kept, str(error)


# --------------------------------------------------------------------------- one reader per process

_shared: dict[tuple[Any, ...], tuple[int, CachedClusterReader]] = {}
_shared_lock = threading.Lock()


def shared_reader(
    zk_settings: ZooKeeperSection,
    ledgers_root: str = "/ledgers",
    *,
    ttl_s: float = DEFAULT_TTL_S,
    racks_path: str = DEFAULT_RACKS_PATH,
) -> CachedClusterReader:
    """This process's reader for these settings, root, rack node and TTL (a new one after a fork); closed at exit."""
    key = (zk_settings, ledgers_root, racks_path, ttl_s)
    with _shared_lock:
        found = _shared.get(key)
        if found is not None and found[0] == os.getpid():
            return found[1]
        reader = CachedClusterReader(zk_settings, ledgers_root, ttl_s=ttl_s, racks_path=racks_path)
        _shared[key] = (os.getpid(), reader)
        return reader


def close_shared_readers() -> None:
    """Close every shared reader made by this process (registered with :mod:`atexit`)."""
    with _shared_lock:
        readers = [reader for pid, reader in _shared.values() if pid == os.getpid()]
        _shared.clear()
    for reader in readers:
        reader.close()


atexit.register(close_shared_readers)
