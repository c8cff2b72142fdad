"""The simulated cluster's scenario as data: the model, entry-range arithmetic and the placement rule.

Pure (no I/O). :mod:`scrutiny.simulator.scenario` parses and validates the TOML file into
these types; :mod:`scrutiny.simulator.state` steps them through the schedule. In short a
scenario names the bookies (racks, read-only / stopped / wiped, faults, ledgers in limbo), the
ledgers (E/WQ/AQ, state, last entry, segments or "auto" ensembles, custom metadata, what each
bookie holds when it deviates from its stripe, under-replication marks and the replication workers' locks on them,
a recovery that closed it too low, corrupt metadata, or no metadata at all while bookies still hold its entries: an
orphan), BookKeeper's auto-recovery (disabled or not, an auditor
elected or not), what the ground truth assumes of the checker, and a schedule of timed changes.

Every entry a bookie holds starts with the header its writer put on it; its last-add-confirmed
follows one rule, :func:`entry_lac` (a writer acknowledged in order: entry ``e`` carries ``e - 1``,
a stray copy after everything the writer had acknowledged carries the last acknowledged entry).

What a bookie holds of a ledger is *described* (segments, the last entry written, per-bookie
``missing`` / ``add`` entry ranges), never listed entry by entry. :func:`check_ledger` is the
rule every ledger meets, whether the file declares it or a scheduled change makes it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.ledger_metadata import LedgerState
from scrutiny.core.placement import PlacementPolicy, PlacementResult
from scrutiny.core.sequence_groups import MAX_ENTRY_ID
from scrutiny.proto import bookkeeper_protocol_pb2 as bk_pb

#: Entry ranges are inclusive ``(first, last)`` pairs.
Range = tuple[int, int]
MAX_ENTRY: Final = MAX_ENTRY_ID
#: A closed ledger's length in bytes, a signed 64-bit field of its metadata.
MAX_LENGTH: Final = 2**63 - 1
PULSAR_TOPIC_KEY: Final = "pulsar/managed-ledger"
DEFAULT_ENTRY_SIZE: Final = 1024
_AUTO_ATTEMPTS: Final = 200


class ScenarioError(ScrutinyError, ValueError):
    """A scenario that cannot be used; the message names the place (``ledgers[3].segments[0]: ...``)."""


# --------------------------------------------------------------------------- the model


class BookieMode(StrEnum):
    """How a bookie is registered (and whether it listens at all)."""

    WRITABLE = "writable"
    READONLY = "readonly"
    STOPPED = "stopped"  # not registered, not listening


class FaultKind(StrEnum):
    """How a bookie misbehaves when asked for a listing (both the v3 protocol and the agent API)."""

    UNRESPONSIVE = "unresponsive"  # v3: never answers; agent: the call hangs
    SLOW = "slow"  # answers after delay_s
    STATUS = "status"  # v3: answers this status; agent: UNKNOWN with the status as reason
    GARBAGE = "garbage"  # v3: a broken frame; agent: a listing that does not decode


class GarbageKind(StrEnum):
    """The broken v3 frame of a ``garbage`` fault, as the simulated v3 bookie writes it."""

    RANDOM_PAYLOAD = "random_payload"  # a well-formed length, then bytes that are never a protobuf message
    NEGATIVE_LENGTH = "negative_length"  # a length of -1
    HUGE_LENGTH = "huge_length"  # a length of 2^31 - 1, above any frame limit


class CorruptKind(StrEnum):
    """How a corrupt ledger znode is broken."""

    GARBAGE = "garbage"  # random bytes, no header
    TRUNCATED = "truncated"  # valid v3 bytes cut in the middle of the message
    BAD_VERSION = "bad_version"  # header with format version 9


class AutoPlacement(StrEnum):
    """What an "auto" ensemble must do under the checker's placement policy."""

    SATISFY = "satisfy"
    VIOLATE = "violate"
    ANY = "any"


