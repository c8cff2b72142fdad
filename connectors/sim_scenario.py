"""The simulated cluster's scenario: the TOML file format, parsed and validated, and its state over time.

Pure (no I/O besides nothing at all: :func:`parse_scenario` takes the text, :func:`load_scenario`
is the one function that reads a file). The format is documented in ``docs/simulator.md``; in
short a scenario names the bookies (racks, read-only / stopped / wiped, faults, ledgers in limbo),
the ledgers (E/WQ/AQ, state, last entry, segments or "auto" ensembles, custom metadata, what each
bookie holds when it deviates from its stripe, under-replication marks, truncation, corrupt
metadata), what the ground truth assumes of the checker, and a schedule of timed changes.

:class:`ClusterState` is the scenario at one moment: the simulated cluster and the ground truth
both step it through the schedule with :meth:`ClusterState.apply`, so they agree on what every
change means. What a bookie holds of a ledger is *described* (segments, the last entry written,
per-bookie ``missing`` / ``add`` entry ranges), never listed entry by entry:
:meth:`ClusterState.held_groups` turns the description into sequence groups for the simulated
bookies, and :mod:`scrutiny.connectors.sim_truth` reads the same description with arithmetic of
its own.
"""

from __future__ import annotations

import itertools
import math
import random
import tomllib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, TypeVar

from scrutiny.core.errors import PathError, ScrutinyError
from scrutiny.core.ledger_metadata import LedgerState
from scrutiny.core.sequence_groups import MAX_ENTRY_ID, SequenceGroup, clip
from scrutiny.core.striping import expected_groups
from scrutiny.core.zk_paths import check_root
from scrutiny.proto import bookkeeper_protocol_pb2 as bk_pb

#: Entry ranges are inclusive ``(first, last)`` pairs.
Range = tuple[int, int]
MAX_ENTRY: Final = MAX_ENTRY_ID
PULSAR_TOPIC_KEY: Final = "pulsar/managed-ledger"
DEFAULT_ENTRY_SIZE: Final = 1024
_AUTO: Final = "auto"
_AUTO_ATTEMPTS: Final = 200
#: Up to this many ordered choices of an ensemble, "auto" ensembles are picked from a table of all of them.
_TABLE_LIMIT: Final = 50_000
_MASK64: Final = 2**64 - 1
_NOT_A_FAULT_STATUS: Final = ("EOK", "ENOLEDGER")
_STATUS_NAMES: Final = frozenset(bk_pb.StatusCode.keys())
_E = TypeVar("_E", bound=StrEnum)
_BOOKIE_ID_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.-")


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
    """The broken v3 frame of a ``garbage`` fault (the names of bookie_v3_server.GarbageKind)."""

    RANDOM_PAYLOAD = "random_payload"
    NEGATIVE_LENGTH = "negative_length"
    HUGE_LENGTH = "huge_length"


class CorruptKind(StrEnum):
    """How a corrupt ledger znode is broken."""

    GARBAGE = "garbage"  # random bytes, no header
    TRUNCATED = "truncated"  # valid v3 bytes cut in the middle of the message
    BAD_VERSION = "bad_version"  # header with format version 9


class PlacementPolicy(StrEnum):
    """The placement policy the cluster's clients use (what the checker is configured with)."""

    NONE = "none"
    RACKAWARE = "rackaware"
    ZONEAWARE = "zoneaware"


class PlacementOutcome(StrEnum):
    """How a segment meets the placement policy."""

    FAIL = "FAIL"
    SOFT = "MEETS_SOFT"
    STRICT = "MEETS_STRICT"


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
    READONLY = "readonly"
    WRITABLE = "writable"
    FAULT = "fault"
    LIMBO = "limbo"
    MARK = "mark"
    UNMARK = "unmark"
    DELETE = "delete"
    CREATE = "create"
    REPAIR = "repair"


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
class MarkSpec:
    """An under-replication mark. Times are seconds relative to the cluster's start.

    ``ctime_s`` None: the mark has no ctime (then the checker judges it from ``seen_s``, when it
    appeared in ZooKeeper).
    """

    replicas: tuple[str, ...]
    ctime_s: float | None
    seen_s: float

    def stuck_after_s(self, grace_s: float) -> float:
        """From when on (strictly after) the mark is older than the grace period."""
        since = self.ctime_s if self.ctime_s is not None else self.seen_s
        return since + grace_s


