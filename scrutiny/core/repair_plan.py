"""What ``scrutiny scan --fix`` would do: which ledgers to mark under-replicated, and how.

Pure: no ZooKeeper, no clock (the fix time comes in as ``now_ms``). The I/O that reads the
recovery state, writes the marks and records them is in
:mod:`scrutiny.connectors.zookeeper.marks`.

* :func:`repair_candidates` picks the ledgers a fix may mark from the scan's violation rows:
  only ``MISSING_REPLICA`` rows that name a bookie qualify; every other category (bookies
  that did not answer, placement, ...) never leads to a mark.
* :func:`plan_repairs` decides per ledger: ``MARK`` (with the exact node bytes BookKeeper's
  replication workers read), ``SKIP_ALREADY_MARKED`` (a mark exists: never touched) or
  ``SKIP_DISABLED`` (auto-recovery is disabled and the fix is not forced).
* :func:`render_plan` and :func:`render_actions` are the human texts (docs/fix.md).
* :class:`RepairAction` is what happened to one ledger when the plan was applied.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from scrutiny.core.errors import ScrutinyError
from scrutiny.core.vocabulary import Category
from scrutiny.core.zk_paths import underreplication_disable_path, underreplication_path
from scrutiny.core.zk_records import UnderReplicationMark, format_underreplication_mark

__all__ = [
    "PlanAction",
    "PlannedRepair",
    "RepairAction",
    "RepairCandidate",
    "RepairError",
    "RepairOutcome",
    "RepairPlan",
    "plan_repairs",
    "render_actions",
    "render_plan",
    "repair_candidates",
]

_PLAIN_BOOKIE: Final = re.compile(r"[A-Za-z0-9:_.-]+")


class RepairError(ScrutinyError, ValueError):
    """Input a fix cannot work with (a candidate without bookies, a naive time, an empty run id, ...)."""


class PlanAction(StrEnum):
    """What the plan intends for one ledger."""

    MARK = "MARK"
    SKIP_ALREADY_MARKED = "SKIP_ALREADY_MARKED"
    SKIP_DISABLED = "SKIP_DISABLED"


class RepairOutcome(StrEnum):
    """What actually happened to one ledger (the ``action`` column of ``repair_actions``)."""

    MARKED = "MARKED"
    ALREADY_MARKED = "ALREADY_MARKED"
    SKIPPED_DISABLED = "SKIPPED_DISABLED"
    SKIPPED_STALE = "SKIPPED_STALE"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class RepairCandidate:
    """A ledger the scan found missing replicas of, and the bookies that lack them.

    ``missing_bookies`` is normalised to the sorted distinct bookie ids; it must not be empty. ``version``: the
    metadata version the scan checked (None: not known); a mark is written only while the ledger is at it.
    """

    ledger_id: int
    missing_bookies: tuple[str, ...]
    version: int | None = None

    def __post_init__(self) -> None:
        if not self.missing_bookies or not all(isinstance(b, str) and b for b in self.missing_bookies):
            raise RepairError(f"ledger {self.ledger_id}: a repair candidate needs at least one non-empty bookie id")
        underreplication_path(self.ledger_id)  # raises PathError for an id outside 0..2**63-1
        object.__setattr__(self, "missing_bookies", tuple(sorted(set(self.missing_bookies))))


@dataclass(frozen=True, slots=True)
class PlannedRepair:
    """One ledger's line of the plan: the action, the mark's ZooKeeper path and, for MARK, the node's bytes."""

    ledger_id: int
    action: PlanAction
    missing_bookies: tuple[str, ...]
    path: str
    data: bytes | None = None
    #: The metadata version the scan checked (None: not known): the mark is written only while it is current.
    version: int | None = None


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """The whole plan, one item per ledger in ascending ledger id, and the state it was made from.

    ``now_ms`` is the fix time (the ``ctime`` of every mark); ``disabled`` whether auto-recovery
    was disabled when the state was read; ``force`` whether the fix marks even then.
    """

    items: tuple[PlannedRepair, ...]
    root: str
    now_ms: int
    disabled: bool
    force: bool

    @property
    def marks(self) -> tuple[PlannedRepair, ...]:
        """The items that create a mark."""
        return tuple(item for item in self.items if item.action is PlanAction.MARK)

    def count(self, action: PlanAction) -> int:
        """How many ledgers get ``action``."""
        return sum(1 for item in self.items if item.action is action)

    @property
    def disable_path(self) -> str:
        """The node whose existence disables auto-recovery under this plan's root."""
        return underreplication_disable_path(root=self.root)


@dataclass(frozen=True, slots=True)
class RepairAction:
    """What happened to one ledger: one row of ``repair_actions`` (without the run id and time).

    ``reason`` says why a ledger was not marked (None for MARKED).
    """

    ledger_id: int
    action: RepairOutcome
    missing_bookies: tuple[str, ...]
    path: str
    reason: str | None = None


#: Reasons recorded with the outcomes that are decided without an error.
REASON_MARKED_BEFORE: Final = "a mark existed before the fix; left untouched"
REASON_MARKED_CONCURRENTLY: Final = "a mark appeared between the plan and the write; left untouched"