class Action(StrEnum):
    """The kinds of scheduled change."""

    CLOSE = "close"
    APPEND = "append"
    CHANGE_ENSEMBLE = "change_ensemble"
    KILL = "kill"
    REVIVE = "revive"
    WIPE = "wipe"
    LOSE = "lose"
    READONLY = "readonly"
    WRITABLE = "writable"
    FAULT = "fault"
    LIMBO = "limbo"
    MARK = "mark"
    UNMARK = "unmark"
    LOCK = "lock"
    UNLOCK = "unlock"
    DELETE = "delete"
    ORPHAN = "orphan"
    CREATE = "create"
    REPAIR = "repair"
    DISABLE_AUTORECOVERY = "disable_autorecovery"
    ENABLE_AUTORECOVERY = "enable_autorecovery"
    STOP_AUDITOR = "stop_auditor"
    START_AUDITOR = "start_auditor"


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """A bookie's fault; ``ledgers`` None means every ledger, else only those."""

    kind: FaultKind
    delay_s: float = 0.0
    status: str = "EIO"
    garbage: GarbageKind = GarbageKind.RANDOM_PAYLOAD
    ledgers: frozenset[int] | None = None

    def applies_to(self, ledger_id: int) -> bool:
        """Whether a request for ``ledger_id`` meets this fault."""
        return self.ledgers is None or ledger_id in self.ledgers

    @property
    def status_code(self) -> int:
        """The numeric StatusCode of a ``status`` fault."""
        return int(bk_pb.StatusCode.Value(self.status))


@dataclass(frozen=True, slots=True)
class BookieSpec:
    """One bookie as the scenario starts it."""

    bookie_id: str
    rack: str | None = None
    mode: BookieMode = BookieMode.WRITABLE
    wiped: bool = False
    fault: FaultSpec | None = None
    limbo: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class SegmentSpec:
    """One ensemble of a ledger, from ``first`` on."""

    first: int
    ensemble: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Holding:
    """How a bookie's copy of a ledger deviates from its stripe.

    The bookie holds ``(its stripe - missing) ∪ add``: ``missing`` ranges of its stripe are lost,
    ``add`` ranges are held entirely (whatever the striping; copies outside an entry's write set
    never count for the checker). Ranges are sorted, disjoint and not touching.
    """

    missing: tuple[Range, ...] = ()
    add: tuple[Range, ...] = ()

    @property
    def default(self) -> bool:
        """True when the bookie holds exactly its stripe."""
        return not self.missing and not self.add


NO_DEVIATION: Final = Holding()
EVERYTHING: Final = ((0, MAX_ENTRY),)


@dataclass(frozen=True, slots=True)
class LockSpec:
    """A replication worker's lock on a marked ledger: the worker's bookie id and since when it holds the lock
    (seconds relative to the cluster's start; the lock node's ctime)."""

    bookie_id: str
    since_s: float


@dataclass(frozen=True, slots=True)
class MarkSpec:
    """An under-replication mark. Times are seconds relative to the cluster's start.

    ``ctime_s`` None: the mark has no ctime (then the checker judges it from ``seen_s``, when it
    appeared in ZooKeeper). ``lock``: the replication worker that took the marked ledger (None: no worker has).
    """

    replicas: tuple[str, ...]
    ctime_s: float | None
    seen_s: float
    lock: LockSpec | None = None

    def stuck_after_s(self, grace_s: float) -> float:
        """From when on (strictly after) the mark is older than the grace period."""
        since = self.ctime_s if self.ctime_s is not None else self.seen_s
        return since + grace_s