@dataclass(frozen=True)
class LedgerSpec:
    """One ledger. ``last_entry`` is lastEntryId for a closed ledger, else the last entry written.

    ``written`` is the last entry the bookies received: ``last_entry`` plus ``truncated`` for a
    closed ledger (entries beyond the end, as a recovery that truncated acknowledged data leaves
    them), ``last_entry`` otherwise. ``holdings`` maps bookie ids to their deviations.
    """

    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState
    last_entry: int
    segments: tuple[SegmentSpec, ...]
    truncated: int = 0
    custom: tuple[tuple[str, bytes], ...] = ()
    holdings: Mapping[str, Holding] = field(default_factory=dict)
    corrupt: CorruptKind | None = None
    mark: MarkSpec | None = None
    entry_size: int = DEFAULT_ENTRY_SIZE

    @property
    def closed(self) -> bool:
        """Whether the ledger is CLOSED."""
        return self.state is LedgerState.CLOSED

    @property
    def written(self) -> int:
        """The last entry held by the bookies (see the class doc)."""
        return self.last_entry + self.truncated

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


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Where and how the cluster is written to ZooKeeper."""

    ledgers_root: str = "/ledgers"
    racks_path: str = "/bookies"
    rack_group: str = "default"
    instance_id: str = ""
    v3_encoding: str = "per_run"


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
    """A parsed, validated scenario (its schedule too: every change applies to the state it meets)."""

    name: str
    description: str
    seed: int
    cluster: ClusterSpec
    checker: CheckerSpec
    bookies: tuple[BookieSpec, ...]
    ledgers: tuple[LedgerSpec, ...]
    schedule: tuple[Event, ...] = ()

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
) -> tuple[PlacementOutcome, str]:
    """How a segment with ``ensemble`` meets the checker's policy, and why not (facts, section 7).

    Rack-aware: every write set (``WQ`` consecutive members, wrapping) spans at least
    ``min(WQ, min_racks)`` racks; with ``enforce_min_racks`` no member may be on the default rack.
    Zone-aware: the zone is a location's first component; a member without one fails; fewer
    than ``min(WQ, min_zones)`` zones fail, fewer than ``min(WQ, desired_zones)`` are soft.
    Racks of read-only and stopped bookies count like any other.
    """
    size = len(ensemble)
    sets = [[ensemble[(start + w) % size] for w in range(min(write_quorum, size))] for start in range(size)]
    if checker.placement is PlacementPolicy.RACKAWARE:
        rack_of = {b: racks.get(b, checker.default_rack) for b in ensemble}
        if checker.enforce_min_racks:
            on_default = [b for b in ensemble if rack_of[b] == checker.default_rack]
            if on_default:
                return PlacementOutcome.FAIL, f"on the default rack: {', '.join(on_default)}"
        needed = min(write_quorum, checker.min_racks_per_write_quorum)
        for members in sets:
            if len({rack_of[b] for b in members}) < needed:
                return PlacementOutcome.FAIL, f"write set {members} spans fewer than {needed} racks"
        return PlacementOutcome.STRICT, ""
    if checker.placement is PlacementPolicy.ZONEAWARE:
        zone_of = {b: _zone(racks.get(b)) for b in ensemble}
        unknown = [b for b in ensemble if zone_of[b] is None]
        if unknown:
            return PlacementOutcome.FAIL, f"no known zone: {', '.join(unknown)}"
        minimum = min(write_quorum, checker.min_zones_per_write_quorum)
        desired = min(write_quorum, checker.desired_zones_per_write_quorum)
        spans = [len({zone_of[b] for b in members}) for members in sets]
        if min(spans) < minimum:
            return PlacementOutcome.FAIL, f"a write set spans fewer than {minimum} zones"
        if min(spans) < desired:
            return PlacementOutcome.SOFT, f"a write set spans fewer than {desired} zones"
    return PlacementOutcome.STRICT, ""


def _zone(location: str | None) -> str | None:
    if location is None or location == "/default-zone/default-upgradedomain":
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
    cache: dict[tuple[tuple[str, ...], int], PlacementOutcome] | None = None,
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
        if (outcome is PlacementOutcome.FAIL) == (want is AutoPlacement.VIOLATE):
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


# --------------------------------------------------------------------------- parsing helpers


class _Where:
    """A location in the scenario document, for error messages."""

    __slots__ = ("_key", "_parent")

    def __init__(self, key: str | int, parent: _Where | None = None) -> None:
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

    def at(self, key: str | int) -> _Where:
        return _Where(key, self)

    def fail(self, message: str) -> ScenarioError:
        path = self.path
        return ScenarioError(f"{path}: {message}" if path else message)


def _table(value: object, where: _Where) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.fail(f"expected a table, got {type(value).__name__}")
    return value


def _check_keys(table: Mapping[str, object], allowed: Iterable[str], where: _Where) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise where.fail(f"unknown key(s) {', '.join(unknown)}")


def _int(value: object, where: _Where, minimum: int | None = None, maximum: int = MAX_ENTRY) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(f"expected an integer, got {value!r}")
    if (minimum is not None and value < minimum) or value > maximum:
        raise where.fail(f"{value} is out of range [{minimum}, {maximum}]")
    return value


def _number(value: object, where: _Where, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise where.fail(f"expected a number, got {value!r}")
    if value < minimum:
        raise where.fail(f"{value} is below {minimum}")
    return float(value)


def _str(value: object, where: _Where) -> str:
    if not isinstance(value, str):
        raise where.fail(f"expected a string, got {value!r}")
    return value


def _bool(value: object, where: _Where) -> bool:
    if not isinstance(value, bool):
        raise where.fail(f"expected true or false, got {value!r}")
    return value


def _enum(kind: type[_E], value: object, where: _Where) -> _E:
    text = _str(value, where)
    try:
        return kind(text.lower() if kind is not Action else text)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise where.fail(f"{text!r} is not one of {choices}") from None


def _entry(value: object, where: _Where) -> int:
    if value == "end":
        return MAX_ENTRY
    return _int(value, where, 0)


def _ranges(value: object, where: _Where) -> tuple[Range, ...]:
    """``[[a, b], c, [d, "end"]]`` (inclusive ranges or single entries) as normalized ranges."""
    if not isinstance(value, list):
        raise where.fail("expected a list of [first, last] ranges or entry ids")
    out: list[Range] = []
    for index, item in enumerate(value):
        here = where.at(index)
        if isinstance(item, list):
            if len(item) != 2:
                raise here.fail("a range is [first, last]")
            lo, hi = _entry(item[0], here), _entry(item[1], here)
            if hi < lo:
                raise here.fail(f"range [{lo}, {hi}] ends before it starts")
            out.append((lo, hi))
        else:
            entry = _entry(item, here)
            out.append((entry, entry))
    return normalize_ranges(out)


def _ids(value: object, where: _Where) -> list[int]:
    """Ledger ids: an integer, or a list of integers and inclusive ``[first, last]`` ranges."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [_int(value, where, 0)]
    if not isinstance(value, list):
        raise where.fail("expected a ledger id or a list of ids and [first, last] ranges")
    ids: list[int] = []
    for index, item in enumerate(value):
        here = where.at(index)
        if isinstance(item, list):
            if len(item) != 2:
                raise here.fail("an id range is [first, last]")
            lo, hi = _int(item[0], here, 0), _int(item[1], here, 0)
            if hi < lo:
                raise here.fail(f"id range [{lo}, {hi}] ends before it starts")
            ids.extend(range(lo, hi + 1))
        else:
            ids.append(_int(item, here, 0))
    return ids


def _bookie_id(value: object, where: _Where) -> str:
    text = _str(value, where)
    if not text or not set(text) <= _BOOKIE_ID_CHARS or text == "readonly":
        raise where.fail(f"invalid bookie id {text!r} (expected [a-zA-Z0-9:_.-]+, not 'readonly')")
    return text


# --------------------------------------------------------------------------- parsing: cluster and bookies

_TOP_KEYS: Final = ("scenario", "cluster", "checker", "defaults", "bookies", "ledgers", "schedule")
_CLUSTER_KEYS: Final = (
    "ledgers_root",
    "racks_path",
    "rack_group",
    "instance_id",
    "v3_encoding",
    "bookies",
    "racks",
    "readonly",
    "stopped",
    "wiped",
)
_BOOKIE_KEYS: Final = ("rack", "mode", "wiped", "fault", "limbo")
_FAULT_KEYS: Final = ("kind", "delay_s", "status", "garbage", "ledgers")


def _parse_cluster(doc: Mapping[str, Any], seed: int) -> tuple[ClusterSpec, list[str], dict[str, Any]]:
    where = _Where("cluster")
    table = _table(doc.get("cluster", {}), where)
    _check_keys(table, _CLUSTER_KEYS, where)
    try:
        root = check_root(_str(table.get("ledgers_root", "/ledgers"), where.at("ledgers_root")))
    except PathError as error:
        raise where.at("ledgers_root").fail(str(error)) from None
    racks_path = _str(table.get("racks_path", "/bookies"), where.at("racks_path"))
    if racks_path and not racks_path.startswith("/"):
        raise where.at("racks_path").fail("must be an absolute path or empty")
    encoding = _str(table.get("v3_encoding", "per_run"), where.at("v3_encoding"))
    if encoding not in ("per_run", "compact"):
        raise where.at("v3_encoding").fail("must be per_run or compact")
    instance = _str(table.get("instance_id", ""), where.at("instance_id")) or str(
        uuid.UUID(int=random.Random(f"instance:{seed}").getrandbits(128), version=4)
    )
    ids = _bookie_ids(table.get("bookies"), where.at("bookies"))
    spec = ClusterSpec(
        ledgers_root=root,
        racks_path=racks_path,
        rack_group=_str(table.get("rack_group", "default"), where.at("rack_group")),
        instance_id=instance,
        v3_encoding=encoding,
    )
    return spec, ids, table


