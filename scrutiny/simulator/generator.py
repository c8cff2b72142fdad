"""Random large scenarios (100k+ ledgers) with a chosen fault mix, seeded and reproducible.

:func:`generate` writes a scenario in the documented TOML format (``docs/simulator.md``) that
stays small however many ledgers it describes: healthy ledgers come as id ranges sharing a shape
(E/WQ/AQ and size) with ``"auto"`` ensembles that meet rack-aware placement, and each kind of
fault as one table per shape listing the ids it hits. The same arguments give the same text.

The fault mix (:class:`FaultMix`, parsed by :func:`parse_fault_mix` from ``name=value,...`` or a
preset name) gives, per kind of ledger fault, the fraction of ledgers that get it (each ledger gets
at most one), and per kind of bookie fault how many bookies get it. :class:`GeneratedPlan` says
which ledgers got which fault, so a test can check the ground truth against it.

==============  ==============================================================  =============================
ledger fault    what is generated                                              what a perfect checker reports
==============  ==============================================================  =============================
missing         ensemble position 0 lost a range of its stripe                 BELOW_* + 1 MISSING_REPLICA
nothing         position 0 holds nothing of the ledger                         BELOW_* + 1 MISSING_REPLICA
no_replica      the whole write set of entry 0 lost it                         NO_REPLICA + WQ MISSING_REPLICA
truncated       3 entries beyond lastEntryId on the last ensemble              ENTRIES_BEYOND (critical)
beyond          one bookie holds 2 stray entries beyond lastEntryId            ENTRIES_BEYOND (1 row)
too_low         closed 3 entries too low (``too_low = 3``): one bookie         ENTRIES_BEYOND (critical, 1 row:
                of the last ensemble kept its stripe of them, the last one     its header proves it)
placement       an ensemble that fails rack-aware placement                    PLACEMENT_FAIL
stuck           marked under-replicated twice the grace period ago             UNDER_REPLICATION_STUCK
marked          freshly marked (and position 0 missing a range)                nothing until the grace ends
corrupt         the znode does not decode                                      METADATA_UNREADABLE
aq1             written with AQ = 1                                            ACK_QUORUM_ONE
open            still open (one segment)                                       nothing
limbo           in limbo on ensemble position 0                                BOOKIE_UNRESPONSIVE
orphan          no metadata while its bookies hold its entries                 ORPHAN_LEDGER per bookie holding
                (``orphan = true``)                                            some, after ``orphan_grace_s``
==============  ==============================================================  =============================

``orphan`` is in no preset, and the ledger faults are drawn in the order above with ``orphan`` last: a mix without it
gives exactly the scenario it gave before the kind existed.

Bookie faults: ``unresponsive``, ``slow`` (answers after 0.2 s, within any sane deadline),
``too_slow`` (after twice the checker's request timeout), ``eio``, ``garbage``, ``stopped``,
``wiped``, ``readonly``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, cast

from scrutiny.core.placement import PlacementPolicy
from scrutiny.simulator.model import (
    MAX_ENTRY,
    AutoPlacement,
    CheckerSpec,
    ScenarioError,
    auto_ensemble,
)
from scrutiny.simulator.scenario import MAX_BOOKIES, MAX_LEDGERS

LEDGER_FAULTS: Final = (
    "missing",
    "nothing",
    "no_replica",
    "truncated",
    "beyond",
    "too_low",
    "placement",
    "stuck",
    "marked",
    "corrupt",
    "aq1",
    "open",
    "limbo",
    "orphan",
)
BOOKIE_FAULTS: Final = ("unresponsive", "slow", "too_slow", "eio", "garbage", "stopped", "wiped", "readonly")
_GRACE_S: Final = 3600
_TIMEOUT_S: Final = 5.0
_CORRUPT_KINDS: Final = ("garbage", "truncated", "bad_version")
#: (E, WQ, AQ) shapes and last entries of generated ledgers.
_QUORUMS: Final = ((3, 2, 2), (3, 3, 2), (5, 3, 2), (2, 2, 2), (4, 2, 2))
_SIZES: Final = (0, 9, 99, 999, 4999)
_BLOCK: Final = (20, 400)


@dataclass(frozen=True)
class FaultMix:
    """Fractions of ledgers per ledger fault, numbers of bookies per bookie fault (see the module doc)."""

    missing: float = 0.0
    nothing: float = 0.0
    no_replica: float = 0.0
    truncated: float = 0.0
    beyond: float = 0.0
    too_low: float = 0.0
    placement: float = 0.0
    stuck: float = 0.0
    marked: float = 0.0
    corrupt: float = 0.0
    aq1: float = 0.0
    open: float = 0.0
    limbo: float = 0.0
    orphan: float = 0.0
    unresponsive: int = 0
    slow: int = 0
    too_slow: int = 0
    eio: int = 0
    garbage: int = 0
    stopped: int = 0
    wiped: int = 0
    readonly: int = 0

    def describe(self) -> str:
        """``name=value`` for every non-zero field, comma-separated (``none`` when nothing)."""
        parts = [f"{f.name}={getattr(self, f.name):g}" for f in fields(self) if getattr(self, f.name)]
        return ",".join(parts) or "none"


#: Named mixes for ``--faults``.
PRESETS: Final[Mapping[str, FaultMix]] = {
    "none": FaultMix(),
    "ledgers": FaultMix(
        missing=0.004,
        nothing=0.002,
        no_replica=0.001,
        truncated=0.001,
        beyond=0.001,
        too_low=0.001,
        placement=0.005,
        stuck=0.001,
        marked=0.001,
        corrupt=0.0005,
        aq1=0.01,
        open=0.02,
        limbo=0.001,
    ),
    "realistic": FaultMix(
        missing=0.002,
        nothing=0.001,
        no_replica=0.0005,
        truncated=0.0005,
        beyond=0.0005,
        too_low=0.0005,
        placement=0.003,
        stuck=0.0005,
        marked=0.001,
        corrupt=0.0002,
        aq1=0.01,
        open=0.02,
        limbo=0.0005,
        slow=1,
        readonly=1,
        stopped=1,
    ),
}


def parse_fault_mix(text: str) -> FaultMix:
    """A preset name (``none``, ``ledgers``, ``realistic``) or ``name=value,...`` (optionally after a preset:
    ``realistic,eio=1``). ScenarioError on unknown names or values out of range."""
    mix = FaultMix()
    names = {f.name for f in fields(FaultMix)}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "=" not in part:
            if part not in PRESETS:
                raise ScenarioError(f"unknown fault mix preset {part!r} (presets: {', '.join(PRESETS)})")
            mix = PRESETS[part]
            continue
        name, _, value = (x.strip() for x in part.partition("="))
        if name not in names:
            raise ScenarioError(f"unknown fault {name!r} (known: {', '.join(sorted(names))})")
        try:
            number = float(value) if name in LEDGER_FAULTS else int(value)
        except ValueError:
            raise ScenarioError(f"fault {name}: {value!r} is not a number") from None
        if (
            (isinstance(number, float) and not math.isfinite(number))
            or number < 0
            or (name in LEDGER_FAULTS and number > 1)
        ):
            raise ScenarioError(f"fault {name}: {value} is out of range")
        mix = replace(mix, **cast(dict[str, Any], {name: number}))
    if sum(getattr(mix, name) for name in LEDGER_FAULTS) > 1:
        raise ScenarioError("the ledger fault fractions add up to more than 1")
    return mix


@dataclass
class GeneratedPlan:
    """Which ledgers got which ledger fault, and which bookies which bookie fault."""

    ledgers: dict[str, list[int]] = field(default_factory=dict)
    bookies: dict[str, list[str]] = field(default_factory=dict)
    shapes: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)

    def fault_of(self) -> dict[int, str]:
        """Ledger id -> its fault, for faulty ledgers."""
        return {lid: kind for kind, ids in self.ledgers.items() for lid in ids}


@dataclass(frozen=True)
class _Shape:
    size: int
    write: int
    ack: int
    last: int


def generate(
    ledgers: int,
    mix: FaultMix,
    seed: int,
    *,
    bookies: int = 9,
    racks: int = 3,
    name: str | None = None,
) -> tuple[str, GeneratedPlan]:
    """A scenario's TOML text and the plan of its faults (see the module doc). Deterministic."""
    if ledgers < 1 or bookies < 5 or not 2 <= racks <= bookies:
        raise ScenarioError("need at least 1 ledger, 5 bookies and 2..bookies racks")
    if ledgers > MAX_LEDGERS or bookies > MAX_BOOKIES:
        raise ScenarioError(
            f"a scenario has at most {MAX_LEDGERS:,} ledgers and {MAX_BOOKIES:,} bookies, not {ledgers:,} and"
            f" {bookies:,}"
        )
    if not 0 <= seed <= MAX_ENTRY:
        raise ScenarioError(f"the seed must be from 0 to {MAX_ENTRY}, not {seed}")
    rng = random.Random(f"generate:{seed}")
    ids = _bookie_ids(bookies)
    rack_of = {b: f"/rack-{i % racks + 1}" for i, b in enumerate(ids)}
    plan = GeneratedPlan()
    shapes = _assign_shapes(ledgers, rng)
    faulty = _assign_faults(ledgers, mix, rng)
    plan.ledgers = {kind: sorted(lids) for kind, lids in faulty.items()}
    plan.bookies = _assign_bookie_faults(ids, mix, rng)
    lines = _header(ledgers, mix, seed, bookies=bookies, name=name, racks=racks)
    limbo, limbo_lines = _limbo_tables(plan, shapes, ids, rack_of, rng)
    lines += _bookie_tables(plan, limbo)
    lines += _defaults()
    lines += _healthy_tables(shapes, plan.fault_of())
    lines += _fault_tables(plan, shapes)
    lines += limbo_lines
    plan.shapes = {lid: (s.size, s.write, s.ack, s.last) for lid, s in shapes.items()}
    return "\n".join(lines) + "\n", plan