@dataclass(frozen=True)
class LedgerSpec:
    """One ledger. ``last_entry`` is lastEntryId for a closed ledger, else the last entry written.

    ``written`` is the last entry the writer sent and had acknowledged: ``last_entry`` plus ``truncated``
    or ``too_low`` for a closed ledger, ``last_entry`` otherwise. Both describe a recovery that closed
    the ledger below acknowledged entries (at most one of them is set):

    * ``truncated = K``: every bookie of the last ensemble kept its stripe of ``last_entry + 1 …
      last_entry + K``;
    * ``too_low = K``: only :attr:`kept_by` did (the first member of the last ensemble, in ensemble
      order, in the write set of ``last_entry + K``): it holds its stripe of those entries, the highest
      among them, and every other bookie holds none of them (:meth:`dropped`). That is what a recovery
      leaves when the one bookie that still had the entries was down while the others came back empty.

    ``holdings`` maps bookie ids to their deviations, applied on top of all that.

    ``orphan_since_s`` is None for a ledger with metadata. Otherwise the ledger is an *orphan*: ZooKeeper has no
    znode for it (deleted, or never written) while its bookies still hold its entries (their garbage collection never
    removed them), since then (seconds after the start; 0 for one that is an orphan from the start).
    """

    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState
    last_entry: int
    segments: tuple[SegmentSpec, ...]
    truncated: int = 0
    too_low: int = 0
    custom: tuple[tuple[str, bytes], ...] = ()
    holdings: Mapping[str, Holding] = field(default_factory=dict)
    corrupt: CorruptKind | None = None
    mark: MarkSpec | None = None
    entry_size: int = DEFAULT_ENTRY_SIZE
    orphan_since_s: float | None = None

    @property
    def orphan(self) -> bool:
        """Whether the ledger has no metadata while its bookies hold its entries (see the class doc)."""
        return self.orphan_since_s is not None

    @property
    def closed(self) -> bool:
        """Whether the ledger is CLOSED."""
        return self.state is LedgerState.CLOSED

    @property
    def written(self) -> int:
        """The last entry the writer sent, all acknowledged (see the class doc)."""
        return self.last_entry + self.truncated + self.too_low

    @property
    def kept_by(self) -> str | None:
        """The one bookie that kept the entries after a ``too_low`` close (None without ``too_low``)."""
        if not self.too_low:
            return None
        size = self.ensemble_size
        positions = {(self.written + w) % size for w in range(min(self.write_quorum, size))}
        return self.segments[-1].ensemble[min(positions)]

    def dropped(self, bookie_id: str) -> tuple[Range, ...]:
        """The entries of its stripe the bookie lost with a ``too_low`` close: all those after the end, unless it
        is :attr:`kept_by` (none without ``too_low``). Its holding applies on top."""
        if not self.too_low or bookie_id == self.kept_by:
            return ()
        return ((self.last_entry + 1, self.written),)

    @property
    def lock(self) -> LockSpec | None:
        """The replication worker's lock on the ledger's mark (None: not marked, or no worker took it)."""
        return None if self.mark is None else self.mark.lock

    def holding(self, bookie_id: str) -> Holding:
        """The bookie's deviation from its stripe (none by default)."""
        return self.holdings.get(bookie_id, NO_DEVIATION)

    def bookies(self) -> set[str]:
        """Every bookie of any ensemble or holding."""
        out = {b for s in self.segments for b in s.ensemble}
        out.update(self.holdings)
        return out

    def data_spans(self) -> list[tuple[SegmentSpec, int, int]]:
        """Each segment with the entries its bookies received ``[lo, hi]`` (hi < lo: none)."""
        out: list[tuple[SegmentSpec, int, int]] = []
        for index, segment in enumerate(self.segments):
            nxt = self.segments[index + 1].first - 1 if index + 1 < len(self.segments) else self.written
            out.append((segment, segment.first, nxt))
        return out


def entry_lac(spec: LedgerSpec, entry_id: int) -> int:
    """The last-add-confirmed the writer put in an entry's header (what a plain READ_ENTRY of it shows).

    The simulated writer is acknowledged in order, each entry before it sends the next: an entry ``e`` it sent (up
    to ``written``) carries ``e - 1`` (-1 for entry 0), whether the close kept it (``e <= last_entry``) or dropped
    it (``truncated``, ``too_low``: it was acknowledged all the same). A stray copy beyond ``written`` (a holding's
    ``add``: never acknowledged) carries the last entry acknowledged then, ``written``; for a ledger closed where
    its writer stopped that is lastEntryId, which proves nothing.

    So the highest entry a bookie holds after a closed ledger's end proves acknowledged entries (a last-add-confirmed
    above lastEntryId) exactly when the close dropped some (``truncated`` or ``too_low``) and that entry is above
    ``last_entry + 1``: ``last_entry + 1`` itself carries lastEntryId, so a close one entry too low proves nothing.
    """
    return min(entry_id - 1, spec.written)