def _bookie_ids(value: object, where: _Where) -> list[str]:
    if value is None:
        raise where.fail("required: a number of bookies or a list of bookie ids")
    if isinstance(value, int) and not isinstance(value, bool):
        return [f"bookie-{i}" for i in range(1, _int(value, where, 1, 10_000) + 1)]
    if not isinstance(value, list) or not value:
        raise where.fail("expected a number of bookies or a non-empty list of bookie ids")
    ids = [_bookie_id(item, where.at(i)) for i, item in enumerate(value)]
    if len(set(ids)) != len(ids):
        raise where.fail("bookie ids repeat")
    return ids


def _parse_bookies(doc: Mapping[str, Any], ids: list[str], cluster_table: Mapping[str, Any]) -> list[BookieSpec]:
    where = _Where("cluster")
    racks = _initial_racks(cluster_table.get("racks"), ids, where.at("racks"))
    modes: dict[str, BookieMode] = {}
    wiped: set[str] = set()
    for key, mode in (("readonly", BookieMode.READONLY), ("stopped", BookieMode.STOPPED)):
        for bookie in _known_bookies(cluster_table.get(key, []), ids, where.at(key)):
            if bookie in modes:
                raise where.at(key).fail(f"bookie {bookie} is already {modes[bookie].value}")
            modes[bookie] = mode
    wiped.update(_known_bookies(cluster_table.get("wiped", []), ids, where.at("wiped")))
    per_bookie = _table(doc.get("bookies", {}), _Where("bookies"))
    out: list[BookieSpec] = []
    for bookie in ids:
        spec = BookieSpec(bookie, racks.get(bookie), modes.get(bookie, BookieMode.WRITABLE), bookie in wiped)
        if bookie in per_bookie:
            spec = _bookie_table(spec, per_bookie[bookie], _Where("bookies").at(bookie))
        out.append(spec)
    unknown = sorted(set(per_bookie) - set(ids))
    if unknown:
        raise _Where("bookies").fail(f"unknown bookie(s) {', '.join(unknown)} (declare them in cluster.bookies)")
    return out


def _initial_racks(value: object, ids: list[str], where: _Where) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list):
        racks = [_str(item, where.at(i)) for i, item in enumerate(value)]
        if not racks:
            raise where.fail("an empty list of racks")
        return {bookie: racks[i % len(racks)] for i, bookie in enumerate(ids)}
    table = _table(value, where)
    unknown = sorted(set(table) - set(ids))
    if unknown:
        raise where.fail(f"unknown bookie(s) {', '.join(unknown)}")
    return {bookie: _str(rack, where.at(bookie)) for bookie, rack in table.items()}


def _known_bookies(value: object, ids: Sequence[str], where: _Where) -> list[str]:
    if not isinstance(value, list):
        raise where.fail("expected a list of bookie ids")
    out = [_bookie_id(item, where.at(i)) for i, item in enumerate(value)]
    for bookie in out:
        if bookie not in ids:
            raise where.fail(f"unknown bookie {bookie!r}")
    return out


def _bookie_table(spec: BookieSpec, value: object, where: _Where) -> BookieSpec:
    table = _table(value, where)
    _check_keys(table, _BOOKIE_KEYS, where)
    if "rack" in table:
        spec = replace(spec, rack=_str(table["rack"], where.at("rack")))
    if "mode" in table:
        spec = replace(spec, mode=_enum(BookieMode, table["mode"], where.at("mode")))
    if "wiped" in table:
        spec = replace(spec, wiped=_bool(table["wiped"], where.at("wiped")))
    if "fault" in table:
        spec = replace(spec, fault=parse_fault(table["fault"], where.at("fault")))
    if "limbo" in table:
        spec = replace(spec, limbo=frozenset(_ids(table["limbo"], where.at("limbo"))))
    return spec


def parse_fault(value: object, where: _Where | None = None) -> FaultSpec | None:
    """A fault from its TOML form: ``"unresponsive"``, ``"none"`` or a table with ``kind`` and options."""
    where = where or _Where("fault")
    if isinstance(value, str):
        if value == "none":
            return None
        value = {"kind": value}
    table = _table(value, where)
    _check_keys(table, _FAULT_KEYS, where)
    if "kind" not in table:
        raise where.fail("required: kind (unresponsive, slow, status, garbage)")
    kind = _enum(FaultKind, table["kind"], where.at("kind"))
    fault = FaultSpec(kind)
    if "delay_s" in table:
        fault = replace(fault, delay_s=_number(table["delay_s"], where.at("delay_s")))
    elif kind is FaultKind.SLOW:
        raise where.fail("a slow fault needs delay_s")
    if "status" in table:
        status = _str(table["status"], where.at("status")).upper()
        if status not in _STATUS_NAMES or status in _NOT_A_FAULT_STATUS:
            raise where.at("status").fail(f"{status!r} is not a BookKeeper error status (EIO, EUA, ...)")
        fault = replace(fault, status=status)
    if "garbage" in table:
        fault = replace(fault, garbage=_enum(GarbageKind, table["garbage"], where.at("garbage")))
    if "ledgers" in table:
        fault = replace(fault, ledgers=frozenset(_ids(table["ledgers"], where.at("ledgers"))))
    return fault


def _parse_checker(doc: Mapping[str, Any]) -> CheckerSpec:
    where = _Where("checker")
    table = _table(doc.get("checker", {}), where)
    defaults = CheckerSpec()
    _check_keys(table, defaults.as_json_dict(), where)
    spec = CheckerSpec(
        under_replication_grace_s=_number(
            table.get("under_replication_grace_s", defaults.under_replication_grace_s),
            where.at("under_replication_grace_s"),
        ),
        placement=_enum(PlacementPolicy, table.get("placement", "none"), where.at("placement")),
        min_racks_per_write_quorum=_int(
            table.get("min_racks_per_write_quorum", 2), where.at("min_racks_per_write_quorum"), 1
        ),
        enforce_min_racks=_bool(table.get("enforce_min_racks", False), where.at("enforce_min_racks")),
        min_zones_per_write_quorum=_int(
            table.get("min_zones_per_write_quorum", 2), where.at("min_zones_per_write_quorum"), 1
        ),
        desired_zones_per_write_quorum=_int(
            table.get("desired_zones_per_write_quorum", 3), where.at("desired_zones_per_write_quorum"), 1
        ),
        default_rack=_str(table.get("default_rack", defaults.default_rack), where.at("default_rack")),
        request_timeout_s=_number(table.get("request_timeout_s", 5.0), where.at("request_timeout_s"), 0.001),
    )
    return spec


# --------------------------------------------------------------------------- parsing: ledgers

