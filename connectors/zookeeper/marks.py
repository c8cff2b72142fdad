"""The I/O of ``scrutiny scan --fix``: read the recovery state, write under-replication marks, record them.

The plan itself is pure (:mod:`scrutiny.core.repair_plan`). What this module guarantees:

* **Reads only, except marks.** :func:`read_recovery_state` only reads. :func:`apply_repairs` creates
  nothing but the plan's mark nodes and, through kazoo's ``makepath``, their missing parent
  directories, with the ACL the client is configured with (its ``default_acl``; kazoo's
  open ACL when none is set), as BookKeeper does. It never sets, deletes or re-writes a node.
* **Never touches a marked ledger.** A mark that exists when the plan is made is skipped; one
  that appears between the plan and the write makes the create fail with NodeExistsError,
  which is recorded as already marked (the node keeps its bytes and version).
* **Honours a disabled auto-recovery.** Unless the plan is forced, the ``disable`` node is
  checked again just before the first write; if it exists then, nothing is written.
* **One ledger's error is not another's.** A ZooKeeper error while marking one ledger is recorded
  as FAILED with its reason and the next ledger is tried.
* **Records what it did.** :func:`write_repair_log` appends one row per ledger to the Delta table
  ``repair_actions`` under the data directory (docs/fix.md).
* :func:`fix_under_replicated` runs the whole sequence; with ``dry_run`` it reads and plans only:
  no ZooKeeper write and no Delta write.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError

from scrutiny.connectors.tables.delta import TableError, read_table, table_uri
from scrutiny.connectors.tables.schemas import REPAIR_ACTIONS, REPAIR_ACTIONS_SCHEMA
from scrutiny.connectors.zookeeper.tree import mark_leaves
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.repair_plan import (
    REASON_MARKED_BEFORE,
    REASON_MARKED_CONCURRENTLY,
    PlanAction,
    PlannedRepair,
    RepairAction,
    RepairCandidate,
    RepairError,
    RepairOutcome,
    RepairPlan,
    plan_repairs,
)
from scrutiny.core.zk_paths import (
    underreplication_disable_path,
)

__all__ = [
    "REPAIR_ACTIONS",
    "REPAIR_ACTIONS_SCHEMA",
    "FixResult",
    "RepairAction",
    "RepairLogError",
    "RepairOutcome",
    "apply_repairs",
    "epoch_ms",
    "fix_under_replicated",
    "read_recovery_state",
    "read_repair_log",
    "repair_log_uri",
    "write_repair_log",
]

log = logging.getLogger(__name__)

_DESCRIPTION: Final = "Scrutiny: every under-replication mark a fix made or skipped (append-only)"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class RepairLogError(ScrutinyError):
    """The marks were applied but the ``repair_actions`` table could not record them; ``actions`` says what was done."""

    def __init__(self, actions: Sequence[RepairAction], cause: BaseException) -> None:
        self.actions = tuple(actions)
        super().__init__(f"{len(self.actions)} repair actions were taken but not recorded: {_describe(cause)}")


# --------------------------------------------------------------------------- ZooKeeper


def read_recovery_state(client: KazooClient, root: str) -> tuple[bool, set[int]]:
    """(auto-recovery disabled?, ids of the ledgers marked under-replicated) under ledgers root ``root``.

    Disabled means ``<root>/underreplication/disable`` exists. Marks are the canonical leaves
    ``<root>/underreplication/ledgers/<h>/<h>/<h>/<h>/urL%010d`` (any other node is ignored);
    a missing tree means no marks. Reads only; retried with the client's command retry.
    Raises PathError for an invalid root and kazoo's errors when ZooKeeper cannot be read.
    """
    disable_path = underreplication_disable_path(root=root)

    def read() -> tuple[bool, set[int]]:
        disabled = client.exists(disable_path) is not None
        return disabled, {ledger_id for ledger_id, _ in mark_leaves(client, root)}

    result: tuple[bool, set[int]] = client.retry(read)
    return result


def apply_repairs(client: KazooClient, plan: RepairPlan) -> list[RepairAction]:
    """Carry out ``plan``; what happened to each of its ledgers, in the plan's order.

    SKIP_ALREADY_MARKED becomes ALREADY_MARKED and SKIP_DISABLED becomes SKIPPED_DISABLED with
    no ZooKeeper access. For the MARK items, unless the plan is forced, the disable node is read
    once first: if it now exists they all become SKIPPED_DISABLED (and if it cannot be read, FAILED).
    Each mark is then created with its planned bytes (``makepath``, the client's ACL, the
    client's command retry): MARKED; NodeExistsError gives ALREADY_MARKED (unless the node holds
    exactly the planned bytes, i.e. this create landed before a lost connection was retried);
    any other ZooKeeper error gives FAILED with the error as reason, and the next ledger is tried.
    """
    blocked: str | None = None
    if plan.marks and not plan.force:
        try:
            if client.retry(client.exists, plan.disable_path) is not None:
                blocked = _disabled_reason(plan.disable_path, after_plan=True)
        except KazooException as error:
            failure = f"could not check {plan.disable_path}: {_describe(error)}"
            return [
                _planned_outcome(item, plan.disable_path) or _action(item, RepairOutcome.FAILED, failure)
                for item in plan.items
            ]
    actions: list[RepairAction] = []
    for item in plan.items:
        outcome = _planned_outcome(item, plan.disable_path)
        if outcome is None:
            outcome = _action(item, RepairOutcome.SKIPPED_DISABLED, blocked) if blocked else _create_mark(client, item)
        actions.append(outcome)
    return actions


def _action(item: PlannedRepair, outcome: RepairOutcome, reason: str | None = None) -> RepairAction:
    return RepairAction(item.ledger_id, outcome, item.missing_bookies, item.path, reason)


def _disabled_reason(disable_path: str, *, after_plan: bool = False) -> str:
    when = " (it appeared after the plan was made)" if after_plan else ""
    return f"auto-recovery is disabled: {disable_path} exists{when}"


def _planned_outcome(item: PlannedRepair, disable_path: str) -> RepairAction | None:
    """The outcome of an item the plan already decides without ZooKeeper; None for MARK."""
    if item.action is PlanAction.SKIP_ALREADY_MARKED:
        return _action(item, RepairOutcome.ALREADY_MARKED, REASON_MARKED_BEFORE)
    if item.action is PlanAction.SKIP_DISABLED:
        return _action(item, RepairOutcome.SKIPPED_DISABLED, _disabled_reason(disable_path))
    return None


def _create_mark(client: KazooClient, item: PlannedRepair) -> RepairAction:
    """Create one mark node; never overwrites an existing one."""
    if item.data is None:
        raise RepairError(f"ledger {item.ledger_id}: a MARK item has no node bytes")
    try:
        client.retry(client.create, item.path, item.data, makepath=True)
    except NodeExistsError:
        if _holds(client, item.path, item.data):
            return _action(item, RepairOutcome.MARKED)
        return _action(item, RepairOutcome.ALREADY_MARKED, REASON_MARKED_CONCURRENTLY)
    except KazooException as error:
        log.warning("could not mark ledger %d under-replicated at %s: %s", item.ledger_id, item.path, _describe(error))
        return _action(item, RepairOutcome.FAILED, _describe(error))
    return _action(item, RepairOutcome.MARKED)


def _holds(client: KazooClient, path: str, data: bytes) -> bool:
    """True if ``path`` holds exactly ``data`` now (False if it cannot be read)."""
    try:
        found, _ = client.retry(client.get, path)
    except KazooException:
        return False
    return bytes(found) == data


def _describe(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text and text != "((), {})" else type(error).__name__


# --------------------------------------------------------------------------- the repair_actions table


def repair_log_uri(data_dir: str | Path) -> str:
    """Where ``repair_actions`` lives under ``data_dir`` (a local path or an object-store URI)."""
    return table_uri(data_dir, REPAIR_ACTIONS)


def _check_time(at: datetime, what: str) -> None:
    if at.tzinfo is None or at.utcoffset() is None:
        raise RepairError(f"{what} must be a timezone-aware datetime, got {at!r}")


def epoch_ms(at: datetime) -> int:
    """``at`` (timezone-aware) as milliseconds since the epoch: a mark's ctime."""
    _check_time(at, "the fix time")
    return (at - _EPOCH) // timedelta(milliseconds=1)


