"""The simulated cluster's scenario file: the TOML format, parsed and validated.

Pure (no I/O besides nothing at all: :func:`parse_scenario` takes the text, :func:`load_scenario`
is the one function that reads a file). The format is documented in ``docs/simulator.md``; the
types it parses into are in :mod:`scrutiny.simulator.model`. A parsed scenario's schedule is
replayed on :class:`~scrutiny.simulator.state.ClusterState` (:func:`validate_schedule`), so
every change in it is known to apply.
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

from scrutiny.core.errors import PathError
from scrutiny.core.ledger_metadata import LedgerState
from scrutiny.core.placement import PlacementPolicy, PlacementResult
from scrutiny.core.zk_paths import check_root
from scrutiny.proto import bookkeeper_protocol_pb2 as bk_pb
from scrutiny.simulator.model import (
    DEFAULT_ENTRY_SIZE,
    EVERYTHING,
    MAX_ENTRY,
    NO_DEVIATION,
    PULSAR_TOPIC_KEY,
    Action,
    AutoPlacement,
    BookieMode,
    BookieSpec,
    CheckerSpec,
    ClusterSpec,
    CorruptKind,
    Event,
    FaultKind,
    FaultSpec,
    GarbageKind,
    Holding,
    LedgerSpec,
    LockSpec,
    MarkSpec,
    Range,
    Scenario,
    ScenarioError,
    SegmentSpec,
    Where,
    auto_ensemble,
    check_ledger,
    normalize_ranges,
    placement_outcome,
)
from scrutiny.simulator.state import ClusterState

_AUTO: Final = "auto"
#: Up to this many ordered choices of an ensemble, "auto" ensembles are picked from a table of all of them.
_TABLE_LIMIT: Final = 50_000
_MASK64: Final = 2**64 - 1
_NOT_A_FAULT_STATUS: Final = ("EOK", "ENOLEDGER")
_STATUS_NAMES: Final = frozenset(bk_pb.StatusCode.keys())
_E = TypeVar("_E", bound=StrEnum)
_BOOKIE_ID_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.-")

# The limits of the format (docs/simulator.md, "Limits"). A scenario is held in memory whole, ledger by ledger,
# so a short file must not describe more than a process can hold: an id range, a count or a number of seconds
# beyond these is refused with the limit named, before anything is allocated for it.

#: A scenario file's size in bytes (a generated one of 100,000 ledgers is about 170 kB).
MAX_SCENARIO_BYTES: Final = 64 * 2**20
#: Bookies of ``cluster.bookies`` (each one that runs listens on two ports).
MAX_BOOKIES: Final = 10_000
#: A ledger's ensemble size.
MAX_ENSEMBLE_SIZE: Final = 1_000
#: A ledger's ``entry_size`` in bytes.
MAX_ENTRY_SIZE: Final = 2**40
#: Ledgers a scenario defines: its ``[[ledgers]]`` tables and ``create`` changes together (about 600 bytes of
#: memory each, and a znode each in ZooKeeper).
MAX_LEDGERS: Final = 1_000_000
#: Ledger ids its other id lists (bookies' ``limbo``, faults' ``ledgers``, ``limbo`` changes) name together.
MAX_LISTED_IDS: Final = 1_000_000
#: Ensemble members of every segment of every ledger plus the entry ranges of their holdings, together: a ledger
#: keeps its own (``ids = [[1, 1000000]]`` with 1,000 bookies an ensemble would be a billion).
MAX_LEDGER_PARTS: Final = 20_000_000
#: Bytes of custom metadata (``pulsar_topic`` and ``custom``) of every ledger together: each ledger keeps its own.
MAX_CUSTOM_BYTES: Final = 256 * 2**20
#: A time (``at``) or a duration in seconds: finite, and at most ten years (marks' ctimes stay valid epoch
#: milliseconds, the schedule's timers within range).
MAX_SECONDS: Final = 10 * 365 * 86_400


# --------------------------------------------------------------------------- parsing helpers


def _table(value: object, where: Where) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.fail(f"expected a table, got {type(value).__name__}")
    return value


def _check_keys(table: Mapping[str, object], allowed: Iterable[str], where: Where) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise where.fail(f"unknown key(s) {', '.join(unknown)}")


def _int(value: object, where: Where, minimum: int | None = None, maximum: int = MAX_ENTRY) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(f"expected an integer, got {value!r}")
    if (minimum is not None and value < minimum) or value > maximum:
        raise where.fail(f"{value} is out of range [{minimum}, {maximum}]")
    return value


def _number(value: object, where: Where, minimum: float = 0.0) -> float:
    """A number of seconds (a time or a duration) from ``minimum`` to :data:`MAX_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise where.fail(f"expected a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise where.fail(f"{value} is not a finite number of seconds")
    if value < minimum:
        raise where.fail(f"{value} is below {minimum}")
    if value > MAX_SECONDS:
        raise where.fail(f"{value} is more than {MAX_SECONDS:,} seconds (ten years), the most a scenario allows")
    return float(value)


def _str(value: object, where: Where) -> str:
    if not isinstance(value, str):
        raise where.fail(f"expected a string, got {value!r}")
    return value


def _bool(value: object, where: Where) -> bool:
    if not isinstance(value, bool):
        raise where.fail(f"expected true or false, got {value!r}")
    return value


def _enum(kind: type[_E], value: object, where: Where) -> _E:
    text = _str(value, where)
    try:
        return kind(text.lower() if kind is not Action else text)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise where.fail(f"{text!r} is not one of {choices}") from None


def _entry(value: object, where: Where) -> int:
    if value == "end":
        return MAX_ENTRY
    return _int(value, where, 0)


def _ranges(value: object, where: Where) -> tuple[Range, ...]:
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


def _ids(value: object, where: Where, budget: _Budget, kind: str = "listed_ids") -> list[int]:
    """Ledger ids: an integer, or a list of integers and inclusive ``[first, last]`` ranges.

    Their number is taken from ``budget`` (``kind``: ``ledgers`` or ``listed_ids``) before any list is made.
    """
    ranges = _id_ranges(value, where)
    budget.take(kind, sum(hi - lo + 1 for lo, hi in ranges), where)
    ids: list[int] = []
    for lo, hi in ranges:
        ids.extend(range(lo, hi + 1))
    return ids


def _id_ranges(value: object, where: Where) -> list[tuple[int, int]]:
    """The inclusive ranges of :func:`_ids`' ids, a single id as a range of one."""
    if isinstance(value, int) and not isinstance(value, bool):
        single = _int(value, where, 0)
        return [(single, single)]
    if not isinstance(value, list):
        raise where.fail("expected a ledger id or a list of ids and [first, last] ranges")
    ranges: list[tuple[int, int]] = []
    for index, item in enumerate(value):
        here = where.at(index)
        if isinstance(item, list):
            if len(item) != 2:
                raise here.fail("an id range is [first, last]")
            lo, hi = _int(item[0], here, 0), _int(item[1], here, 0)
            if hi < lo:
                raise here.fail(f"id range [{lo}, {hi}] ends before it starts")
            ranges.append((lo, hi))
        else:
            single = _int(item, here, 0)
            ranges.append((single, single))
    return ranges


#: Each meter of :class:`_Budget`: its limit, what it counts and the rule (for the error message).
_METERS: Final[dict[str, tuple[int, str, str]]] = {
    "ledgers": (MAX_LEDGERS, "ledgers", "a scenario defines at most"),
    "listed_ids": (MAX_LISTED_IDS, "ledger ids", "a scenario's limbo and fault lists name at most"),
    "parts": (MAX_LEDGER_PARTS, "ensemble members and holding ranges", "a scenario's ledgers hold at most"),
    "custom_bytes": (MAX_CUSTOM_BYTES, "bytes of custom metadata", "a scenario's ledgers hold at most"),
}


@dataclass
class _Budget:
    """How much of each limit of the format (:data:`_METERS`) one scenario has taken so far."""

    taken: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_METERS, 0))

    def take(self, kind: str, count: int, where: Where) -> None:
        """Count ``count`` more of ``kind``; ScenarioError, naming the limit, when that goes beyond it."""
        limit, noun, rule = _METERS[kind]
        total = self.taken[kind] + count
        if total > limit:
            before = f" ({total:,} with those before)" if self.taken[kind] else ""
            raise where.fail(f"{count:,} {noun}{before}: {rule} {limit:,} {noun}")
        self.taken[kind] = total


def _bookie_id(value: object, where: Where) -> str:
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
    "write_cache_flush_seconds",
    "autorecovery_disabled",
    "auditor",
    "bookies",
    "racks",
    "readonly",
    "stopped",
    "wiped",
)
_BOOKIE_KEYS: Final = ("rack", "mode", "wiped", "fault", "limbo")
_FAULT_KEYS: Final = ("kind", "delay_s", "status", "garbage", "ledgers")


def _parse_cluster(doc: Mapping[str, Any], seed: int) -> tuple[ClusterSpec, list[str], dict[str, Any]]:
    where = Where("cluster")
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
    flush = table.get("write_cache_flush_seconds", 0.0)
    if isinstance(flush, bool) or not isinstance(flush, int | float) or not 0 <= flush <= 3600:
        raise where.at("write_cache_flush_seconds").fail("must be a number of seconds from 0 to 3600")
    spec = ClusterSpec(
        ledgers_root=root,
        racks_path=racks_path,
        rack_group=_str(table.get("rack_group", "default"), where.at("rack_group")),
        instance_id=instance,
        v3_encoding=encoding,
        write_cache_flush_s=float(flush),
        autorecovery_disabled=_bool(table.get("autorecovery_disabled", False), where.at("autorecovery_disabled")),
        auditor=_bool(table.get("auditor", True), where.at("auditor")),
    )
    return spec, ids, table


def _bookie_ids(value: object, where: Where) -> list[str]:
    if value is None:
        raise where.fail("required: a number of bookies or a list of bookie ids")
    if isinstance(value, int) and not isinstance(value, bool):
        return [f"bookie-{i}" for i in range(1, _int(value, where, 1, MAX_BOOKIES) + 1)]
    if not isinstance(value, list) or not value:
        raise where.fail("expected a number of bookies or a non-empty list of bookie ids")
    if len(value) > MAX_BOOKIES:
        raise where.fail(f"{len(value):,} bookies: a scenario has at most {MAX_BOOKIES:,}")
    ids = [_bookie_id(item, where.at(i)) for i, item in enumerate(value)]
    if len(set(ids)) != len(ids):
        raise where.fail("bookie ids repeat")
    return ids


def _parse_bookies(
    doc: Mapping[str, Any], ids: list[str], cluster_table: Mapping[str, Any], budget: _Budget
) -> list[BookieSpec]:
    where = Where("cluster")
    racks = _initial_racks(cluster_table.get("racks"), ids, where.at("racks"))
    modes: dict[str, BookieMode] = {}
    wiped: set[str] = set()
    for key, mode in (("readonly", BookieMode.READONLY), ("stopped", BookieMode.STOPPED)):
        for bookie in _known_bookies(cluster_table.get(key, []), ids, where.at(key)):
            if bookie in modes:
                raise where.at(key).fail(f"bookie {bookie} is already {modes[bookie].value}")
            modes[bookie] = mode
    wiped.update(_known_bookies(cluster_table.get("wiped", []), ids, where.at("wiped")))
    per_bookie = _table(doc.get("bookies", {}), Where("bookies"))
    out: list[BookieSpec] = []
    for bookie in ids:
        spec = BookieSpec(bookie, racks.get(bookie), modes.get(bookie, BookieMode.WRITABLE), bookie in wiped)
        if bookie in per_bookie:
            spec = _bookie_table(spec, per_bookie[bookie], Where("bookies").at(bookie), budget)
        out.append(spec)
    unknown = sorted(set(per_bookie) - set(ids))
    if unknown:
        raise Where("bookies").fail(f"unknown bookie(s) {', '.join(unknown)} (declare them in cluster.bookies)")
    return out


def _initial_racks(value: object, ids: list[str], where: Where) -> dict[str, str]:
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


def _known_bookie(value: object, ids: Sequence[str], where: Where) -> str:
    """One bookie id of the cluster."""
    bookie = _bookie_id(value, where)
    if bookie not in ids:
        raise where.fail(f"unknown bookie {bookie!r}")
    return bookie


def _known_bookies(value: object, ids: Sequence[str], where: Where) -> list[str]:
    if not isinstance(value, list):
        raise where.fail("expected a list of bookie ids")
    out = [_bookie_id(item, where.at(i)) for i, item in enumerate(value)]
    for bookie in out:
        if bookie not in ids:
            raise where.fail(f"unknown bookie {bookie!r}")
    return out


def _bookie_table(spec: BookieSpec, value: object, where: Where, budget: _Budget) -> BookieSpec:
    table = _table(value, where)
    _check_keys(table, _BOOKIE_KEYS, where)
    if "rack" in table:
        spec = replace(spec, rack=_str(table["rack"], where.at("rack")))
    if "mode" in table:
        spec = replace(spec, mode=_enum(BookieMode, table["mode"], where.at("mode")))
    if "wiped" in table:
        spec = replace(spec, wiped=_bool(table["wiped"], where.at("wiped")))
    if "fault" in table:
        spec = replace(spec, fault=parse_fault(table["fault"], where.at("fault"), budget=budget))
    if "limbo" in table:
        spec = replace(spec, limbo=frozenset(_ids(table["limbo"], where.at("limbo"), budget)))
    return spec


def parse_fault(value: object, where: Where | None = None, *, budget: _Budget | None = None) -> FaultSpec | None:
    """A fault from its TOML form: ``"unresponsive"``, ``"none"`` or a table with ``kind`` and options.

    The ids of its ``ledgers`` are taken from ``budget``, the scenario's (default: a budget of its own).
    """
    where = where or Where("fault")
    budget = budget if budget is not None else _Budget()
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
        fault = replace(fault, ledgers=frozenset(_ids(table["ledgers"], where.at("ledgers"), budget)))
    return fault


def _parse_checker(doc: Mapping[str, Any]) -> CheckerSpec:
    where = Where("checker")
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
        bookie_lost_after_s=_number(
            table.get("bookie_lost_after_s", defaults.bookie_lost_after_s), where.at("bookie_lost_after_s")
        ),
        under_replication_mark_grace_s=_number(
            table.get("under_replication_mark_grace_s", defaults.under_replication_mark_grace_s),
            where.at("under_replication_mark_grace_s"),
        ),
        recovery_stalled_grace_s=_number(
            table.get("recovery_stalled_grace_s", defaults.recovery_stalled_grace_s),
            where.at("recovery_stalled_grace_s"),
        ),
        autorecovery_disabled_critical_s=_number(
            table.get("autorecovery_disabled_critical_s", defaults.autorecovery_disabled_critical_s),
            where.at("autorecovery_disabled_critical_s"),
        ),
        no_auditor_grace_s=_number(
            table.get("no_auditor_grace_s", defaults.no_auditor_grace_s), where.at("no_auditor_grace_s")
        ),
        auditor_expected=_bool(table.get("auditor_expected", defaults.auditor_expected), where.at("auditor_expected")),
        orphan_grace_s=_number(table.get("orphan_grace_s", defaults.orphan_grace_s), where.at("orphan_grace_s")),
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
    "too_low",
    "pulsar_topic",
    "custom",
    "corrupt_metadata",
    "under_replicated",
    "holdings",
    "entry_size",
    "orphan",
)
_DEFAULTABLE: Final = tuple(k for k in _LEDGER_KEYS if k not in ("id", "ids"))
#: A ledger's own key that makes the default of the other one not apply.
_EXCLUSIVE: Final = {"ensemble": "segments", "segments": "ensemble"}
_HOLDING_KEYS: Final = ("bookie", "position", "segment", "nothing", "missing", "add")
_MARK_KEYS: Final = ("replicas", "age_s", "ctime", "locked_by")


@dataclass
class _LedgerContext:
    """What resolving a ledger table needs besides the table."""

    bookie_ids: list[str]
    racks: dict[str, str]
    checker: CheckerSpec
    seed: int
    defaults: dict[str, Any] = field(default_factory=dict)
    budget: _Budget = field(default_factory=_Budget)
    placements: dict[tuple[tuple[str, ...], int], PlacementResult] = field(default_factory=dict)
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
            if (outcome is PlacementResult.FAIL) == (want is AutoPlacement.VIOLATE):
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
        raise Where("ledgers").fail("expected an array of tables ([[ledgers]])")
    seen: dict[int, int] = {}
    out: list[LedgerSpec] = []
    for index, raw in enumerate(tables):
        where = Where("ledgers").at(index)
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


def ledger_specs(table: Mapping[str, Any], context: _LedgerContext, where: Where) -> list[LedgerSpec]:
    """Every ledger one ``[[ledgers]]`` table defines (one per id)."""
    _check_keys(table, _LEDGER_KEYS, where)
    if ("id" in table) == ("ids" in table):
        raise where.fail("give exactly one of id or ids")
    key = "id" if "id" in table else "ids"
    ids = _ids(table[key], where.at(key), context.budget, "ledgers")
    if not ids:
        raise where.fail("no ledger ids")
    shape = _LedgerShape.of(table, where)
    specs: list[LedgerSpec] = []
    for ledger_id in ids:
        spec = shape.build(ledger_id, table, context, where)
        if not specs:  # the table's ledgers are alike: charge them all before making the others
            parts = sum(len(s.ensemble) for s in spec.segments)
            parts += sum(len(h.missing) + len(h.add) for h in spec.holdings.values())
            context.budget.take("parts", parts * len(ids), where)
            context.budget.take("custom_bytes", sum(len(k) + len(v) for k, v in spec.custom) * len(ids), where)
        specs.append(spec)
    return specs


@dataclass(frozen=True)
class _LedgerShape:
    """The id-independent fields of a ledger table, checked once for a whole id range."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState
    last_entry: int
    truncated: int
    too_low: int
    placement: AutoPlacement
    corrupt: CorruptKind | None
    entry_size: int
    custom: tuple[tuple[str, str], ...]
    topic: str | None
    orphan: bool = False

    @classmethod
    def of(cls, table: Mapping[str, Any], where: Where) -> _LedgerShape:
        for key in ("ensemble_size", "write_quorum", "last_entry"):
            if key not in table:
                raise where.fail(f"required: {key} (here or in [defaults])")
        size = _int(table["ensemble_size"], where.at("ensemble_size"), 1, MAX_ENSEMBLE_SIZE)
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
        too_low = 0
        if "too_low" in table:
            too_low = _int(table["too_low"], where.at("too_low"), 1, MAX_ENTRY - 1 - max(last, 0))
            if state is not LedgerState.CLOSED:
                raise where.at("too_low").fail("only a closed ledger can be closed too low")
            if truncated:
                raise where.at("too_low").fail("give at most one of truncated and too_low")
        corrupt_value = table.get("corrupt_metadata", False)
        corrupt: CorruptKind | None = None
        if corrupt_value is True:
            corrupt = CorruptKind.GARBAGE
        elif corrupt_value is not False:
            corrupt = _enum(CorruptKind, corrupt_value, where.at("corrupt_metadata"))
        custom = _table(table.get("custom", {}), where.at("custom"))
        topic = table.get("pulsar_topic")
        orphan = _bool(table.get("orphan", False), where.at("orphan"))
        if orphan and corrupt is not None:
            raise where.at("orphan").fail("an orphan has no metadata: it cannot be corrupt_metadata too")
        if orphan and table.get("under_replicated", False) is not False:
            raise where.at("orphan").fail("an orphan has no metadata: it cannot be under_replicated too")
        return cls(
            ensemble_size=size,
            write_quorum=write,
            ack_quorum=ack,
            state=state,
            last_entry=last,
            truncated=truncated,
            too_low=too_low,
            placement=_enum(AutoPlacement, table.get("placement", "satisfy"), where.at("placement")),
            corrupt=corrupt,
            entry_size=_int(table.get("entry_size", DEFAULT_ENTRY_SIZE), where.at("entry_size"), 0, MAX_ENTRY_SIZE),
            custom=tuple((str(k), _str(v, where.at("custom").at(k))) for k, v in custom.items()),
            topic=None if topic is None else _str(topic, where.at("pulsar_topic")),
            orphan=orphan,
        )

    def build(self, ledger_id: int, table: Mapping[str, Any], context: _LedgerContext, where: Where) -> LedgerSpec:
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
            too_low=self.too_low,
            custom=tuple(custom),
            holdings=holdings,
            corrupt=self.corrupt,
            mark=mark,
            entry_size=self.entry_size,
            orphan_since_s=0.0 if self.orphan else None,
        )
        check_ledger(spec, context.bookie_ids, where)
        return spec

    def _segments(
        self, ledger_id: int, table: Mapping[str, Any], context: _LedgerContext, where: Where
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
        self, value: object, ledger_id: int, index: int, context: _LedgerContext, where: Where
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
    value: object, segments: Sequence[SegmentSpec], context: _LedgerContext, where: Where
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
    table: Mapping[str, Any], segments: Sequence[SegmentSpec], context: _LedgerContext, where: Where
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


def _mark(value: object, segments: Sequence[SegmentSpec], where: Where) -> MarkSpec | None:
    if value is False:
        return None
    table = {} if value is True else _table(value, where)
    _check_keys(table, _MARK_KEYS, where)
    replicas = _mark_replicas(table.get("replicas", []), segments, where.at("replicas"))
    age = _number(table.get("age_s", 0), where.at("age_s"))
    with_ctime = _bool(table.get("ctime", True), where.at("ctime"))
    lock = None
    if "locked_by" in table:
        lock = LockSpec(_mark_bookie(table["locked_by"], segments, where.at("locked_by")), 0.0)
    return MarkSpec(replicas, -age if with_ctime else None, 0.0, lock)


def _mark_replicas(value: object, segments: Sequence[SegmentSpec], where: Where) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise where.fail("expected a list of bookie ids or ensemble positions")
    return tuple(_mark_bookie(item, segments, where.at(index)) for index, item in enumerate(value))


def _mark_bookie(value: object, segments: Sequence[SegmentSpec], where: Where) -> str:
    """A bookie a mark names: an id, or a position in the last segment's ensemble."""
    if isinstance(value, int) and not isinstance(value, bool):
        ensemble = segments[-1].ensemble
        return ensemble[_int(value, where, 0, len(ensemble) - 1)]
    return _bookie_id(value, where)


# --------------------------------------------------------------------------- parsing: schedule

#: The fields each action takes, its target (required) first; the auto-recovery changes concern the whole cluster and
#: take none.
_EVENT_FIELDS: Final[dict[Action, tuple[str, ...]]] = {
    Action.CLOSE: ("ledger", "last_entry"),
    Action.APPEND: ("ledger", "last_entry"),
    Action.CHANGE_ENSEMBLE: ("ledger", "first", "ensemble", "copied"),
    Action.KILL: ("bookie",),
    Action.REVIVE: ("bookie",),
    Action.WIPE: ("bookie",),
    Action.LOSE: ("bookie",),
    Action.READONLY: ("bookie",),
    Action.WRITABLE: ("bookie",),
    Action.FAULT: ("bookie", "fault"),
    Action.LIMBO: ("bookie", "ledgers"),
    Action.MARK: ("ledger", "replicas", "age_s", "ctime", "locked_by"),
    Action.UNMARK: ("ledger",),
    Action.LOCK: ("ledger", "bookie"),
    Action.UNLOCK: ("ledger",),
    Action.DELETE: ("ledger",),
    Action.ORPHAN: ("ledger",),
    Action.CREATE: ("ledger",),
    Action.REPAIR: ("ledger", "bookie"),
    Action.DISABLE_AUTORECOVERY: (),
    Action.ENABLE_AUTORECOVERY: (),
    Action.STOP_AUDITOR: (),
    Action.START_AUDITOR: (),
}
_REQUIRED_FIELDS: Final[dict[Action, tuple[str, ...]]] = {
    Action.APPEND: ("last_entry",),
    Action.CHANGE_ENSEMBLE: ("first", "ensemble"),
    Action.FAULT: ("fault",),
    Action.LIMBO: ("ledgers",),
    Action.LOCK: ("bookie",),
}


def _parse_schedule(doc: Mapping[str, Any], context: _LedgerContext) -> list[Event]:
    tables = doc.get("schedule", [])
    if not isinstance(tables, list):
        raise Where("schedule").fail("expected an array of tables ([[schedule]])")
    events = [_parse_event(raw, index, context) for index, raw in enumerate(tables)]
    events.sort(key=lambda e: (e.at_s, e.index))
    return events


def _parse_event(raw: object, index: int, context: _LedgerContext) -> Event:
    where = Where("schedule").at(index)
    table = _table(raw, where)
    for key in ("at", "action"):
        if key not in table:
            raise where.fail(f"required: {key}")
    action = _enum(Action, table["action"], where.at("action"))
    _check_keys(table, ("at", "action", *_EVENT_FIELDS[action]), where)
    for key in (*_REQUIRED_FIELDS.get(action, ()), *_EVENT_FIELDS[action][:1]):
        if key not in table:
            raise where.fail(f"{action.value} needs {key}")
    event = Event(at_s=_number(table["at"], where.at("at")), action=action, index=index)
    fields: dict[str, Any] = {}
    if "bookie" in table:
        fields["bookie"] = _known_bookie(table["bookie"], context.bookie_ids, where.at("bookie"))
    if action is Action.CREATE:
        own = _table(table["ledger"], where.at("ledger"))
        specs = ledger_specs(_with_defaults(context.defaults, own), context, where.at("ledger"))
        if len(specs) != 1:
            raise where.at("ledger").fail("create defines exactly one ledger (id, not ids)")
        if specs[0].orphan:
            raise where.at("ledger").at("orphan").fail("create writes a ledger's metadata: it makes no orphan")
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
    if "locked_by" in table:
        fields["locked_by"] = _known_bookie(table["locked_by"], context.bookie_ids, where.at("locked_by"))
    if "fault" in table:
        fields["fault"] = parse_fault(table["fault"], where.at("fault"), budget=context.budget)
    if "ledgers" in table:
        fields["ledgers"] = frozenset(_ids(table["ledgers"], where.at("ledgers"), context.budget))
    return replace(event, **fields)


def _event_ensemble(value: object, context: _LedgerContext, where: Where) -> tuple[str, ...] | None:
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
    _check_keys(doc, _TOP_KEYS, Where(""))
    head = _table(doc.get("scenario", {}), Where("scenario"))
    _check_keys(head, ("name", "description", "seed"), Where("scenario"))
    seed = _int(head.get("seed", 0), Where("scenario").at("seed"), 0)
    cluster, ids, cluster_table = _parse_cluster(doc, seed)
    budget = _Budget()
    bookies = _parse_bookies(doc, ids, cluster_table, budget)
    checker = _parse_checker(doc)
    racks = {b.bookie_id: b.rack for b in bookies if b.rack is not None}
    defaults = _table(doc.get("defaults", {}), Where("defaults"))
    _check_keys(defaults, _DEFAULTABLE, Where("defaults"))
    context = _LedgerContext(ids, racks, checker, seed, defaults, budget=budget)
    specs = _parse_ledgers(doc, context)
    scenario = Scenario(
        name=_str(head.get("name", name), Where("scenario").at("name")),
        description=_str(head.get("description", ""), Where("scenario").at("description")),
        seed=seed,
        cluster=cluster,
        checker=checker,
        bookies=tuple(bookies),
        ledgers=tuple(spec for spec in specs if not spec.orphan),
        schedule=tuple(_parse_schedule(doc, context)),
        orphans=tuple(spec for spec in specs if spec.orphan),
    )
    validate_schedule(scenario)
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read and parse a scenario file; ScenarioError (naming the file) if it cannot be read or used."""
    file = Path(path)
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_SCENARIO_BYTES + 1)
        text = data.decode("utf-8")
    except OSError as error:
        raise ScenarioError(f"cannot read scenario {file}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ScenarioError(f"scenario {file} is not UTF-8 text (byte {error.start})") from None
    if len(data) > MAX_SCENARIO_BYTES:
        raise ScenarioError(f"scenario {file} is larger than {MAX_SCENARIO_BYTES:,} bytes, the most a scenario may be")
    try:
        return parse_scenario(text, name=file.stem)
    except ScenarioError as error:
        raise ScenarioError(f"{file}: {error}") from None


def validate_schedule(scenario: Scenario) -> None:
    """Replay the schedule on a copy of the state: ScenarioError at the first change that cannot apply."""
    state = ClusterState.from_scenario(scenario)
    for event in scenario.schedule:
        state.apply(event)