def entry_header(ledger_id: int, entry_id: int, spec: LedgerSpec | None = None) -> EntryHeader:
    """The header the writer put on an entry of ``spec``'s ledger: last-add-confirmed per :func:`entry_lac`, length
    ``(entry + 1) × entry_size`` (at most a signed 64-bit length). Without a spec: a writer acknowledged in order,
    entries of ``DEFAULT_ENTRY_SIZE``."""
    size = DEFAULT_ENTRY_SIZE if spec is None else spec.entry_size
    lac = entry_id - 1 if spec is None else entry_lac(spec, entry_id)
    return EntryHeader(ledger_id, entry_id, lac, min((entry_id + 1) * size, MAX_LENGTH))


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Where and how the cluster is written to ZooKeeper."""

    ledgers_root: str = "/ledgers"
    racks_path: str = "/bookies"
    rack_group: str = "default"
    instance_id: str = ""
    v3_encoding: str = "per_run"
    #: DbLedgerStorage's write cache, as the bookies' agents see it: a ledger's entries reach the index they read
    #: only at the first flush (every this many seconds from the bookies' start) after its last write; until
    #: then an agent answers NO_LEDGER, as real ones do (measured on BookKeeper 4.17). 0: no write cache.
    write_cache_flush_s: float = 0.0
    #: BookKeeper's auto-recovery is disabled from the start (``<root>/underreplication/disable`` made at t = 0).
    autorecovery_disabled: bool = False
    #: An auditor is elected from the start (its vote under ``<root>/underreplication/auditorelection``).
    auditor: bool = True


@dataclass(frozen=True, slots=True)
class CheckerSpec:
    """What the ground truth assumes of the checker's configuration (match it when comparing)."""

    under_replication_grace_s: float = 3600.0
    placement: PlacementPolicy = PlacementPolicy.NONE
    min_racks_per_write_quorum: int = 2
    enforce_min_racks: bool = False
    min_zones_per_write_quorum: int = 2
    desired_zones_per_write_quorum: int = 3
    default_rack: str = "/default-rack"
    request_timeout_s: float = 5.0
    #: A bookie stopped this long is lost (the watcher's lost delay plus its grace): ``BOOKIE_LOST``.
    bookie_lost_after_s: float = 300.0
    #: A lost bookie's ledger neither marked nor re-replicated this long after: ``UNDER_REPLICATION_NOT_MARKED``.
    under_replication_mark_grace_s: float = 300.0
    #: A ledger in recovery (from the start) this long: ``RECOVERY_STALLED``.
    recovery_stalled_grace_s: float = 600.0
    #: Auto-recovery disabled strictly longer than this: ``AUTORECOVERY_DISABLED`` turns critical.
    autorecovery_disabled_critical_s: float = 3600.0
    #: No auditor vote strictly longer than this, while one is expected: ``NO_AUDITOR``.
    no_auditor_grace_s: float = 300.0
    #: Whether the cluster runs BookKeeper's AutoRecovery, so that an auditor must be elected.
    auditor_expected: bool = True
    #: A ledger a bookie still lists this long after the checker first saw it there without metadata: ``ORPHAN_LEDGER``.
    orphan_grace_s: float = 3600.0

    def as_json_dict(self) -> dict[str, object]:
        """The assumptions, for the truth file."""
        return {
            "under_replication_grace_s": self.under_replication_grace_s,
            "placement": self.placement.value,
            "min_racks_per_write_quorum": self.min_racks_per_write_quorum,
            "enforce_min_racks": self.enforce_min_racks,
            "min_zones_per_write_quorum": self.min_zones_per_write_quorum,
            "desired_zones_per_write_quorum": self.desired_zones_per_write_quorum,
            "default_rack": self.default_rack,
            "request_timeout_s": self.request_timeout_s,
            "bookie_lost_after_s": self.bookie_lost_after_s,
            "under_replication_mark_grace_s": self.under_replication_mark_grace_s,
            "recovery_stalled_grace_s": self.recovery_stalled_grace_s,
            "autorecovery_disabled_critical_s": self.autorecovery_disabled_critical_s,
            "no_auditor_grace_s": self.no_auditor_grace_s,
            "auditor_expected": self.auditor_expected,
            "orphan_grace_s": self.orphan_grace_s,
        }