def _bookie_ids(count: int) -> list[str]:
    return [f"bookie-{i}" for i in range(1, count + 1)]


def _assign_shapes(ledgers: int, rng: random.Random) -> dict[int, _Shape]:
    """Consecutive blocks of ledgers share a shape (so healthy ledgers are few id ranges)."""
    shapes: dict[int, _Shape] = {}
    lid = 1
    while lid <= ledgers:
        size, write, ack = rng.choice(_QUORUMS)
        shape = _Shape(size, write, ack, rng.choice(_SIZES))
        for _ in range(rng.randint(*_BLOCK)):
            if lid > ledgers:
                break
            shapes[lid] = shape
            lid += 1
    return shapes


def _assign_faults(ledgers: int, mix: FaultMix, rng: random.Random) -> dict[str, list[int]]:
    counts = {kind: round(getattr(mix, kind) * ledgers) for kind in LEDGER_FAULTS}
    chosen = rng.sample(range(1, ledgers + 1), min(ledgers, sum(counts.values())))
    out: dict[str, list[int]] = {}
    position = 0
    for kind in LEDGER_FAULTS:
        out[kind] = chosen[position : position + counts[kind]]
        position += counts[kind]
    return {kind: lids for kind, lids in out.items() if lids}


def _assign_bookie_faults(ids: Sequence[str], mix: FaultMix, rng: random.Random) -> dict[str, list[str]]:
    wanted = {kind: int(getattr(mix, kind)) for kind in BOOKIE_FAULTS}
    if sum(wanted.values()) > len(ids):
        raise ScenarioError(f"{sum(wanted.values())} bookie faults for {len(ids)} bookies")
    pool = list(ids)
    rng.shuffle(pool)
    out: dict[str, list[str]] = {}
    for kind in BOOKIE_FAULTS:
        out[kind], pool = sorted(pool[: wanted[kind]]), pool[wanted[kind] :]
    return {kind: bookies for kind, bookies in out.items() if bookies}


