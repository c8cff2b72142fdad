"""``scrutiny scan --fix``: after a complete deep scan, mark the ledgers with missing replicas under-replicated.

The candidates are the scan's ``MISSING_REPLICA`` findings (:func:`scrutiny.core.repair_plan.repair_candidates`);
:func:`fix_under_replicated` reads ZooKeeper's marks and ``disable`` node
(:mod:`scrutiny.connectors.zookeeper.marks`), plans, and unless ``--dry-run`` creates the marks (never touching a
ledger already marked) and appends what happened to the ``repair_actions`` table (rows from
:mod:`scrutiny.connectors.tables.repair_log`, written by Delta's Spark writer). docs/fix.md documents the rules and
the printed plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from kazoo.client import KazooClient
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.repair_log import repair_log_rows
from scrutiny.connectors.tables.schemas import REPAIR_ACTIONS
from scrutiny.connectors.zookeeper.client import close_zookeeper_client, start_zookeeper_client, zookeeper_target
from scrutiny.connectors.zookeeper.marks import apply_repairs, describe_error, read_recovery_state
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.ledger_scan import ScanMode
from scrutiny.core.repair_plan import (
    RepairAction,
    RepairCandidate,
    RepairError,
    RepairPlan,
    plan_repairs,
    render_actions,
    render_plan,
    repair_candidates,
)
from scrutiny.core.zk_paths import LedgerManager
from scrutiny.settings.loader import Settings
from scrutiny.streaming.delta_writer import append_rows, ensure_table
from scrutiny.streaming.scan.job import ScanResult

CONNECT_TIMEOUT_S = 15.0
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class FixError(ScrutinyError):
    """The fix cannot run: options that do not go together."""


@dataclass(frozen=True)
class FixOptions:
    """``--fix``, ``--dry-run``, ``--force``."""

    enabled: bool = False
    dry_run: bool = False
    force: bool = False


def check_fix_options(fix: FixOptions, mode: ScanMode) -> None:
    """Refuse option combinations that cannot mean what they say, before anything runs."""
    if (fix.dry_run or fix.force) and not fix.enabled:
        raise FixError("--dry-run and --force only go with --fix")
    if fix.enabled and mode is ScanMode.FAST:
        raise FixError("--fix needs a deep scan: a fast scan does not ask the bookies, so it finds no missing replica")


def run_fix(
    spark: SparkSession, settings: Settings, result: ScanResult, fix: FixOptions, *, data_dir: str
) -> FixResult:
    """Plan from the scan's findings and ZooKeeper's state; apply and record (in ``data_dir``) unless a dry run."""
    target = zookeeper_target(settings.zookeeper)
    rows = [(int(str(r["ledger_id"])), str(r["category"]), _bookie(r.get("bookie"))) for r in result.violations]
    versions = {
        int(str(r["ledger_id"])): int(str(r["metadata_version"]))
        for r in result.violations
        if r.get("metadata_version") is not None
    }
    client = start_zookeeper_client(settings.zookeeper, timeout_s=CONNECT_TIMEOUT_S)
    try:
        return fix_under_replicated(
            spark,
            client,
            repair_candidates(rows, versions),
            root=target.ledgers_root,
            manager=target.manager,
            data_dir=data_dir,
            run_id=result.scan_id,
            now=datetime.now(UTC),
            force=fix.force,
            dry_run=fix.dry_run,
        )
    finally:
        close_zookeeper_client(client)


def fix_lines(fixed: FixResult) -> list[str]:
    """For people: the plan (dry run) or what was done, one line per ledger and a totals line."""
    if fixed.dry_run:
        return ["Fix plan (dry run: nothing changed):", *render_plan(fixed.plan).splitlines()]
    lines = ["Fix (under-replication marks written; recorded in repair_actions):"]
    return lines + render_actions(fixed.actions).splitlines()


def fix_json(fixed: FixResult) -> dict[str, object]:
    """For ``--format json`` (key ``fix``)."""
    return {
        "dry_run": fixed.dry_run,
        "plan": [
            {
                "ledger_id": p.ledger_id,
                "action": p.action.value,
                "missing_bookies": list(p.missing_bookies),
                "path": p.path,
            }
            for p in fixed.plan.items
        ],
        "actions": [
            {"ledger_id": a.ledger_id, "action": a.action.value, "path": a.path, "reason": a.reason}
            for a in fixed.actions
        ],
        "recorded": fixed.logged,
    }


def _bookie(value: object) -> str | None:
    return None if value is None else str(value)


class RepairLogError(ScrutinyError):
    """The marks were applied but the ``repair_actions`` table could not record them; ``actions`` says what was done."""

    def __init__(self, actions: Sequence[RepairAction], cause: BaseException) -> None:
        self.actions = tuple(actions)
        super().__init__(f"{len(self.actions)} repair actions were taken but not recorded: {describe_error(cause)}")


@dataclass(frozen=True, slots=True)
class FixResult:
    """The outcome of :func:`fix_under_replicated`: the plan, what was done (nothing on a dry run), rows logged."""

    plan: RepairPlan
    actions: tuple[RepairAction, ...]
    logged: int
    dry_run: bool


def fix_under_replicated(
    spark: SparkSession,
    client: KazooClient,
    candidates: Iterable[RepairCandidate],
    *,
    root: str,
    data_dir: str | Path,
    run_id: str,
    now: datetime,
    force: bool = False,
    dry_run: bool = True,
    manager: LedgerManager = LedgerManager.HIERARCHICAL,
) -> FixResult:
    """Read the recovery state, plan, and unless ``dry_run`` apply the plan and record it.

    ``now`` (timezone-aware) is the fix time: every mark's ctime and the log's ``at``. A dry run
    reads ZooKeeper and returns the plan (print it with ``render_plan``): it writes neither
    ZooKeeper nor the Delta table. Otherwise the table is created/checked *before* the first
    mark is written (a table that cannot take the record stops the fix early), the plan is
    applied and the actions appended (one Delta commit; none for no action); if that append
    fails, RepairLogError carries the actions.
    """
    now_ms = epoch_ms(now)
    if not dry_run:
        if not run_id:
            raise RepairError("run_id must not be empty")
        ensure_table(spark, data_dir, REPAIR_ACTIONS)
    disabled, marked = read_recovery_state(client, root)
    plan = plan_repairs(candidates, marked=marked, disabled=disabled, force=force, now_ms=now_ms, root=root)
    if dry_run:
        return FixResult(plan, (), 0, dry_run=True)
    actions = apply_repairs(client, plan, manager=manager)
    try:
        rows = repair_log_rows(actions, run_id=run_id, at=now)
        if rows.num_rows:
            append_rows(spark, data_dir, REPAIR_ACTIONS, rows)
        logged = rows.num_rows
    except Exception as error:
        raise RepairLogError(actions, error) from error
    return FixResult(plan, tuple(actions), logged, dry_run=False)


def epoch_ms(at: datetime) -> int:
    """``at`` (timezone-aware) as milliseconds since the epoch: a mark's ctime."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise RepairError(f"the fix time must be a timezone-aware datetime, got {at!r}")
    return (at - _EPOCH) // timedelta(milliseconds=1)