_LEDGER_KEYS: Final = (
    "id",
    "ids",
    "ensemble_size",
    "write_quorum",
    "ack_quorum",
    "state",
    "last_entry",
    "ensemble",
    "segments",
    "placement",
    "truncated",
    "pulsar_topic",
    "custom",
    "corrupt_metadata",
    "under_replicated",
    "holdings",
    "entry_size",
)
_DEFAULTABLE: Final = tuple(k for k in _LEDGER_KEYS if k not in ("id", "ids"))
#: A ledger's own key that makes the default of the other one not apply.
_EXCLUSIVE: Final = {"ensemble": "segments", "segments": "ensemble"}
_HOLDING_KEYS: Final = ("bookie", "position", "segment", "nothing", "missing", "add")
_MARK_KEYS: Final = ("replicas", "age_s", "ctime")


@dataclass
class _LedgerContext:
    """What resolving a ledger table needs besides the table."""

    bookie_ids: list[str]
    racks: dict[str, str]
    checker: CheckerSpec
    seed: int
    defaults: dict[str, Any] = field(default_factory=dict)
    placements: dict[tuple[tuple[str, ...], int], PlacementOutcome] = field(default_factory=dict)
    tables: dict[tuple[int, int, AutoPlacement], list[tuple[str, ...]]] = field(default_factory=dict)

    def auto(
        self, size: int, write_quorum: int, want: AutoPlacement, ledger_id: int, index: int
    ) -> tuple[str, ...] | None:
        """The "auto" ensemble of a ledger's segment: a pseudo-random pick, reproducible from the seed.

        With few possible ensembles (at most :data:`_TABLE_LIMIT` ordered choices) every one that meets
        ``want`` is listed once and a hash of (seed, ledger, segment) picks one; otherwise random tries.
        """
        key = (size, write_quorum, want)
        if key not in self.tables:
            self.tables[key] = self._table(size, write_quorum, want)
        table = self.tables[key]
        if table:
            return table[_mix(self.seed, ledger_id, index) % len(table)]
        rng = random.Random((self.seed << 72) | (ledger_id << 8) | index)
        return auto_ensemble(
            size,
            write_quorum,
            self.bookie_ids,
            racks=self.racks,
            checker=self.checker,
            want=want,
            rng=rng,
            cache=self.placements,
        )

    def _table(self, size: int, write_quorum: int, want: AutoPlacement) -> list[tuple[str, ...]]:
        if math.perm(len(self.bookie_ids), size) > _TABLE_LIMIT:
            return []
        out = []
        for candidate in itertools.permutations(self.bookie_ids, size):
            if want is AutoPlacement.ANY or self.checker.placement is PlacementPolicy.NONE:
                if want is not AutoPlacement.VIOLATE:
                    out.append(candidate)
                continue
            outcome, _ = placement_outcome(candidate, write_quorum, self.racks, self.checker)
            if (outcome is PlacementOutcome.FAIL) == (want is AutoPlacement.VIOLATE):
                out.append(candidate)
        return out