def repair_candidates(
    rows: Iterable[tuple[int, str, str | None]], versions: Mapping[int, int] | None = None
) -> list[RepairCandidate]:
    """The ledgers a fix may mark, from the scan's ``(ledger_id, category, bookie)`` violation rows.

    A row qualifies when its category is ``MISSING_REPLICA`` and it names a bookie (not None,
    not empty); each ledger's candidate lists the sorted distinct bookies of its qualifying
    rows, and the metadata version the scan checked when ``versions`` has it. Every other row
    is ignored. Returned in ascending ledger id.
    """
    missing: dict[int, set[str]] = {}
    for ledger_id, category, bookie in rows:
        if category == Category.MISSING_REPLICA and bookie:
            missing.setdefault(ledger_id, set()).add(bookie)
    known = versions or {}
    return [RepairCandidate(lid, tuple(bookies), known.get(lid)) for lid, bookies in sorted(missing.items())]


def plan_repairs(
    candidates: Iterable[RepairCandidate],
    *,
    marked: Collection[int],
    disabled: bool,
    force: bool,
    now_ms: int,
    root: str,
) -> RepairPlan:
    """Decide each candidate ledger's action.

    ``marked`` are the ledgers with a mark already (SKIP_ALREADY_MARKED, whatever else holds);
    the others get SKIP_DISABLED when ``disabled`` and not ``force``, MARK otherwise. A MARK
    carries the node bytes: the ledger's sorted distinct missing bookies as ``replica`` lines
    and ``ctime: now_ms``. Candidates of the same ledger are merged. Raises PathError for an
    invalid root and FormatError if ``now_ms`` does not fit int64.
    """
    merged: dict[int, set[str]] = {}
    versions: dict[int, int] = {}
    for candidate in candidates:
        merged.setdefault(candidate.ledger_id, set()).update(candidate.missing_bookies)
        if candidate.version is not None:
            versions[candidate.ledger_id] = max(candidate.version, versions.get(candidate.ledger_id, -1))
    already = frozenset(marked)
    blocked = disabled and not force
    items: list[PlannedRepair] = []
    for ledger_id in sorted(merged):
        bookies = tuple(sorted(merged[ledger_id]))
        path = underreplication_path(ledger_id, root=root)
        if ledger_id in already:
            items.append(PlannedRepair(ledger_id, PlanAction.SKIP_ALREADY_MARKED, bookies, path))
        elif blocked:
            items.append(PlannedRepair(ledger_id, PlanAction.SKIP_DISABLED, bookies, path))
        else:
            data = format_underreplication_mark(UnderReplicationMark(replicas=bookies, ctime_ms=now_ms))
            items.append(PlannedRepair(ledger_id, PlanAction.MARK, bookies, path, data, versions.get(ledger_id)))
    underreplication_disable_path(root=root)  # validates the root even for an empty plan
    return RepairPlan(tuple(items), root=root, now_ms=now_ms, disabled=disabled, force=force)


def _bookie_text(bookie_id: str) -> str:
    """A bookie id as printed: verbatim when it is a plain id, else JSON-quoted (so a line stays one line)."""
    return bookie_id if _PLAIN_BOOKIE.fullmatch(bookie_id) else json.dumps(bookie_id)


def _bookies_text(bookies: Sequence[str]) -> str:
    return ",".join(_bookie_text(b) for b in bookies) or "-"


def render_plan(plan: RepairPlan) -> str:
    """The dry-run text: one line per ledger in ascending id, then one totals line (docs/fix.md).

    ``<ACTION padded to 19> ledger=<id> missing=<b1,b2,...> path=<mark path>`` and
    ``plan: ledgers=N mark=N skip_already_marked=N skip_disabled=N auto_recovery=enabled|disabled
    force=yes|no``. No trailing newline.
    """
    lines = [
        f"{item.action.value:<19} ledger={item.ledger_id} missing={_bookies_text(item.missing_bookies)} "
        f"path={item.path}"
        for item in plan.items
    ]
    lines.append(
        f"plan: ledgers={len(plan.items)}"
        f" mark={plan.count(PlanAction.MARK)}"
        f" skip_already_marked={plan.count(PlanAction.SKIP_ALREADY_MARKED)}"
        f" skip_disabled={plan.count(PlanAction.SKIP_DISABLED)}"
        f" auto_recovery={'disabled' if plan.disabled else 'enabled'}"
        f" force={'yes' if plan.force else 'no'}"
    )
    return "\n".join(lines)


def render_actions(actions: Sequence[RepairAction]) -> str:
    """What a fix did: one line per ledger (in the given order), then one totals line (docs/fix.md).

    ``<OUTCOME padded to 16> ledger=<id> missing=<b1,...> path=<mark path>[ reason=<JSON string>]`` and
    ``fix: ledgers=N marked=N already_marked=N skipped_disabled=N failed=N skipped_stale=N``. No trailing newline.
    """
    lines = []
    for action in actions:
        line = (
            f"{action.action.value:<16} ledger={action.ledger_id} missing={_bookies_text(action.missing_bookies)} "
            f"path={action.path}"
        )
        if action.reason is not None:
            line += f" reason={json.dumps(action.reason)}"
        lines.append(line)
    counts = {outcome: sum(1 for a in actions if a.action is outcome) for outcome in RepairOutcome}
    lines.append(
        f"fix: ledgers={len(actions)}"
        f" marked={counts[RepairOutcome.MARKED]}"
        f" already_marked={counts[RepairOutcome.ALREADY_MARKED]}"
        f" skipped_disabled={counts[RepairOutcome.SKIPPED_DISABLED]}"
        f" failed={counts[RepairOutcome.FAILED]}"
        f" skipped_stale={counts[RepairOutcome.SKIPPED_STALE]}"
    )
    return "\n".join(lines)