def _toml_list(values: Iterable[object]) -> str:
    return "[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in values) + "]"


def _id_ranges(ids: Sequence[int]) -> str:
    """Sorted ids as TOML: singles and [first, last] ranges."""
    parts: list[str] = []
    start = previous = None
    for lid in ids:
        if previous is not None and lid == previous + 1:
            previous = lid
            continue
        if start is not None and previous is not None:
            parts.append(str(start) if start == previous else f"[{start}, {previous}]")
        start = previous = lid
    if start is not None and previous is not None:
        parts.append(str(start) if start == previous else f"[{start}, {previous}]")
    return "[" + ", ".join(parts) + "]"


def _header(ledgers: int, mix: FaultMix, seed: int, *, bookies: int, name: str | None, racks: int) -> list[str]:
    title = name or f"generated-{ledgers}-seed-{seed}"
    return [
        "# Generated by scrutiny simulate --generate; regenerate rather than edit.",
        "[scenario]",
        f'name = "{title}"',
        f'description = "{ledgers} ledgers, {bookies} bookies, faults {mix.describe()}"',
        f"seed = {seed}",
        "",
        "[cluster]",
        f"bookies = {bookies}",
        f"racks = {_toml_list(f'/rack-{i}' for i in range(1, racks + 1))}",
        "",
        "[checker]",
        f"under_replication_grace_s = {_GRACE_S}",
        'placement = "rackaware"',
        f"request_timeout_s = {_TIMEOUT_S}",
        "",
    ]


def _bookie_tables(plan: GeneratedPlan, limbo: Mapping[str, list[int]]) -> list[str]:
    settings: dict[str, list[str]] = {}
    faults = {
        "unresponsive": 'fault = "unresponsive"',
        "slow": 'fault = { kind = "slow", delay_s = 0.2 }',
        "too_slow": f'fault = {{ kind = "slow", delay_s = {2 * _TIMEOUT_S} }}',
        "eio": 'fault = { kind = "status", status = "EIO" }',
        "garbage": 'fault = "garbage"',
        "stopped": 'mode = "stopped"',
        "readonly": 'mode = "readonly"',
        "wiped": "wiped = true",
    }
    for kind, bookies in plan.bookies.items():
        for bookie in bookies:
            settings.setdefault(bookie, []).append(faults[kind])
    for bookie, lids in limbo.items():
        settings.setdefault(bookie, []).append(f"limbo = {_id_ranges(sorted(lids))}")
    lines: list[str] = []
    for bookie in sorted(settings, key=lambda b: int(b.rsplit("-", 1)[1])):
        lines += [f"[bookies.{bookie}]", *settings[bookie], ""]
    return lines


