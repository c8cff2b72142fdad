"""``scrutiny scan --fix``: after a complete deep scan, mark the ledgers with missing replicas under-replicated.

The candidates are the scan's ``MISSING_REPLICA`` findings (:func:`scrutiny.core.repair_plan.repair_candidates`);
:func:`scrutiny.connectors.zookeeper.marks.fix_under_replicated` reads ZooKeeper's marks and ``disable`` node,
plans, and unless ``--dry-run`` creates the marks (never touching a ledger already marked) and appends what happened
to the ``repair_actions`` table. docs/fix.md documents the rules and the printed plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from scrutiny.connectors.zookeeper.client import close_zookeeper_client, start_zookeeper_client, zookeeper_target
from scrutiny.connectors.zookeeper.marks import FixResult, fix_under_replicated
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.ledger_scan import ScanMode
from scrutiny.core.repair_plan import render_actions, render_plan, repair_candidates
from scrutiny.settings.loader import Settings
from scrutiny.streaming.scan.job import ScanResult

CONNECT_TIMEOUT_S = 15.0


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


def run_fix(settings: Settings, result: ScanResult, fix: FixOptions, *, data_dir: str) -> FixResult:
    """Plan from the scan's findings and ZooKeeper's state; apply and record (in ``data_dir``) unless a dry run."""
    target = zookeeper_target(settings.zookeeper)
    rows = [(int(str(r["ledger_id"])), str(r["category"]), _bookie(r.get("bookie"))) for r in result.violations]
    client = start_zookeeper_client(settings.zookeeper, timeout_s=CONNECT_TIMEOUT_S)
    try:
        return fix_under_replicated(
            client,
            repair_candidates(rows),
            root=target.ledgers_root,
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
