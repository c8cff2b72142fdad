"""Reading the checker's tables for the health summary: the one reader of each (delta-rs, live files only).

``scrutiny report``, the summary of ``scrutiny run`` and the dashboard read the open violations through
:func:`read_open_violations`, so they count the same rows. Errors are :class:`TableReadError` (one line naming the
table or the directory); a table that does not exist yet is :class:`TableMissingError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import DeltaError

from scrutiny.connectors.tables.delta import TableError, read_table, table_uri
from scrutiny.connectors.tables.schemas import CHECKER_RUNS, LEDGER_CHECKS, OPEN_VIOLATIONS, REJECTED_EVENTS
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.health_summary import RECENT_WINDOW_MS, CheckerFigures, OpenViolation

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
_OPEN_COLUMNS = [
    "ledger_id",
    "category",
    "severity",
    "bookie",
    "segment_first_entry",
    "entry_count",
    "pulsar_topic",
    "first_seen",
    "details",
    "resolved_at",
]
_RUN_COLUMNS = ["batch_id", "finished_at", "lag_records", "source"]


class TableReadError(ScrutinyError):
    """A table cannot be read: no data directory, or a table delta-rs cannot open."""


class TableMissingError(TableReadError):
    """The table does not exist (yet) under the data directory."""


def read_open_violations(data_dir: str) -> list[OpenViolation]:
    """The open rows (``resolved_at`` null) of ``open_violations`` under ``data_dir``."""
    table = read_columns(data_dir, OPEN_VIOLATIONS, _OPEN_COLUMNS)
    table = table.filter(pc.is_null(table["resolved_at"]))
    out: list[OpenViolation] = []
    for row in table.to_pylist():
        row["first_seen"] = _epoch_ms(row["first_seen"])
        out.append(OpenViolation.from_mapping(row))
    return out


def read_ledgers_checked(data_dir: str) -> int:
    """Distinct ledgers with a completed check in ``ledger_checks``."""
    ids = read_columns(data_dir, LEDGER_CHECKS, ["ledger_id"])["ledger_id"]
    return int(pc.count_distinct(ids).as_py()) if len(ids) else 0


def read_checker_figures(data_dir: str, *, now_ms: int, stall_after_ms: int) -> CheckerFigures:
    """The last batch of ``checker_runs`` (latest ``finished_at``), its lag, the batches of the last 10 min, and the
    records of the topic the checker skipped (``rejected_events``, absent until there is one)."""
    runs = read_columns(data_dir, CHECKER_RUNS, _RUN_COLUMNS).to_pylist()
    try:
        rejected_at = read_columns(data_dir, REJECTED_EVENTS, ["rejected_at"])["rejected_at"]
    except TableMissingError:
        rejected_at = pa.chunked_array([], pa.timestamp("us", tz="UTC"))
    last_rejected = pc.max(rejected_at).as_py() if len(rejected_at) else None
    skipped = CheckerFigures(
        stall_after_ms=stall_after_ms,
        rejected_events=len(rejected_at),
        last_rejected_ms=None if last_rejected is None else _epoch_ms(last_rejected),
    )
    if not runs:
        return skipped
    finished = [_epoch_ms(run["finished_at"]) for run in runs]
    last_index = max(range(len(runs)), key=lambda i: (finished[i], runs[i]["batch_id"]))
    last = runs[last_index]
    return replace(
        skipped,
        last_batch_ms=finished[last_index],
        last_batch_id=last["batch_id"],
        last_batch_source=last["source"],
        lag_records=last["lag_records"],
        batches_recent=sum(1 for at in finished if now_ms - at <= RECENT_WINDOW_MS),
    )


def read_columns(data_dir: str, name: str, columns: Sequence[str]) -> pa.Table:
    """Columns of table ``name`` (live files only); TableReadError naming the table or directory when it cannot."""
    if "://" not in data_dir and not Path(data_dir).is_dir():
        raise TableReadError(f"data directory {data_dir} does not exist (give --data-dir or set checker.data_dir)")
    uri = table_uri(data_dir, name)
    try:
        return read_table(data_dir, name, columns=list(columns))
    except TableError:
        raise TableMissingError(
            f"no Delta table {name!r} at {uri}: is {data_dir} the checker's data directory?"
        ) from None
    except (DeltaError, OSError, pa.ArrowException) as error:
        raise TableReadError(f"cannot read Delta table {name!r} at {uri}: {error}") from error


def _epoch_ms(moment: datetime) -> int:
    """Epoch milliseconds of a timezone-aware time (the tables' timestamps are UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _ONE_MS