def _defaults() -> list[str]:
    return [
        "[defaults]",
        'ensemble = "auto"',
        'pulsar_topic = "persistent://public/default/topic-{id}"',
        "",
    ]


def _shape_lines(shape: _Shape, *, ack: int | None = None) -> list[str]:
    return [
        f"ensemble_size = {shape.size}",
        f"write_quorum = {shape.write}",
        f"ack_quorum = {shape.ack if ack is None else ack}",
        f"last_entry = {shape.last}",
    ]


def _by_shape(lids: Iterable[int], shapes: Mapping[int, _Shape]) -> dict[_Shape, list[int]]:
    out: dict[_Shape, list[int]] = {}
    for lid in sorted(lids):
        out.setdefault(shapes[lid], []).append(lid)
    return out


def _healthy_tables(shapes: Mapping[int, _Shape], fault_of: Mapping[int, str]) -> list[str]:
    healthy = (lid for lid in shapes if lid not in fault_of)
    lines: list[str] = []
    for shape, lids in sorted(_by_shape(healthy, shapes).items(), key=lambda kv: kv[1][0]):
        lines += ["[[ledgers]]", f"ids = {_id_ranges(lids)}", *_shape_lines(shape), ""]
    return lines


def _fault_tables(plan: GeneratedPlan, shapes: Mapping[int, _Shape]) -> list[str]:
    lines: list[str] = []
    for kind, lids in plan.ledgers.items():
        if kind == "limbo":
            continue  # written with explicit ensembles by _limbo_tables
        for index, (shape, group) in enumerate(_by_shape(lids, shapes).items()):
            lines += [f"# fault: {kind}", "[[ledgers]]", f"ids = {_id_ranges(group)}"]
            lines += _shape_lines(shape, ack=1 if kind == "aq1" else None)
            lines += _fault_lines(kind, shape, index)
            lines.append("")
    return lines


def _fault_lines(kind: str, shape: _Shape, index: int) -> list[str]:
    last = shape.last
    lost = f"[[{last // 4}, {max(last // 2, last // 4)}]]"
    if kind == "missing":
        return [f"holdings = [{{ position = 0, missing = {lost} }}]"]
    if kind == "nothing":
        return ["holdings = [{ position = 0, nothing = true }]"]
    if kind == "no_replica":
        return ["holdings = [" + ", ".join(f"{{ position = {p}, missing = [0] }}" for p in range(shape.write)) + "]"]
    if kind == "truncated":
        return ["truncated = 3"]
    if kind == "beyond":
        return [f"holdings = [{{ position = {(last + 1) % shape.size}, add = [[{last + 1}, {last + 2}]] }}]"]
    if kind == "too_low":
        return ["too_low = 3"]
    if kind == "placement":
        return ['placement = "violate"']
    if kind == "stuck":
        return [f"under_replicated = {{ replicas = [0], age_s = {2 * _GRACE_S} }}"]
    if kind == "marked":
        return [
            "under_replicated = { replicas = [0], age_s = 0 }",
            f"holdings = [{{ position = 0, missing = {lost} }}]",
        ]
    if kind == "corrupt":
        return [f'corrupt_metadata = "{_CORRUPT_KINDS[index % len(_CORRUPT_KINDS)]}"']
    if kind == "open":
        return ['state = "OPEN"']
    if kind == "orphan":
        return ["orphan = true"]
    return []


def _limbo_tables(
    plan: GeneratedPlan,
    shapes: Mapping[int, _Shape],
    ids: Sequence[str],
    racks: Mapping[str, str],
    rng: random.Random,
) -> tuple[dict[str, list[int]], list[str]]:
    """The limbo ledgers' tables (explicit ensembles) and bookie -> ledgers in limbo on it (position 0)."""
    checker = CheckerSpec(placement=PlacementPolicy.RACKAWARE)
    on_bookie: dict[str, list[int]] = {}
    lines: list[str] = []
    for lid in plan.ledgers.get("limbo", []):
        shape = shapes[lid]
        ensemble = auto_ensemble(
            shape.size, shape.write, ids, racks=racks, checker=checker, want=AutoPlacement.SATISFY, rng=rng
        )
        if ensemble is None:
            raise ScenarioError(f"no rack-aware ensemble of {shape.size} bookies")
        on_bookie.setdefault(ensemble[0], []).append(lid)
        lines += ["# fault: limbo", "[[ledgers]]", f"id = {lid}", *_shape_lines(shape)]
        lines += [f"ensemble = {_toml_list(ensemble)}", ""]
    return on_bookie, lines