def _mix(seed: int, ledger_id: int, index: int) -> int:
    """A well-spread 64-bit hash of three integers (splitmix64's finaliser)."""
    value = (seed * 0x9E3779B97F4A7C15 + ledger_id * 0xBF58476D1CE4E5B9 + index * 0x94D049BB133111EB) & _MASK64
    value ^= value >> 30
    value = (value * 0xBF58476D1CE4E5B9) & _MASK64
    value ^= value >> 27
    value = (value * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def _parse_ledgers(doc: Mapping[str, Any], context: _LedgerContext) -> list[LedgerSpec]:
    defaults = context.defaults
    tables = doc.get("ledgers", [])
    if not isinstance(tables, list):
        raise _Where("ledgers").fail("expected an array of tables ([[ledgers]])")
    seen: dict[int, int] = {}
    out: list[LedgerSpec] = []
    for index, raw in enumerate(tables):
        where = _Where("ledgers").at(index)
        table = _with_defaults(defaults, _table(raw, where))
        for spec in ledger_specs(table, context, where):
            if spec.ledger_id in seen:
                raise where.fail(f"ledger {spec.ledger_id} is already defined by ledgers[{seen[spec.ledger_id]}]")
            seen[spec.ledger_id] = index
            out.append(spec)
    out.sort(key=lambda s: s.ledger_id)
    return out


def _with_defaults(defaults: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """A ledger table with the [defaults] it does not override (``ensemble`` and ``segments`` exclude each other)."""
    shared = {k: v for k, v in defaults.items() if not (k in _EXCLUSIVE and _EXCLUSIVE[k] in own)}
    return {**shared, **own}


def ledger_specs(table: Mapping[str, Any], context: _LedgerContext, where: _Where) -> list[LedgerSpec]:
    """Every ledger one ``[[ledgers]]`` table defines (one per id)."""
    _check_keys(table, _LEDGER_KEYS, where)
    if ("id" in table) == ("ids" in table):
        raise where.fail("give exactly one of id or ids")
    ids = _ids(table["id"] if "id" in table else table["ids"], where.at("id" if "id" in table else "ids"))
    if not ids:
        raise where.fail("no ledger ids")
    shape = _LedgerShape.of(table, where)
    return [shape.build(ledger_id, table, context, where) for ledger_id in ids]


@dataclass(frozen=True)
class _LedgerShape:
    """The id-independent fields of a ledger table, checked once for a whole id range."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState
    last_entry: int
    truncated: int
    placement: AutoPlacement
    corrupt: CorruptKind | None
    entry_size: int
    custom: tuple[tuple[str, str], ...]
    topic: str | None

    @classmethod
    def of(cls, table: Mapping[str, Any], where: _Where) -> _LedgerShape:
        for key in ("ensemble_size", "write_quorum", "last_entry"):
            if key not in table:
                raise where.fail(f"required: {key} (here or in [defaults])")
        size = _int(table["ensemble_size"], where.at("ensemble_size"), 1, 1000)
        write = _int(table["write_quorum"], where.at("write_quorum"), 1, size)
        ack = _int(table.get("ack_quorum", write), where.at("ack_quorum"), 1, write)
        state_text = _str(table.get("state", "CLOSED"), where.at("state")).upper()
        if state_text not in LedgerState.__members__:
            raise where.at("state").fail(f"{state_text!r} is not OPEN, IN_RECOVERY or CLOSED")
        state = LedgerState(state_text)
        last = _int(table["last_entry"], where.at("last_entry"), -1, MAX_ENTRY - 1)
        truncated = _int(table.get("truncated", 0), where.at("truncated"), 0, MAX_ENTRY - 1 - max(last, 0))
        if truncated and state is not LedgerState.CLOSED:
            raise where.at("truncated").fail("only a closed ledger can be truncated")
        corrupt_value = table.get("corrupt_metadata", False)
        corrupt: CorruptKind | None = None
        if corrupt_value is True:
            corrupt = CorruptKind.GARBAGE
        elif corrupt_value is not False:
            corrupt = _enum(CorruptKind, corrupt_value, where.at("corrupt_metadata"))
        custom = _table(table.get("custom", {}), where.at("custom"))
        topic = table.get("pulsar_topic")
        return cls(
            ensemble_size=size,
            write_quorum=write,
            ack_quorum=ack,
            state=state,
            last_entry=last,
            truncated=truncated,
            placement=_enum(AutoPlacement, table.get("placement", "satisfy"), where.at("placement")),
            corrupt=corrupt,
            entry_size=_int(table.get("entry_size", DEFAULT_ENTRY_SIZE), where.at("entry_size"), 0, 2**40),
            custom=tuple((str(k), _str(v, where.at("custom").at(k))) for k, v in custom.items()),
            topic=None if topic is None else _str(topic, where.at("pulsar_topic")),
        )

    def build(self, ledger_id: int, table: Mapping[str, Any], context: _LedgerContext, where: _Where) -> LedgerSpec:
        """The ledger ``ledger_id`` of this shape (ensembles, holdings and the mark resolved for it)."""
        segments = self._segments(ledger_id, table, context, where)
        custom = [(k, v.replace("{id}", str(ledger_id)).encode()) for k, v in self.custom]
        if self.topic is not None:
            custom = [
                ("application", b"pulsar"),
                ("component", b"managed-ledger"),
                (PULSAR_TOPIC_KEY, self.topic.replace("{id}", str(ledger_id)).encode()),
                *custom,
            ]
        holdings = _holdings(table["holdings"], segments, context, where.at("holdings")) if "holdings" in table else {}
        mark = None
        if "under_replicated" in table:
            mark = _mark(table["under_replicated"], segments, where.at("under_replicated"))
        spec = LedgerSpec(
            ledger_id=ledger_id,
            ensemble_size=self.ensemble_size,
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            state=self.state,
            last_entry=self.last_entry,
            segments=segments,
            truncated=self.truncated,
            custom=tuple(custom),
            holdings=holdings,
            corrupt=self.corrupt,
            mark=mark,
            entry_size=self.entry_size,
        )
        check_ledger(spec, context.bookie_ids, where)
        return spec

    def _segments(
        self, ledger_id: int, table: Mapping[str, Any], context: _LedgerContext, where: _Where
    ) -> tuple[SegmentSpec, ...]:
        if ("ensemble" in table) == ("segments" in table):
            raise where.fail("give exactly one of ensemble or segments")
        raw = [{"first": 0, "ensemble": table["ensemble"]}] if "ensemble" in table else table["segments"]
        seg_where = where.at("ensemble" if "ensemble" in table else "segments")
        if not isinstance(raw, list) or not raw:
            raise seg_where.fail("expected a non-empty list of {first, ensemble} tables")
        out: list[SegmentSpec] = []
        for index, item in enumerate(raw):
            here = seg_where.at(index) if "segments" in table else seg_where
            segment = _table(item, here)
            _check_keys(segment, ("first", "ensemble"), here)
            first = _int(segment.get("first", 0), here.at("first"), 0)
            ensemble = self._ensemble(segment.get("ensemble"), ledger_id, index, context, here)
            out.append(SegmentSpec(first, ensemble))
        return tuple(out)

    def _ensemble(
        self, value: object, ledger_id: int, index: int, context: _LedgerContext, where: _Where
    ) -> tuple[str, ...]:
        if value == _AUTO:
            chosen = context.auto(self.ensemble_size, self.write_quorum, self.placement, ledger_id, index)
            if chosen is None:
                raise where.fail(f"no ensemble of {self.ensemble_size} bookies can {self.placement.value} placement")
            return chosen
        if not isinstance(value, list):
            raise where.fail('expected a list of bookie ids or "auto"')
        return tuple(_bookie_id(b, where.at(i)) for i, b in enumerate(value))


def _holdings(
    value: object, segments: Sequence[SegmentSpec], context: _LedgerContext, where: _Where
) -> dict[str, Holding]:
    if not isinstance(value, list):
        raise where.fail("expected an array of tables")
    out: dict[str, Holding] = {}
    for index, item in enumerate(value):
        here = where.at(index)
        table = _table(item, here)
        _check_keys(table, _HOLDING_KEYS, here)
        bookie = _holding_bookie(table, segments, context, here)
        missing = _ranges(table.get("missing", []), here.at("missing"))
        if _bool(table.get("nothing", False), here.at("nothing")):
            missing = EVERYTHING
        add = _ranges(table.get("add", []), here.at("add"))
        previous = out.get(bookie, NO_DEVIATION)
        out[bookie] = Holding(normalize_ranges((*previous.missing, *missing)), normalize_ranges((*previous.add, *add)))
    return {b: h for b, h in out.items() if not h.default}


def _holding_bookie(
    table: Mapping[str, Any], segments: Sequence[SegmentSpec], context: _LedgerContext, where: _Where
) -> str:
    if ("bookie" in table) == ("position" in table):
        raise where.fail("give exactly one of bookie or position")
    if "bookie" in table:
        bookie = _bookie_id(table["bookie"], where.at("bookie"))
        if bookie not in context.bookie_ids:
            raise where.at("bookie").fail(f"unknown bookie {bookie!r}")
        return bookie
    segment = _int(table.get("segment", 0), where.at("segment"), -len(segments), len(segments) - 1)
    ensemble = segments[segment].ensemble
    position = _int(table["position"], where.at("position"), 0, len(ensemble) - 1)
    return ensemble[position]


def _mark(value: object, segments: Sequence[SegmentSpec], where: _Where) -> MarkSpec | None:
    if value is False:
        return None
    table = {} if value is True else _table(value, where)
    _check_keys(table, _MARK_KEYS, where)
    replicas = _mark_replicas(table.get("replicas", []), segments, where.at("replicas"))
    age = _number(table.get("age_s", 0), where.at("age_s"))
    with_ctime = _bool(table.get("ctime", True), where.at("ctime"))
    return MarkSpec(replicas, -age if with_ctime else None, 0.0)


def _mark_replicas(value: object, segments: Sequence[SegmentSpec], where: _Where) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise where.fail("expected a list of bookie ids or ensemble positions")
    out: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, int) and not isinstance(item, bool):
            ensemble = segments[-1].ensemble
            out.append(ensemble[_int(item, where.at(index), 0, len(ensemble) - 1)])
        else:
            out.append(_bookie_id(item, where.at(index)))
    return tuple(out)


def check_ledger(spec: LedgerSpec, bookie_ids: Sequence[str], where: _Where) -> None:
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
    if not spec.closed and spec.segments[-1].first > spec.written + 1:
        raise where.fail(f"the last segment starts after the last written entry + 1 ({spec.written + 1})")
    if spec.mark is not None:
        unknown = [b for b in spec.mark.replicas if b not in bookie_ids]
        if unknown:
            raise where.fail(f"under_replicated names unknown bookie(s) {', '.join(unknown)}")


# --------------------------------------------------------------------------- parsing: schedule

_EVENT_FIELDS: Final[dict[Action, tuple[str, ...]]] = {
    Action.CLOSE: ("ledger", "last_entry"),
    Action.APPEND: ("ledger", "last_entry"),
    Action.CHANGE_ENSEMBLE: ("ledger", "first", "ensemble", "copied"),
    Action.KILL: ("bookie",),
    Action.REVIVE: ("bookie",),
    Action.WIPE: ("bookie",),
    Action.READONLY: ("bookie",),
    Action.WRITABLE: ("bookie",),
    Action.FAULT: ("bookie", "fault"),
    Action.LIMBO: ("bookie", "ledgers"),
    Action.MARK: ("ledger", "replicas", "age_s", "ctime"),
    Action.UNMARK: ("ledger",),
    Action.DELETE: ("ledger",),
    Action.CREATE: ("ledger",),
    Action.REPAIR: ("ledger", "bookie"),
}
_REQUIRED_FIELDS: Final[dict[Action, tuple[str, ...]]] = {
    Action.APPEND: ("last_entry",),
    Action.CHANGE_ENSEMBLE: ("first", "ensemble"),
    Action.FAULT: ("fault",),
    Action.LIMBO: ("ledgers",),
}


def _parse_schedule(doc: Mapping[str, Any], context: _LedgerContext) -> list[Event]:
    tables = doc.get("schedule", [])
    if not isinstance(tables, list):
        raise _Where("schedule").fail("expected an array of tables ([[schedule]])")
    events = [_parse_event(raw, index, context) for index, raw in enumerate(tables)]
    events.sort(key=lambda e: (e.at_s, e.index))
    return events


def _parse_event(raw: object, index: int, context: _LedgerContext) -> Event:
    where = _Where("schedule").at(index)
    table = _table(raw, where)
    for key in ("at", "action"):
        if key not in table:
            raise where.fail(f"required: {key}")
    action = _enum(Action, table["action"], where.at("action"))
    _check_keys(table, ("at", "action", *_EVENT_FIELDS[action]), where)
    for key in (*_REQUIRED_FIELDS.get(action, ()), _EVENT_FIELDS[action][0]):
        if key not in table:
            raise where.fail(f"{action.value} needs {key}")
    event = Event(at_s=_number(table["at"], where.at("at")), action=action, index=index)
    fields: dict[str, Any] = {}
    if "bookie" in table:
        bookie = _bookie_id(table["bookie"], where.at("bookie"))
        if bookie not in context.bookie_ids:
            raise where.at("bookie").fail(f"unknown bookie {bookie!r}")
        fields["bookie"] = bookie
    if action is Action.CREATE:
        own = _table(table["ledger"], where.at("ledger"))
        specs = ledger_specs(_with_defaults(context.defaults, own), context, where.at("ledger"))
        if len(specs) != 1:
            raise where.at("ledger").fail("create defines exactly one ledger (id, not ids)")
        fields.update(ledger=specs[0].ledger_id, spec=specs[0])
    elif "ledger" in table:
        fields["ledger"] = _int(table["ledger"], where.at("ledger"), 0)
    if "last_entry" in table:
        fields["last_entry"] = _int(table["last_entry"], where.at("last_entry"), -1, MAX_ENTRY - 1)
    if "first" in table:
        fields["first"] = _int(table["first"], where.at("first"), 0)
    if "ensemble" in table:
        fields["ensemble"] = _event_ensemble(table["ensemble"], context, where.at("ensemble"))
    if "copied" in table:
        fields["copied"] = _bool(table["copied"], where.at("copied"))
    if "replicas" in table:
        fields["replicas"] = tuple(_known_bookies(table["replicas"], context.bookie_ids, where.at("replicas")))
    if "age_s" in table:
        fields["age_s"] = _number(table["age_s"], where.at("age_s"))
    if "ctime" in table:
        fields["with_ctime"] = _bool(table["ctime"], where.at("ctime"))
    if "fault" in table:
        fields["fault"] = parse_fault(table["fault"], where.at("fault"))
    if "ledgers" in table:
        fields["ledgers"] = frozenset(_ids(table["ledgers"], where.at("ledgers")))
    return replace(event, **fields)


def _event_ensemble(value: object, context: _LedgerContext, where: _Where) -> tuple[str, ...] | None:
    """A change_ensemble's new ensemble (None: "auto", chosen when the change applies)."""
    if value == _AUTO:
        return None
    return tuple(_known_bookies(value, context.bookie_ids, where))


# --------------------------------------------------------------------------- the document


def parse_scenario(text: str, *, name: str = "scenario") -> Scenario:
    """Parse and validate a scenario's TOML text (its schedule is replayed to check every change).

    Raises :class:`ScenarioError` naming the offending place on any problem.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(f"not valid TOML: {error}") from None
    _check_keys(doc, _TOP_KEYS, _Where(""))
    head = _table(doc.get("scenario", {}), _Where("scenario"))
    _check_keys(head, ("name", "description", "seed"), _Where("scenario"))
    seed = _int(head.get("seed", 0), _Where("scenario").at("seed"), 0)
    cluster, ids, cluster_table = _parse_cluster(doc, seed)
    bookies = _parse_bookies(doc, ids, cluster_table)
    checker = _parse_checker(doc)
    racks = {b.bookie_id: b.rack for b in bookies if b.rack is not None}
    defaults = _table(doc.get("defaults", {}), _Where("defaults"))
    _check_keys(defaults, _DEFAULTABLE, _Where("defaults"))
    context = _LedgerContext(ids, racks, checker, seed, defaults)
    scenario = Scenario(
        name=_str(head.get("name", name), _Where("scenario").at("name")),
        description=_str(head.get("description", ""), _Where("scenario").at("description")),
        seed=seed,
        cluster=cluster,
        checker=checker,
        bookies=tuple(bookies),
        ledgers=tuple(_parse_ledgers(doc, context)),
        schedule=tuple(_parse_schedule(doc, context)),
    )
    validate_schedule(scenario)
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read and parse a scenario file; ScenarioError (naming the file) if it cannot be read or used."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(f"cannot read scenario {file}: {error}") from None
    try:
        return parse_scenario(text, name=file.stem)
    except ScenarioError as error:
        raise ScenarioError(f"{file}: {error}") from None


def validate_schedule(scenario: Scenario) -> None:
    """Replay the schedule on a copy of the state: ScenarioError at the first change that cannot apply."""
    state = ClusterState.from_scenario(scenario)
    for event in scenario.schedule:
        state.apply(event)


# --------------------------------------------------------------------------- the state over time


@dataclass
class BookieState:
    """One bookie now."""

    bookie_id: str
    rack: str | None
    mode: BookieMode
    fault: FaultSpec | None
    limbo: frozenset[int]
    #: The mode a killed bookie comes back in.
    revive_mode: BookieMode = BookieMode.WRITABLE

    @property
    def registered(self) -> bool:
        """Whether the bookie has a writable or read-only registration."""
        return self.mode is not BookieMode.STOPPED

    def answers_unknown(self, ledger_id: int, checker: CheckerSpec) -> bool:
        """Whether a checker with ``checker.request_timeout_s`` gets no usable answer for the ledger."""
        if self.mode is BookieMode.STOPPED or ledger_id in self.limbo:
            return True
        fault = self.fault
        if fault is None or not fault.applies_to(ledger_id):
            return False
        return fault.kind is not FaultKind.SLOW or fault.delay_s >= checker.request_timeout_s


@dataclass
class Change:
    """What one scheduled change touched, for the simulated cluster to carry out."""

    metadata: set[int] = field(default_factory=set)  # ledger znodes to (re)write
    deleted: set[int] = field(default_factory=set)  # ledger znodes (and marks) to delete
    marks: set[int] = field(default_factory=set)  # marks to (re)write or delete (per the state)
    data: dict[str, set[int]] = field(default_factory=dict)  # bookie -> ledgers whose holdings changed
    stopped: set[str] = field(default_factory=set)
    started: set[str] = field(default_factory=set)
    wiped: set[str] = field(default_factory=set)
    registration: set[str] = field(default_factory=set)  # re-register (mode changed)
    faults: set[str] = field(default_factory=set)

    def touch(self, bookies: Iterable[str], ledger_id: int) -> None:
        """Record that these bookies' holdings of the ledger changed."""
        for bookie in bookies:
            self.data.setdefault(bookie, set()).add(ledger_id)


class ClusterState:
    """The scenario at one moment; :meth:`apply` moves it through the schedule (see the module doc)."""

    def __init__(
        self, scenario: Scenario, bookies: dict[str, BookieState], ledgers: dict[int, LedgerSpec], now_s: float = 0.0
    ) -> None:
        self.scenario = scenario
        self.checker = scenario.checker
        self.bookies = bookies
        self.ledgers = ledgers
        self.now_s = now_s
        self._auto_rng = random.Random(f"schedule:{scenario.seed}")
        self._index: dict[str, set[int]] = {}
        self._placement: dict[tuple[tuple[str, ...], int], PlacementOutcome] = {}
        for spec in ledgers.values():
            self._index_ledger(spec)

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> ClusterState:
        """The state at the start (wiped bookies have lost every ledger they had)."""
        bookies = {
            b.bookie_id: BookieState(
                b.bookie_id,
                b.rack,
                b.mode,
                b.fault,
                b.limbo,
                BookieMode.WRITABLE if b.mode is BookieMode.STOPPED else b.mode,
            )
            for b in scenario.bookies
        }
        ledgers = {spec.ledger_id: spec for spec in scenario.ledgers}
        state = cls(scenario, bookies, ledgers)
        for bookie in scenario.bookies:
            if bookie.wiped:
                state._lose_everything(bookie.bookie_id)
        return state

    def racks(self) -> dict[str, str]:
        """Bookie id -> rack for bookies with one."""
        return {b: s.rack for b, s in self.bookies.items() if s.rack is not None}

    def placement(self, ensemble: tuple[str, ...], write_quorum: int) -> PlacementOutcome:
        """:func:`placement_outcome` of a segment under the checker's policy (cached: racks never change)."""
        key = (ensemble, write_quorum)
        outcome = self._placement.get(key)
        if outcome is None:
            outcome, _ = placement_outcome(ensemble, write_quorum, self.racks(), self.checker)
            self._placement[key] = outcome
        return outcome

    def ledgers_of(self, bookie_id: str) -> set[int]:
        """The ledgers whose ensembles or holdings name the bookie."""
        return set(self._index.get(bookie_id, ()))

    def _index_ledger(self, spec: LedgerSpec) -> None:
        for bookie in spec.bookies():
            self._index.setdefault(bookie, set()).add(spec.ledger_id)

    def _unindex_ledger(self, spec: LedgerSpec) -> None:
        for bookie in spec.bookies():
            self._index.get(bookie, set()).discard(spec.ledger_id)

    def _put(self, spec: LedgerSpec) -> None:
        old = self.ledgers.get(spec.ledger_id)
        if old is not None:
            self._unindex_ledger(old)
        self.ledgers[spec.ledger_id] = spec
        self._index_ledger(spec)

    # ------------------------------------------------------------------- what a bookie holds

    def held_groups(self, bookie_id: str, ledger_id: int) -> tuple[SequenceGroup, ...] | None:
        """The entries the bookie holds of the ledger, as disjoint sorted groups; None when none."""
        spec = self.ledgers.get(ledger_id)
        if spec is None:
            return None
        holding = spec.holding(bookie_id)
        cut = normalize_ranges((*holding.missing, *holding.add))
        out: list[SequenceGroup] = []
        for segment, lo, hi in spec.data_spans():
            if bookie_id not in segment.ensemble or hi < lo:
                continue
            index = segment.ensemble.index(bookie_id)
            for group in expected_groups(index, spec.ensemble_size, spec.write_quorum, lo, hi):
                if not cut:
                    out.append(group)
                    continue
                for a, b in subtract_ranges(((group.first, group.last),), cut):
                    out.extend(clip(group, a, b))
        out.extend(SequenceGroup.run(lo, hi) for lo, hi in holding.add)
        out.sort()
        return tuple(out) if out else None

    # ------------------------------------------------------------------- changes

    def apply(self, event: Event) -> Change:
        """Carry out one scheduled change; ScenarioError (naming the event) when it cannot apply."""
        where = _Where("schedule").at(event.index)
        self.now_s = event.at_s
        change = Change()
        handler = _HANDLERS[event.action]
        handler(self, event, change, where)
        return change

    def _ledger(self, event: Event, where: _Where) -> LedgerSpec:
        assert event.ledger is not None
        spec = self.ledgers.get(event.ledger)
        if spec is None:
            raise where.fail(f"ledger {event.ledger} does not exist at {event.at_s} s")
        return spec

    def _bookie(self, event: Event) -> BookieState:
        assert event.bookie is not None
        return self.bookies[event.bookie]

    def _close(self, event: Event, change: Change, where: _Where) -> None:
        spec = self._ledger(event, where)
        if spec.closed:
            raise where.fail(f"ledger {spec.ledger_id} is already closed")
        last = spec.written if event.last_entry is None else event.last_entry
        if last > spec.written:
            spec = self._written_to(spec, last, change)
        closed = replace(spec, state=LedgerState.CLOSED, last_entry=last, truncated=spec.written - last)
        check_ledger(closed, list(self.bookies), where)
        self._put(closed)
        change.metadata.add(spec.ledger_id)

    def _append(self, event: Event, change: Change, where: _Where) -> None:
        spec = self._ledger(event, where)
        assert event.last_entry is not None
        if spec.closed:
            raise where.fail(f"ledger {spec.ledger_id} is closed: nothing can be appended")
        if event.last_entry <= spec.written:
            raise where.fail(f"last_entry {event.last_entry} is not after the last written {spec.written}")
        self._put(self._written_to(spec, event.last_entry, change))

    def _written_to(self, spec: LedgerSpec, last: int, change: Change) -> LedgerSpec:
        """The open ledger with entries up to ``last`` written: no bookie misses the new ones."""
        fresh = ((spec.written + 1, last),)
        holdings = {b: replace(h, missing=subtract_ranges(h.missing, fresh)) for b, h in spec.holdings.items()}
        grown = replace(spec, last_entry=last, holdings={b: h for b, h in holdings.items() if not h.default})
        change.touch(spec.segments[-1].ensemble, spec.ledger_id)
        change.touch(spec.holdings, spec.ledger_id)
        return grown

    def _change_ensemble(self, event: Event, change: Change, where: _Where) -> None:
        spec = self._ledger(event, where)
        assert event.first is not None
        ensemble = event.ensemble or self._auto(spec, where)
        existing = [i for i, s in enumerate(spec.segments) if s.first == event.first]
        segments = list(spec.segments)
        holdings = dict(spec.holdings)
        if existing:
            index = existing[-1]
            old = segments[index]
            segments[index] = SegmentSpec(old.first, ensemble)
            spans = dict((s.first, (lo, hi)) for s, lo, hi in spec.data_spans())
            lo, hi = spans[old.first]
            for bookie in set(ensemble) - set(old.ensemble):
                holding = holdings.get(bookie, NO_DEVIATION)
                span = ((lo, hi),) if hi >= lo else ()
                missing = (
                    subtract_ranges(holding.missing, span)
                    if event.copied
                    else normalize_ranges((*holding.missing, *span))
                )
                holdings[bookie] = replace(holding, missing=missing)
        else:
            if spec.closed:
                raise where.fail(f"ledger {spec.ledger_id} is closed: no new segment can start")
            if event.first <= segments[-1].first or event.first > spec.written + 1:
                raise where.fail(
                    f"a new segment must start after {segments[-1].first} and at most at {spec.written + 1}"
                )
            segments.append(SegmentSpec(event.first, ensemble))
        changed = replace(spec, segments=tuple(segments), holdings={b: h for b, h in holdings.items() if not h.default})
        check_ledger(changed, list(self.bookies), where)
        change.touch(spec.bookies() | changed.bookies(), spec.ledger_id)
        self._put(changed)
        change.metadata.add(spec.ledger_id)

    def _auto(self, spec: LedgerSpec, where: _Where) -> tuple[str, ...]:
        chosen = auto_ensemble(
            spec.ensemble_size,
            spec.write_quorum,
            [b for b, s in self.bookies.items() if s.mode is BookieMode.WRITABLE],
            racks=self.racks(),
            checker=self.checker,
            want=AutoPlacement.SATISFY,
            rng=self._auto_rng,
        )
        if chosen is None:
            raise where.fail(f"no ensemble of {spec.ensemble_size} writable bookies for ledger {spec.ledger_id}")
        return chosen

    def _kill(self, event: Event, change: Change, where: _Where) -> None:
        bookie = self._bookie(event)
        if bookie.mode is BookieMode.STOPPED:
            raise where.fail(f"bookie {bookie.bookie_id} is already stopped")
        bookie.revive_mode, bookie.mode = bookie.mode, BookieMode.STOPPED
        change.stopped.add(bookie.bookie_id)

    def _revive(self, event: Event, change: Change, where: _Where) -> None:
        bookie = self._bookie(event)
        if bookie.mode is not BookieMode.STOPPED:
            raise where.fail(f"bookie {bookie.bookie_id} is not stopped")
        bookie.mode = bookie.revive_mode
        change.started.add(bookie.bookie_id)

    def _wipe(self, event: Event, change: Change, where: _Where) -> None:
        bookie = self._bookie(event)
        touched = self._lose_everything(bookie.bookie_id)
        change.wiped.add(bookie.bookie_id)
        change.data.setdefault(bookie.bookie_id, set()).update(touched)

    def _lose_everything(self, bookie_id: str) -> set[int]:
        touched = self.ledgers_of(bookie_id)
        for ledger_id in touched:
            spec = self.ledgers[ledger_id]
            holdings = dict(spec.holdings)
            holdings[bookie_id] = Holding(EVERYTHING, ())
            self._put(replace(spec, holdings=holdings))
        return touched

    def _set_mode(self, event: Event, change: Change, where: _Where) -> None:
        bookie = self._bookie(event)
        mode = BookieMode.READONLY if event.action is Action.READONLY else BookieMode.WRITABLE
        if bookie.mode is BookieMode.STOPPED:
            bookie.revive_mode = mode
            return
        if bookie.mode is not mode:
            bookie.mode = mode
            change.registration.add(bookie.bookie_id)

    def _fault(self, event: Event, change: Change, where: _Where) -> None:
        bookie = self._bookie(event)
        bookie.fault = event.fault
        change.faults.add(bookie.bookie_id)

    def _limbo(self, event: Event, change: Change, where: _Where) -> None:
        bookie = self._bookie(event)
        bookie.limbo = event.ledgers
        change.faults.add(bookie.bookie_id)

    def _mark(self, event: Event, change: Change, where: _Where) -> None:
        spec = self._ledger(event, where)
        ctime = event.at_s - event.age_s if event.with_ctime else None
        replicas = list(spec.mark.replicas) if spec.mark is not None else []
        replicas += [b for b in event.replicas if b not in replicas]
        self._put(replace(spec, mark=MarkSpec(tuple(replicas), ctime, event.at_s)))
        change.marks.add(spec.ledger_id)

    def _unmark(self, event: Event, change: Change, where: _Where) -> None:
        spec = self._ledger(event, where)
        if spec.mark is None:
            raise where.fail(f"ledger {spec.ledger_id} is not marked under-replicated")
        self._put(replace(spec, mark=None))
        change.marks.add(spec.ledger_id)

    def _delete(self, event: Event, change: Change, where: _Where) -> None:
        spec = self._ledger(event, where)
        self._unindex_ledger(spec)
        del self.ledgers[spec.ledger_id]
        change.deleted.add(spec.ledger_id)
        change.touch(spec.bookies(), spec.ledger_id)

    def _repair(self, event: Event, change: Change, where: _Where) -> None:
        spec = self._ledger(event, where)
        bookies = [event.bookie] if event.bookie is not None else list(spec.holdings)
        holdings = {b: h for b, h in spec.holdings.items() if b not in bookies}
        self._put(replace(spec, holdings=holdings))
        change.touch(bookies, spec.ledger_id)

    def _create(self, event: Event, change: Change, where: _Where) -> None:
        assert event.spec is not None
        if event.spec.ledger_id in self.ledgers:
            raise where.fail(f"ledger {event.spec.ledger_id} already exists")
        spec = replace(event.spec, mark=replace(event.spec.mark, seen_s=event.at_s) if event.spec.mark else None)
        if spec.mark is not None and spec.mark.ctime_s is not None:
            spec = replace(spec, mark=replace(spec.mark, ctime_s=spec.mark.ctime_s + event.at_s))
        self._put(spec)
        change.metadata.add(spec.ledger_id)
        if spec.mark is not None:
            change.marks.add(spec.ledger_id)
        change.touch(spec.bookies(), spec.ledger_id)


_HANDLERS: Final = {
    Action.CLOSE: ClusterState._close,
    Action.APPEND: ClusterState._append,
    Action.CHANGE_ENSEMBLE: ClusterState._change_ensemble,
    Action.KILL: ClusterState._kill,
    Action.REVIVE: ClusterState._revive,
    Action.WIPE: ClusterState._wipe,
    Action.READONLY: ClusterState._set_mode,
    Action.WRITABLE: ClusterState._set_mode,
    Action.FAULT: ClusterState._fault,
    Action.LIMBO: ClusterState._limbo,
    Action.MARK: ClusterState._mark,
    Action.UNMARK: ClusterState._unmark,
    Action.DELETE: ClusterState._delete,
    Action.CREATE: ClusterState._create,
    Action.REPAIR: ClusterState._repair,
}
