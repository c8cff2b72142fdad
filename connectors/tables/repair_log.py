"""The ``repair_actions`` Delta table: one append-only row per ledger a fix marked, skipped or failed (docs/fix.md).

Written by ``scrutiny scan --fix`` after it applied its plan (one commit per fix; nothing for no action), read by
``scrutiny sql`` and the tests. Times must be timezone-aware; the table's schema is ``REPAIR_ACTIONS_SCHEMA``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from scrutiny.connectors.tables.delta import TableError, read_table, table_uri
from scrutiny.connectors.tables.schemas import REPAIR_ACTIONS, REPAIR_ACTIONS_SCHEMA
from scrutiny.core.repair_plan import RepairAction, RepairError

_DESCRIPTION: Final = "Scrutiny: every under-replication mark a fix made or skipped (append-only)"


def repair_log_uri(data_dir: str | Path) -> str:
    """Where ``repair_actions`` lives under ``data_dir`` (a local path or an object-store URI)."""
    return table_uri(data_dir, REPAIR_ACTIONS)


def _check_time(at: datetime, what: str) -> None:
    if at.tzinfo is None or at.utcoffset() is None:
        raise RepairError(f"{what} must be a timezone-aware datetime, got {at!r}")


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