@dataclass(frozen=True)
class Event:
    """One scheduled change at ``at_s`` seconds after the start; fields per action (see the docs)."""

    at_s: float
    action: Action
    index: int
    ledger: int | None = None
    bookie: str | None = None
    last_entry: int | None = None
    first: int | None = None
    ensemble: tuple[str, ...] | None = None
    copied: bool = True
    replicas: tuple[str, ...] = ()
    age_s: float = 0.0
    with_ctime: bool = True
    locked_by: str | None = None
    fault: FaultSpec | None = None
    ledgers: frozenset[int] = frozenset()
    spec: LedgerSpec | None = None

    def describe(self) -> str:
        """A short text for logs and the truth file."""
        target = f" ledger {self.ledger}" if self.ledger is not None else ""
        target += f" bookie {self.bookie}" if self.bookie is not None else ""
        return f"{self.action.value}{target}"


@dataclass(frozen=True)
class Scenario:
    """A parsed, validated scenario (its schedule too: every change applies to the state it meets).

    ``ledgers`` are the ledgers with metadata, ``orphans`` those the bookies hold without any from the start.
    """

    name: str
    description: str
    seed: int
    cluster: ClusterSpec
    checker: CheckerSpec
    bookies: tuple[BookieSpec, ...]
    ledgers: tuple[LedgerSpec, ...]
    schedule: tuple[Event, ...] = ()
    orphans: tuple[LedgerSpec, ...] = ()

    def bookie_ids(self) -> list[str]:
        """The bookie ids in declaration order."""
        return [b.bookie_id for b in self.bookies]

    def racks(self) -> dict[str, str]:
        """Bookie id -> rack, for bookies with a rack."""
        return {b.bookie_id: b.rack for b in self.bookies if b.rack is not None}


# --------------------------------------------------------------------------- entry ranges


def normalize_ranges(ranges: Iterable[Range]) -> tuple[Range, ...]:
    """Sorted, disjoint, non-touching ranges covering the same entries (empty ranges dropped)."""
    out: list[list[int]] = []
    for lo, hi in sorted(r for r in ranges if r[0] <= r[1]):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def subtract_ranges(ranges: Sequence[Range], removed: Sequence[Range]) -> tuple[Range, ...]:
    """``ranges`` minus ``removed`` (both normalized)."""
    out: list[Range] = []
    for lo, hi in ranges:
        start = lo
        for r_lo, r_hi in removed:
            if r_hi < start or r_lo > hi:
                continue
            if r_lo > start:
                out.append((start, r_lo - 1))
            start = max(start, r_hi + 1)
            if start > hi:
                break
        if start <= hi:
            out.append((start, hi))
    return tuple(out)


def intersect_ranges(ranges: Sequence[Range], lo: int, hi: int) -> tuple[Range, ...]:
    """The parts of normalized ``ranges`` inside ``[lo, hi]``."""
    return tuple((max(a, lo), min(b, hi)) for a, b in ranges if a <= hi and b >= lo)


# --------------------------------------------------------------------------- placement rule


