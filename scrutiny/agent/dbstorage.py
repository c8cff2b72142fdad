"""The bookie agent's DbLedgerStorage backend: entry listings read from the bookie's RocksDB index.

Layout (BookKeeper's DbLedgerStorage, see docs/agent.md): ledger L lives in the ledger
directory ``directory_index(L, N)`` of the N directories in the bookie's configured order;
each directory holds two RocksDB databases (default column family, bytewise comparator):

* ``<dir>/current/ledgers``: key BE64(ledgerId) — or, after an index rebuild, 16 bytes whose
  first 8 are the id — and value a protobuf ``LedgerData`` (exists, fenced, masterKey,
  explicitLac, limbo), decoded with :class:`scrutiny.proto.bookie_agent_pb2.LedgerData`;
* ``<dir>/current/locations``: key BE64(ledgerId) ‖ BE64(entryId), value the entry's location
  (ignored here).

Each database is opened as a RocksDB **secondary** instance and caught up with the bookie (the
primary) before each batch; it is never opened read-write or read-only. Nothing is ever written
into the bookie's directories: rocksdict writes a ``rocksdict-config.json`` into the path it is
given, so it is given a *shadow* directory of our own that holds symbolic links to the
primary's ``CURRENT``, ``IDENTITY`` and ``MANIFEST-*`` files (refreshed before each catch-up),
while ``db_paths`` and ``wal_dir`` point RocksDB at the primary's directory for its table and
log files. The secondary's own files (its info log) go in another directory of ours. Both live
under a state directory (a fresh temporary directory by default) and are removed on close.

Answers, per ledger (:func:`answer_for`):

* the ledger record says *limbo* → UNKNOWN (BP-46: the bookie may have lost entries);
* no record and no entries → NO_LEDGER (an explicit negative);
* entries or a record → POSITIVE with the entries as a compact listing; entries without a
  record (a deleted ledger whose entries are not cleaned up yet, or a lost record) are still
  held by the bookie, so they are positive too;
* anything that goes wrong (missing directory, not a RocksDB database, open, catch-up or read
  error, undecodable record, negative id) → UNKNOWN with the reason, never NO_LEDGER.

``as_of_ms`` is when the catch-up that the answer reads from started: everything the bookie had
written to its index before that is in the answer; entries still in its write cache are not.

Ledger listings (:meth:`DbLedgerStorageBackend.list_ledgers`, one page at a time): in each directory, the union
of the ids of ``ledgers`` (a record) and ``locations`` (at least one entry with a non-negative id), ascending,
walked by seeks rather than entry by entry: in ``locations`` ledger L's first key is its first entry, a
``seek_for_prev`` to BE64(L) ‖ BE64(2^63 - 1) lands on its last, and the step after it on the next ledger's first key
(a seek to BE64(L + 1) when L has keys after its last entry), so a ledger costs the same whatever its length. Keys
whose first 8 bytes are a negative id (the storage flags) sort after every ledger and end the walk. The directories
are walked together (their locks taken in index order) and merged lazily: a page reads its ledgers plus one more per
directory, and holds O(page + directories) in memory whatever the bookie holds. The scans bypass RocksDB's block
cache (:meth:`_Secondary.scan_iterator`).
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import re
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError
from rocksdict import AccessType, DBPath, Options, Rdict, RdictIter, ReadOptions

from scrutiny.agent.server import (
    CANCELLED_REASON,
    Cancelled,
    LedgerAnswer,
    ListingCancelledError,
    ListingStatus,
    SourceHealth,
    never,
)
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.held_ledgers import LISTING_START, NO_ENTRY, HeldLedger, LedgerPage
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.sequence_groups import SequenceGroup, merge_fields
from scrutiny.proto import bookie_agent_pb2 as pb

log = logging.getLogger(__name__)

LEDGERS_DB = "ledgers"
#: How often (in ledgers read) a call asks whether its caller gave up: often enough to stop within milliseconds.
CANCEL_CHECK_LEDGERS = 64
LOCATIONS_DB = "locations"
_BE64 = struct.Struct(">q")
_ZERO64 = bytes(8)
_INT64_MAX = 2**63 - 1
#: Primary files the shadow directory links to; table (.sst) and log (.log) files are reached
#: through ``db_paths``/``wal_dir``, and nothing else (LOCK, LOG, OPTIONS) is needed.
_SHADOWED = re.compile(r"CURRENT|IDENTITY|MANIFEST-[0-9]+")
_CATCH_UP_ATTEMPTS = 5

#: ``on_catch_up(directory_index, database_name, seconds, ok)``: called after every open or catch-up.
CatchUpObserver = Callable[[int, str, float, bool], None]


class StorageUnavailableError(ScrutinyError):
    """A ledger directory's database cannot be opened or caught up (the message says why).

    ``reopen`` says whether the secondary instance should be closed and opened afresh before the
    next attempt (not for a catch-up that only kept racing with the bookie's log deletions).
    """

    def __init__(self, message: str, *, reopen: bool = True) -> None:
        self.reopen = reopen
        super().__init__(message)


class AgentConfigError(ScrutinyError, ValueError):
    """A backend configuration that would be unsafe or cannot work (e.g. the state dir inside a ledger dir)."""


# ---------------------------------------------------------------- pure helpers


def directory_index(ledger_id: int, directories: int) -> int:
    """The directory (0-based, configured order) holding ``ledger_id`` among ``directories``.

    BookKeeper computes ``MathUtils.signSafeMod(ledgerId, N)``: Java's remainder (which takes the
    dividend's sign), plus N when negative — i.e. the non-negative residue of the *signed* 64-bit
    id. Python's ``%`` with a positive divisor is exactly that for any int. It is not the residue of
    the id read as unsigned (``(L + 2**64) % N`` differs from it for a negative L unless N divides
    2**64), nor ``abs(L) % N``.
    """
    if directories < 1:
        raise ValueError("there must be at least one ledger directory")
    return ledger_id % directories


def ledger_key(ledger_id: int) -> bytes:
    """The ``ledgers`` key of a ledger, and the prefix of its ``locations`` keys: BE64, signed."""
    return _BE64.pack(ledger_id)


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    """The ``locations`` key of an entry: BE64(ledgerId) ‖ BE64(entryId)."""
    return _BE64.pack(ledger_id) + _BE64.pack(entry_id)


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """What the agent uses of a ``LedgerData`` value (the master key is never kept)."""

    exists: bool
    fenced: bool
    limbo: bool


def decode_ledger_record(value: bytes) -> LedgerRecord:
    """Decode a ``ledgers`` value; raises :class:`ValueError` when it is not a ``LedgerData`` message."""
    try:
        data = pb.LedgerData.FromString(value)
    except DecodeError as error:
        raise ValueError(f"undecodable ledger record ({len(value)} bytes): {error}") from error
    return LedgerRecord(exists=data.exists, fenced=data.fenced, limbo=data.limbo)


def runs_of(entry_ids: Iterable[int]) -> list[tuple[int, int]]:
    """Maximal runs ``(first, last)`` of consecutive ids in an ascending sequence of distinct ids."""
    runs: list[tuple[int, int]] = []
    first = last = -2
    for entry in entry_ids:
        if entry == last + 1:
            last = entry
            continue
        if last >= 0:
            runs.append((first, last))
        first = last = entry
    if last >= 0:
        runs.append((first, last))
    return runs


def groups_of_runs(runs: Iterable[tuple[int, int]]) -> list[SequenceGroup]:
    """Compact sequence groups (equal, equally spaced runs fused) for ascending disjoint runs."""
    return merge_fields((first, first, last - first + 1, 0) for first, last in runs)


def answer_for(
    ledger_id: int, record: LedgerRecord | None, runs: Sequence[tuple[int, int]], as_of_ms: int
) -> LedgerAnswer:
    """The answer for a ledger from its record (None: absent) and its entry runs, as of ``as_of_ms``."""
    if record is not None and record.limbo:
        return LedgerAnswer.in_limbo(ledger_id, "ledger in limbo on this bookie (it may have lost entries)")
    if record is None and not runs:
        return LedgerAnswer(ledger_id, ListingStatus.NO_LEDGER, as_of_ms=as_of_ms)
    return LedgerAnswer(
        ledger_id,
        ListingStatus.POSITIVE,
        listing=encode_listing(groups_of_runs(runs)),
        as_of_ms=as_of_ms,
        fenced=record is not None and record.fenced,
        has_ledger_record=record is not None,
    )


# ---------------------------------------------------------------- RocksDB secondaries


class _Secondary:
    """One of the bookie's databases, opened as a secondary instance through a shadow directory of ours."""

    def __init__(self, primary: Path, scratch: Path) -> None:
        self.primary = primary
        self.shadow = scratch / "shadow"
        self.secondary = scratch / "secondary"
        self.db: Rdict | None = None

    def open(self) -> None:
        """Open (or reopen) as a secondary. Raises :class:`StorageUnavailableError`."""
        self.close()
        if not self.primary.is_dir():
            raise StorageUnavailableError(f"{self.primary} does not exist or is not a directory")
        if not (self.primary / "CURRENT").is_file():
            raise StorageUnavailableError(f"{self.primary} is not a RocksDB database (no CURRENT file)")
        for directory in (self.shadow, self.secondary):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
        self._link_primary_files()
        options = Options(raw_mode=True)
        options.set_max_open_files(-1)  # keep table files open: the bookie may delete them after a compaction
        options.set_db_paths([DBPath(str(self.primary), 0)])
        options.set_wal_dir(str(self.primary))
        options.set_max_log_file_size(8 << 20)  # the secondary's own info log, in our directory
        options.set_keep_log_file_num(2)
        try:
            self.db = Rdict(
                str(self.shadow),
                options,
                column_families={},
                access_type=AccessType.secondary(str(self.secondary)),
            )
        except Exception as error:
            raise StorageUnavailableError(f"cannot open {self.primary} as a RocksDB secondary: {error}") from error

    def catch_up(self) -> None:
        """Replay what the primary wrote since the last catch-up. Raises :class:`StorageUnavailableError`.

        On return, everything the primary had written before the call is visible. Two races are
        handled by catching up again (a few times at most):

        * the primary switched to a new MANIFEST (a bookie restart): RocksDB asks to try again,
          and the shadow links are refreshed first;
        * the primary deleted a write-ahead log during the catch-up (a memtable flush finished):
          the secondary may have read the MANIFEST before the flush was recorded and found the
          log gone before replaying its tail, which silently hides those writes until the next
          catch-up. RocksDB deletes a log only after recording the flush, so a catch-up during
          which no log present at its start disappeared has seen all of them.
        """
        if self.db is None:
            raise StorageUnavailableError(f"{self.primary} is not open")
        problem, reopen = "the bookie deleted write-ahead logs during every attempt", False
        for _attempt in range(_CATCH_UP_ATTEMPTS):
            try:
                logs_before = self._logs()
                self._link_primary_files()
                self.db.try_catch_up_with_primary()
                if logs_before <= self._logs():
                    return
            except StorageUnavailableError:
                raise
            except Exception as error:
                problem, reopen = str(error), True
        raise StorageUnavailableError(f"cannot catch up with {self.primary}: {problem}", reopen=reopen)

    def _logs(self) -> set[str]:
        try:
            return {name for name in _list(self.primary) if name.endswith(".log")}
        except OSError as error:
            raise StorageUnavailableError(f"cannot list {self.primary}: {error.strerror or error}") from error

    def iterator(self) -> RdictIter:
        """A fresh iterator (a consistent view as of now)."""
        if self.db is None:
            raise StorageUnavailableError(f"{self.primary} is not open")
        return self.db.iter()

    def scan_iterator(self) -> RdictIter:
        """A fresh iterator for a scan of the whole database (a ledger listing): what it reads is not kept in the
        block cache, so a scan neither grows the agent's memory with the bookie's size nor evicts what listings use."""
        if self.db is None:
            raise StorageUnavailableError(f"{self.primary} is not open")
        options = ReadOptions()
        options.fill_cache(False)  # type: ignore[call-arg]  # the stub omits the flag: fill_cache(self, v: bool)
        return self.db.iter(options)

    def close(self) -> None:
        """Close the instance (idempotent; a failure to close is logged, never raised)."""
        db, self.db = self.db, None
        if db is not None:
            try:
                db.close()
            except Exception as error:
                log.warning("closing the secondary instance of %s failed: %s", self.primary, error)

    def _link_primary_files(self) -> None:
        try:
            wanted = {name for name in _list(self.primary) if _SHADOWED.fullmatch(name)}
            present = set(_list(self.shadow))
            for name in wanted - present:
                (self.shadow / name).symlink_to(self.primary / name)
            for name in present - wanted:
                if (self.shadow / name).is_symlink():
                    (self.shadow / name).unlink()
        except OSError as error:
            raise StorageUnavailableError(f"cannot mirror {self.primary}: {error.strerror or error}") from error


def _list(directory: Path) -> list[str]:
    return [entry.name for entry in directory.iterdir()]


class _LedgerDirectory:
    """A ledger directory's two databases, their lock and their catch-up state."""

    def __init__(self, index: int, path: Path, scratch: Path, observer: CatchUpObserver | None) -> None:
        self.index = index
        self.path = path
        current = path / "current"
        self.ledgers = _Secondary(current / LEDGERS_DB, scratch / LEDGERS_DB)
        self.locations = _Secondary(current / LOCATIONS_DB, scratch / LOCATIONS_DB)
        self.lock = threading.Lock()
        self.observer = observer
        self.caught_up_ms = 0
        self.caught_up_started = -1.0  # monotonic start of the last successful catch-up
        self.error = ""

    def refresh(self, requested_at: float) -> int:
        """Catch both databases up unless a catch-up started after ``requested_at``; returns as-of ms.

        Call with ``lock`` held. Opens what is not open; on failure raises
        :class:`StorageUnavailableError`, after closing both (to be reopened next time) unless the
        failure was only a race with the bookie's log deletions.
        """
        if self.caught_up_started >= requested_at and not self.error:
            return self.caught_up_ms
        started_mono, started_ms = time.monotonic(), int(time.time() * 1000)
        try:
            for name, database in ((LEDGERS_DB, self.ledgers), (LOCATIONS_DB, self.locations)):
                self._refresh_one(name, database)
        except StorageUnavailableError as error:
            if error.reopen:
                self.ledgers.close()
                self.locations.close()
            self.error = str(error)
            raise
        self.caught_up_started, self.caught_up_ms, self.error = started_mono, started_ms, ""
        return started_ms

    def _refresh_one(self, name: str, database: _Secondary) -> None:
        started = time.perf_counter()
        ok = False
        try:
            if database.db is None:
                database.open()
            database.catch_up()
            ok = True
        finally:
            if self.observer is not None:
                self.observer(self.index, name, time.perf_counter() - started, ok)

    def close(self) -> None:
        with self.lock:
            self.ledgers.close()
            self.locations.close()


# ---------------------------------------------------------------- the backend


class DbLedgerStorageBackend:
    """Listings from the RocksDB indexes of a DbLedgerStorage bookie (a :class:`ListingBackend`).

    ``ledger_dirs`` are the directories holding ``current/ledgers`` and ``current/locations``, in
    the bookie's configured order (its index directories when configured apart from the ledger
    directories). ``state_dir`` is where this backend keeps its own files (a fresh subdirectory
    is created in it and removed on close; default: the system's temporary directory); it must
    not be inside a ledger directory. Databases are opened lazily, on first use.
    """

    def __init__(
        self,
        ledger_dirs: Sequence[str | Path],
        *,
        state_dir: str | Path | None = None,
        on_catch_up: CatchUpObserver | None = None,
    ) -> None:
        if not ledger_dirs:
            raise AgentConfigError("at least one ledger directory is needed")
        paths = [Path(d).absolute() for d in ledger_dirs]
        base = Path(state_dir).absolute() if state_dir is not None else Path(tempfile.gettempdir())
        for path in paths:
            real_base, real_path = base.resolve(), path.resolve()
            if real_base == real_path or real_path in real_base.parents:
                raise AgentConfigError(f"the state directory {base} must not be inside the ledger directory {path}")
        base.mkdir(parents=True, exist_ok=True)
        self._scratch = Path(tempfile.mkdtemp(prefix="scrutiny-agent-", dir=base))
        self._directories = [
            _LedgerDirectory(i, path, self._scratch / f"dir{i}", on_catch_up) for i, path in enumerate(paths)
        ]
        self._closed = False

    @property
    def scratch_dir(self) -> Path:
        """The directory of this backend's own files (removed on close)."""
        return self._scratch

    def get_listings(self, ledger_ids: Sequence[int], *, cancelled: Cancelled = never) -> list[LedgerAnswer]:
        """One answer per id, in order; storage trouble becomes UNKNOWN answers (never raised). Once ``cancelled``
        (checked every :data:`CANCEL_CHECK_LEDGERS` ledgers), the ledgers not read yet are UNKNOWN."""
        requested_at = time.monotonic()
        by_directory: dict[int, list[int]] = {}
        answers: dict[int, LedgerAnswer] = {}
        for ledger_id in ledger_ids:
            if ledger_id < 0:
                answers[ledger_id] = LedgerAnswer.unknown(ledger_id, "negative ids are not BookKeeper ledger ids")
            else:
                by_directory.setdefault(directory_index(ledger_id, len(self._directories)), []).append(ledger_id)
        for index, ids in by_directory.items():
            for answer in self._answer_directory(self._directories[index], ids, requested_at, cancelled):
                answers[answer.ledger_id] = answer
        return [answers[ledger_id] for ledger_id in ledger_ids]

    def list_ledgers(self, after_ledger_id: int, max_ledgers: int, *, cancelled: Cancelled = never) -> LedgerPage:
        """The held ledgers above ``after_ledger_id``, ascending, at most ``max_ledgers`` (see the module doc).

        A ledger is held when its directory's ``ledgers`` database has a record of it or its ``locations`` database
        an entry of it with a non-negative id. Raises :class:`StorageUnavailableError` when a directory cannot be
        opened or caught up, :class:`ValueError` for an undecodable record or a malformed key, whatever RocksDB
        raises for a failed read, and :class:`~scrutiny.agent.server.ListingCancelledError` once ``cancelled`` (checked
        every :data:`CANCEL_CHECK_LEDGERS` ledgers read): never a page that could miss a held ledger.
        """
        if after_ledger_id < LISTING_START or max_ledgers < 1:
            raise ValueError(f"cannot list {max_ledgers} ledgers after {after_ledger_id}")
        requested_at = time.monotonic()
        checks = _CancelCheck(cancelled)
        with contextlib.ExitStack() as locks:
            streams: list[Iterator[HeldLedger]] = []
            as_of: list[int] = []
            for directory in self._directories:  # locked in index order: no other path holds two at once
                checks.check()
                locks.enter_context(directory.lock)
                if self._closed:
                    raise StorageUnavailableError("the agent is shutting down")
                try:
                    as_of.append(directory.refresh(requested_at))
                except StorageUnavailableError as error:
                    raise StorageUnavailableError(f"ledger directory {directory.index}: {error}") from error
                records = _records(directory.ledgers.scan_iterator(), after_ledger_id)
                entries = _entry_bounds(directory.locations.scan_iterator(), after_ledger_id)
                streams.append(_union(records, entries))
            held: list[HeldLedger] = []
            for ledger in heapq.merge(*streams, key=_ledger_id):  # reads one ledger ahead in each directory
                checks.tick()
                held.append(ledger)
                if len(held) > max_ledgers:
                    break
        return LedgerPage(tuple(held[:max_ledgers]), end=len(held) <= max_ledgers, as_of_ms=min(as_of))

    def health(self) -> list[SourceHealth]:
        """Open and catch up every directory now; report which can be read."""
        out: list[SourceHealth] = []
        for directory in self._directories:
            with directory.lock:
                try:
                    directory.refresh(time.monotonic())
                    ok, reason = True, ""
                except StorageUnavailableError as error:
                    ok, reason = False, str(error)
                out.append(SourceHealth(directory.index, str(directory.path), ok, reason, directory.caught_up_ms))
        return out

    def close(self) -> None:
        """Close every database and remove this backend's own files (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for directory in self._directories:
            directory.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _answer_directory(
        self, directory: _LedgerDirectory, ids: list[int], requested_at: float, cancelled: Cancelled
    ) -> list[LedgerAnswer]:
        with directory.lock:
            if self._closed:
                return [LedgerAnswer.unknown(i, "the agent is shutting down") for i in ids]
            try:
                as_of_ms = directory.refresh(requested_at)
                ledgers, locations = directory.ledgers.iterator(), directory.locations.iterator()
            except StorageUnavailableError as error:
                return [LedgerAnswer.unknown(i, f"ledger directory {directory.index}: {error}") for i in ids]
            answers: list[LedgerAnswer] = []
            for position, ledger_id in enumerate(ids):
                if position % CANCEL_CHECK_LEDGERS == 0 and cancelled():
                    return answers + [LedgerAnswer.unknown(i, CANCELLED_REASON) for i in ids[position:]]
                answers.append(_answer_one(ledger_id, ledgers, locations, as_of_ms))
            return answers


def _answer_one(ledger_id: int, ledgers: RdictIter, locations: RdictIter, as_of_ms: int) -> LedgerAnswer:
    try:
        value = _ledger_record_value(ledgers, ledger_id)
        record = decode_ledger_record(value) if value is not None else None
        if record is not None and record.limbo:
            return answer_for(ledger_id, record, (), as_of_ms)
        return answer_for(ledger_id, record, runs_of(_entry_ids(locations, ledger_id)), as_of_ms)
    except Exception as error:
        return LedgerAnswer.unknown(ledger_id, f"cannot read the index: {error}")


def _ledger_record_value(it: RdictIter, ledger_id: int) -> bytes | None:
    """The ``ledgers`` value under BE64(id), else under the first 16-byte key starting with it."""
    prefix = ledger_key(ledger_id)
    it.seek(prefix)
    while it.valid():
        key: bytes = it.key()
        if key[:8] != prefix:
            break
        if len(key) in (8, 16):
            value: bytes = it.value()
            return value
        it.next()
    it.status()
    return None


def _entry_ids(it: RdictIter, ledger_id: int) -> Iterator[int]:
    """The ledger's entry ids in ``locations``, ascending; raises if the iterator fails on the way.

    Negative entry ids sort after every other id of the ledger (BE64 of a negative is 0xff...)
    and are not entries: the scan stops there.
    """
    prefix = ledger_key(ledger_id)
    unpack = _BE64.unpack_from
    it.seek(prefix + _ZERO64)
    while it.valid():
        key: bytes = it.key()
        if key[:8] != prefix:
            break
        if len(key) != 16:
            raise ValueError(f"a locations key of {len(key)} bytes (expected 16)")
        entry: int = unpack(key, 8)[0]
        if entry < 0:
            break
        yield entry
        it.next()
    it.status()


# ---------------------------------------------------------------- ledger listings


class _CancelCheck:
    """Asks ``cancelled`` every :data:`CANCEL_CHECK_LEDGERS` ledgers of a listing; raises ``ListingCancelledError``."""

    def __init__(self, cancelled: Cancelled) -> None:
        self._cancelled = cancelled
        self._ledgers = 0

    def check(self) -> None:
        """Raise if the caller gave up."""
        if self._cancelled():
            raise ListingCancelledError(CANCELLED_REASON)

    def tick(self) -> None:
        """One more ledger read: check now and then."""
        if self._ledgers % CANCEL_CHECK_LEDGERS == 0:
            self.check()
        self._ledgers += 1


def _ledger_id(ledger: HeldLedger) -> int:
    return ledger.ledger_id


def _records(it: RdictIter, after: int) -> Iterator[tuple[int, bool]]:
    """``(ledger id, limbo)`` of every ledger record above ``after`` in a ``ledgers`` database, ascending.

    A ledger's record is its first key of 8 or 16 bytes starting with BE64(id), as :func:`_ledger_record_value`
    reads it; other keys are skipped, and keys of negative ids (the storage flags) end the walk. Raises
    :class:`ValueError` for a record that does not decode, and whatever the iterator raises.
    """
    if after >= _INT64_MAX:
        return
    unpack, parse = _BE64.unpack_from, pb.LedgerData.FromString
    last = after
    it.seek(ledger_key(after + 1))
    while it.valid():
        key: bytes = it.key()
        if len(key) >= 8:
            ledger_id: int = unpack(key)[0]
            if ledger_id < 0:
                break
            if ledger_id != last and len(key) in (8, 16):
                value: bytes = it.value()
                try:
                    limbo = parse(value).limbo
                except DecodeError as error:
                    raise ValueError(
                        f"ledger {ledger_id}: undecodable ledger record ({len(value)} bytes): {error}"
                    ) from error
                yield ledger_id, limbo
                last = ledger_id
        it.next()
    it.status()


def _entry_bounds(it: RdictIter, after: int) -> Iterator[tuple[int, int, int]]:
    """``(ledger id, first entry id, last entry id)`` of every ledger above ``after`` with an entry in a
    ``locations`` database, ascending; a seek and a step per ledger, whatever its number of entries.

    A ledger's first key (where the walk stands) is its first entry, ``seek_for_prev`` lands on its last entry, and the
    step after it on the next ledger's first key; a seek to BE64(id + 1) skips what a ledger may have after its last
    entry (negative entry ids, which sort after the others and are not entries). Keys shorter than 8 bytes are
    skipped, keys of negative ledger ids end the walk. Raises :class:`ValueError` for an entry key that is not 16
    bytes long, and whatever the iterator raises.
    """
    if after >= _INT64_MAX:
        return
    unpack = _BE64.unpack_from
    listed = after  # the last ledger whose first key was read
    it.seek(ledger_key(after + 1))
    while it.valid():
        key: bytes = it.key()
        if len(key) < 8:
            it.next()
            continue
        ledger_id: int = unpack(key)[0]
        if ledger_id < 0:
            break
        if ledger_id != listed:
            listed = ledger_id
            bounds = _bounds_at(it, key, ledger_id)
            if bounds is not None:
                yield ledger_id, bounds[0], bounds[1]
                it.next()  # from the last entry: normally the next ledger's first key
                continue
        if ledger_id == _INT64_MAX:
            return
        it.seek(ledger_key(ledger_id + 1))
    it.status()


def _bounds_at(it: RdictIter, key: bytes, ledger_id: int) -> tuple[int, int] | None:
    """The first and last non-negative entry ids of the ledger whose smallest ``locations`` key is ``key`` (where
    ``it`` stands), or None when it has none. The smallest 16-byte key of a ledger is its first entry: entry ids
    sort by value, non-negative before negative."""
    unpack = _BE64.unpack_from
    prefix = key[:8]
    if len(key) != 16:  # a key that is no entry's (e.g. BE64(id) alone): its entries, if any, come after it
        it.seek(entry_key(ledger_id, 0))
        if not it.valid():
            it.status()
            return None
        key = it.key()
        if key[:8] != prefix:
            return None
        if len(key) != 16:
            raise ValueError(f"ledger {ledger_id}: a locations key of {len(key)} bytes (expected 16)")
    first: int = unpack(key, 8)[0]
    if first < 0:
        return None
    it.seek_for_prev(entry_key(ledger_id, _INT64_MAX))
    if not it.valid():
        it.status()
        raise ValueError(f"ledger {ledger_id}: its last entry vanished from the index while read")
    key = it.key()
    if key[:8] != prefix or len(key) != 16:
        raise ValueError(f"ledger {ledger_id}: a locations key of {len(key)} bytes (expected 16)")
    last: int = unpack(key, 8)[0]
    return first, last


def _union(records: Iterator[tuple[int, bool]], entries: Iterator[tuple[int, int, int]]) -> Iterator[HeldLedger]:
    """The held ledgers of a directory: its records and its entries, merged by id (both ascending)."""
    record, entry = next(records, None), next(entries, None)
    while record is not None or entry is not None:
        if record is not None and entry is not None and record[0] == entry[0]:
            yield HeldLedger(record[0], True, record[1], entry[1], entry[2])
            record, entry = next(records, None), next(entries, None)
        elif record is not None and (entry is None or record[0] < entry[0]):
            yield HeldLedger(record[0], True, record[1], NO_ENTRY, NO_ENTRY)
            record = next(records, None)
        elif entry is not None:
            yield HeldLedger(entry[0], False, False, entry[1], entry[2])
            entry = next(entries, None)
