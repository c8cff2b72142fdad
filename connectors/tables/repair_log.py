"""The ``repair_actions`` Delta table: one append-only row per ledger a fix marked, skipped or failed (docs/fix.md).

Its rows are built here and appended by ``scrutiny scan --fix`` (:mod:`scrutiny.streaming.scan.fix`, with Delta's
Spark writer) after it applied its plan; read here without a JVM by ``scrutiny sql`` and the tests. Times must be
timezone-aware; the table's schema is ``REPAIR_ACTIONS_SCHEMA``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from scrutiny.connectors.tables.delta import read_table, table_uri
from scrutiny.connectors.tables.schemas import REPAIR_ACTIONS, REPAIR_ACTIONS_SCHEMA
from scrutiny.core.repair_plan import RepairAction, RepairError


def repair_log_uri(data_dir: str | Path) -> str:
    """Where ``repair_actions`` lives under ``data_dir`` (a local path or an object-store URI)."""
    return table_uri(data_dir, REPAIR_ACTIONS)


def _check_time(at: datetime, what: str) -> None:
    if at.tzinfo is None or at.utcoffset() is None:
        raise RepairError(f"{what} must be a timezone-aware datetime, got {at!r}")


def repair_log_rows(actions: Sequence[RepairAction], *, run_id: str, at: datetime) -> pa.Table:
    """One ``repair_actions`` row per action (all with ``run_id`` and time ``at``), in ``REPAIR_ACTIONS_SCHEMA``.

    Raises RepairError for an empty ``run_id`` or a naive ``at``.
    """
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


def read_repair_log(data_dir: str | Path, *, storage_options: Mapping[str, str] | None = None) -> pa.Table:
    """The current rows of ``repair_actions`` (live files only), in ``REPAIR_ACTIONS_SCHEMA``.

    Raises TableError if there is no such table.
    """
    return read_table(data_dir, REPAIR_ACTIONS, storage_options=storage_options)