def placement_outcome(
    ensemble: Sequence[str], write_quorum: int, racks: Mapping[str, str], checker: CheckerSpec
) -> tuple[PlacementResult, str]:
    """How a segment with ``ensemble`` meets the checker's policy, and why not (facts, section 7).

    Rack-aware: every write set (``WQ`` consecutive members, wrapping) spans at least
    ``min(WQ, min_racks)`` racks; with ``enforce_min_racks`` no member may be on the default rack.
    Zone-aware: the zone is a location's first component; a member without one (or on the
    default zone or rack) fails; fewer than ``min(WQ, min_zones)`` zones fail, fewer than
    ``min(WQ, desired_zones)`` are soft.
    Racks of read-only and stopped bookies count like any other.
    """
    size = len(ensemble)
    sets = [[ensemble[(start + w) % size] for w in range(min(write_quorum, size))] for start in range(size)]
    if checker.placement is PlacementPolicy.RACKAWARE:
        rack_of = {b: racks.get(b, checker.default_rack) for b in ensemble}
        if checker.enforce_min_racks:
            on_default = [b for b in ensemble if rack_of[b] == checker.default_rack]
            if on_default:
                return PlacementResult.FAIL, f"on the default rack: {', '.join(on_default)}"
        needed = min(write_quorum, checker.min_racks_per_write_quorum)
        for members in sets:
            if len({rack_of[b] for b in members}) < needed:
                return PlacementResult.FAIL, f"write set {members} spans fewer than {needed} racks"
        return PlacementResult.MEETS_STRICT, ""
    if checker.placement is PlacementPolicy.ZONEAWARE:
        zone_of = {b: _zone(racks.get(b), checker.default_rack) for b in ensemble}
        unknown = [b for b in ensemble if zone_of[b] is None]
        if unknown:
            return PlacementResult.FAIL, f"no known zone: {', '.join(unknown)}"
        minimum = min(write_quorum, checker.min_zones_per_write_quorum)
        desired = min(write_quorum, checker.desired_zones_per_write_quorum)
        spans = [len({zone_of[b] for b in members}) for members in sets]
        if min(spans) < minimum:
            return PlacementResult.FAIL, f"a write set spans fewer than {minimum} zones"
        if min(spans) < desired:
            return PlacementResult.MEETS_SOFT, f"a write set spans fewer than {desired} zones"
    return PlacementResult.MEETS_STRICT, ""


def _zone(location: str | None, default_rack: str) -> str | None:
    if location is None or location in ("/default-zone/default-upgradedomain", default_rack):
        return None
    parts = [p for p in location.split("/") if p]
    return parts[0] if parts else None


def auto_ensemble(
    size: int,
    write_quorum: int,
    pool: Sequence[str],
    *,
    racks: Mapping[str, str],
    checker: CheckerSpec,
    want: AutoPlacement,
    rng: random.Random,
    cache: dict[tuple[tuple[str, ...], int], PlacementResult] | None = None,
) -> tuple[str, ...] | None:
    """A random ensemble of ``size`` bookies of ``pool`` meeting ``want`` (None if none was found).

    ``cache`` (ensemble, WQ) -> outcome spares re-checking ensembles seen before (racks fixed).
    """
    members = list(pool)
    if size > len(members):
        return None
    if want is AutoPlacement.ANY or checker.placement is PlacementPolicy.NONE:
        return None if want is AutoPlacement.VIOLATE else tuple(rng.sample(members, size))
    outcomes = cache if cache is not None else {}
    for _ in range(_AUTO_ATTEMPTS):
        candidate = None
        if want is AutoPlacement.VIOLATE:
            candidate = _violating_candidate(size, write_quorum, members, racks, rng)
        candidate = candidate or tuple(rng.sample(members, size))
        outcome = outcomes.get((candidate, write_quorum))
        if outcome is None:
            outcome, _ = placement_outcome(candidate, write_quorum, racks, checker)
            outcomes[(candidate, write_quorum)] = outcome
        if (outcome is PlacementResult.FAIL) == (want is AutoPlacement.VIOLATE):
            return candidate
    return None