def repair_log_rows(actions: Sequence[RepairAction], *, run_id: str, at: datetime) -> pa.Table:
    """The rows :func:`write_repair_log` appends, in ``REPAIR_ACTIONS_SCHEMA``."""
    if not run_id:
        raise RepairError("run_id must not be empty")
    _check_time(at, "at")
    columns: dict[str, list[Any]] = {
        "run_id": [run_id] * len(actions),
        "ledger_id": [a.ledger_id for a in actions],
        "action": [a.action.value for a in actions],
        "missing_bookies": [list(a.missing_bookies) for a in actions],
        "path": [a.path for a in actions],
        "reason": [a.reason for a in actions],
        "at": [at.astimezone(UTC)] * len(actions),
    }
    return pa.Table.from_pydict(columns, schema=REPAIR_ACTIONS_SCHEMA)


def _storage(storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(storage_options) if storage_options else None


def ensure_repair_log(data_dir: str | Path, *, storage_options: Mapping[str, str] | None = None) -> DeltaTable:
    """The ``repair_actions`` table, created empty (append-only) if missing; TableError if its schema differs."""
    uri = repair_log_uri(data_dir)
    storage = _storage(storage_options)
    if not DeltaTable.is_deltatable(uri, storage_options=storage):
        DeltaTable.create(
            uri,
            REPAIR_ACTIONS_SCHEMA,
            mode="ignore",
            name=REPAIR_ACTIONS,
            description=_DESCRIPTION,
            configuration={"delta.appendOnly": "true"},
            storage_options=storage,
        )
    table = DeltaTable(uri, storage_options=storage)
    actual = pa.schema(table.schema().to_arrow())
    if actual != REPAIR_ACTIONS_SCHEMA:
        raise TableError(REPAIR_ACTIONS, f"schema is {actual}, expected {REPAIR_ACTIONS_SCHEMA}")
    return table


def write_repair_log(
    data_dir: str | Path,
    actions: Sequence[RepairAction],
    *,
    run_id: str,
    at: datetime,
    storage_options: Mapping[str, str] | None = None,
) -> int:
    """Append one ``repair_actions`` row per action (all with ``run_id`` and time ``at``); the rows written.

    One Delta commit; no actions means no commit (and no table created). Creates the table
    if missing. Raises RepairError for an empty ``run_id`` or a naive ``at`` (nothing written),
    TableError if the existing table has another schema, and delta-rs's errors on I/O failure.
    """
    rows = repair_log_rows(actions, run_id=run_id, at=at)
    if not rows.num_rows:
        return 0
    table = ensure_repair_log(data_dir, storage_options=storage_options)
    write_deltalake(table, rows, mode="append")
    return int(rows.num_rows)


def read_repair_log(data_dir: str | Path, *, storage_options: Mapping[str, str] | None = None) -> pa.Table:
    """The current rows of ``repair_actions`` (live files only), in ``REPAIR_ACTIONS_SCHEMA``.

    Raises TableError if there is no such table.
    """
    return read_table(data_dir, REPAIR_ACTIONS, storage_options=storage_options)


# --------------------------------------------------------------------------- the whole fix


@dataclass(frozen=True, slots=True)
class FixResult:
    """The outcome of :func:`fix_under_replicated`: the plan, what was done (nothing on a dry run), rows logged."""

    plan: RepairPlan
    actions: tuple[RepairAction, ...]
    logged: int
    dry_run: bool


def fix_under_replicated(
    client: KazooClient,
    candidates: Iterable[RepairCandidate],
    *,
    root: str,
    data_dir: str | Path,
    run_id: str,
    now: datetime,
    force: bool = False,
    dry_run: bool = True,
    storage_options: Mapping[str, str] | None = None,
) -> FixResult:
    """Read the recovery state, plan, and unless ``dry_run`` apply the plan and record it.

    ``now`` (timezone-aware) is the fix time: every mark's ctime and the log's ``at``. A dry run
    reads ZooKeeper and returns the plan (print it with ``render_plan``): it writes neither
    ZooKeeper nor the Delta table. Otherwise the table is created/checked *before* the first
    mark is written (a table that cannot take the record stops the fix early), the plan is
    applied and the actions appended; if that append fails, RepairLogError carries the actions.
    """
    now_ms = epoch_ms(now)
    if not dry_run:
        if not run_id:
            raise RepairError("run_id must not be empty")
        ensure_repair_log(data_dir, storage_options=storage_options)
    disabled, marked = read_recovery_state(client, root)
    plan = plan_repairs(candidates, marked=marked, disabled=disabled, force=force, now_ms=now_ms, root=root)
    if dry_run:
        return FixResult(plan, (), 0, dry_run=True)
    actions = apply_repairs(client, plan)
    try:
        logged = write_repair_log(data_dir, actions, run_id=run_id, at=now, storage_options=storage_options)
    except Exception as error:
        raise RepairLogError(actions, error) from error
    return FixResult(plan, tuple(actions), logged, dry_run=False)