def _violating_candidate(
    size: int, write_quorum: int, pool: Sequence[str], racks: Mapping[str, str], rng: random.Random
) -> tuple[str, ...] | None:
    """An ensemble whose first write set lies on one rack, when a rack has enough bookies."""
    by_rack: dict[str, list[str]] = {}
    for bookie in pool:
        by_rack.setdefault(racks.get(bookie, ""), []).append(bookie)
    crowded = [members for members in by_rack.values() if len(members) >= min(write_quorum, size)]
    if not crowded:
        return None
    same = rng.sample(rng.choice(crowded), min(write_quorum, size))
    rest = rng.sample([b for b in pool if b not in same], size - len(same))
    return (*same, *rest)


# --------------------------------------------------------------------------- locations and the ledger rule


class Where:
    """A location in the scenario document, for error messages."""

    __slots__ = ("_key", "_parent")

    def __init__(self, key: str | int, parent: Where | None = None) -> None:
        self._key = key
        self._parent = parent

    @property
    def path(self) -> str:
        """The dotted path, built only when an error needs it."""
        if self._parent is None:
            return str(self._key)
        above = self._parent.path
        if isinstance(self._key, int):
            return f"{above}[{self._key}]"
        return f"{above}.{self._key}" if above else self._key

    def at(self, key: str | int) -> Where:
        return Where(key, self)

    def fail(self, message: str) -> ScenarioError:
        path = self.path
        return ScenarioError(f"{path}: {message}" if path else message)


def check_ledger(spec: LedgerSpec, bookie_ids: Sequence[str], where: Where) -> None:
    """Raise ScenarioError unless the ledger is one BookKeeper could have written."""
    previous = 0
    for index, segment in enumerate(spec.segments):
        here = where.at("segments").at(index)
        if segment.first < previous:
            raise here.fail(f"first entry {segment.first} is below the previous segment's {previous}")
        previous = segment.first
        if len(segment.ensemble) != spec.ensemble_size:
            raise here.fail(f"{len(segment.ensemble)} bookies, the ensemble size is {spec.ensemble_size}")
        if len(set(segment.ensemble)) != len(segment.ensemble):
            raise here.fail("a bookie appears twice in the ensemble")
        unknown = [b for b in segment.ensemble if b not in bookie_ids]
        if unknown:
            raise here.fail(f"unknown bookie(s) {', '.join(unknown)}")
    if spec.segments[0].first != 0:
        raise where.fail("the first segment must start at entry 0")
    if spec.segments[-1].first > spec.last_entry + 1 and spec.closed:
        raise where.fail(f"the last segment starts after last_entry + 1 ({spec.last_entry + 1})")
    if (spec.truncated or spec.too_low) and not spec.closed:
        raise where.fail("only a closed ledger can be truncated or closed too low")
    if spec.truncated and spec.too_low:
        raise where.fail("give at most one of truncated and too_low")
    if spec.truncated < 0 or spec.too_low < 0 or spec.written >= MAX_ENTRY:
        raise where.fail(f"the entries after the end must be within [{spec.last_entry + 1}, {MAX_ENTRY - 1}]")
    if not spec.closed and spec.segments[-1].first > spec.written + 1:
        raise where.fail(f"the last segment starts after the last written entry + 1 ({spec.written + 1})")
    if spec.closed and (spec.last_entry + 1) * spec.entry_size > MAX_LENGTH:
        raise where.fail(
            f"a closed ledger's length (last_entry + 1) × entry_size = {(spec.last_entry + 1) * spec.entry_size:,}"
            f" bytes does not fit in the metadata's 64 bits (at most {MAX_LENGTH:,})"
        )
    if spec.mark is not None:
        unknown = [b for b in spec.mark.replicas if b not in bookie_ids]
        if unknown:
            raise where.fail(f"under_replicated names unknown bookie(s) {', '.join(unknown)}")
        lock = spec.mark.lock
        if lock is not None and lock.bookie_id not in bookie_ids:
            raise where.fail(f"under_replicated.locked_by names unknown bookie {lock.bookie_id}")
