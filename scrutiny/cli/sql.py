"""``scrutiny sql``: SQL over the Delta tables and the shipped views (conf/sql/), with DuckDB, read-only.

Prints an aligned table (numbers right-aligned, NULL as an empty cell), or ``--format json`` (a list of objects)
or ``--format csv`` (with a header). Timestamps are ISO-8601 UTC (``2026-03-01T12:00:00Z``) in every format.
Errors (bad SQL, a missing data directory or table, a statement other than a query) exit 2 with one line.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Final

from scrutiny.cli.commands import COMMAND_HELP
from scrutiny.cli.common import MAX_INPUT_BYTES, InputError, add_config_argument
from scrutiny.connectors.tables.sql import QueryResult, SqlEngine
from scrutiny.core.terminal_text import terminal_safe
from scrutiny.settings.loader import load_settings

FORMATS: Final = ("table", "json", "csv")
_NUMERIC_TYPES: Final = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT", "DOUBLE", "DECIMAL"}
    | {"UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"}
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sql``."""
    sql = commands.add_parser(
        "sql",
        help=COMMAND_HELP["sql"],
        description=(
            "Runs one SELECT over the four Delta tables of the data directory and the views of conf/sql/ "
            "(see --list-views), in memory with DuckDB; nothing is written. See docs/sql.md."
        ),
    )
    sql.add_argument("query", nargs="?", help="one SELECT statement, or - to read it from standard input")
    sql.add_argument("--data-dir", help="the tables' directory (default: [checker] data_dir of the configuration)")
    sql.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    sql.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="a view parameter, e.g. hours=6"
    )
    sql.add_argument("--list-views", action="store_true", help="list the views, their parameters and status")
    add_config_argument(sql)
    sql.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.query is None and not args.list_views:
        raise InputError("give a query (or - to read it from standard input), or --list-views")
    query = None if args.list_views else _query_text(args.query)
    params = _params(args.param)
    data_dir = args.data_dir if args.data_dir is not None else load_settings(args.config).checker.data_dir
    with SqlEngine(data_dir, params=params) as engine:
        for note in engine.notes():
            print(f"scrutiny: note: {note}", file=sys.stderr)
        result = _views_result(engine) if query is None else engine.query(query)
    sys.stdout.write(render(result, args.format))
    return 0


def _params(specs: Sequence[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--param expects NAME=VALUE, not {spec!r}")
        params[name.strip()] = value
    return params


def _query_text(query: str) -> str:
    where = "on standard input" if query == "-" else "given"
    try:
        text = sys.stdin.read(MAX_INPUT_BYTES + 1) if query == "-" else query
        text.encode("utf-8")  # surrogates stand for bytes that were not UTF-8 (read in the C locale)
    except UnicodeError:
        raise InputError(f"the query {where} is not UTF-8 text") from None
    if len(text) > MAX_INPUT_BYTES:
        raise InputError(f"standard input holds more than {MAX_INPUT_BYTES:,} characters, more than any query")
    if not text.strip():
        raise InputError("the query is empty")
    return text


def _views_result(engine: SqlEngine) -> QueryResult:
    """One row per view: name, status, parameters with their current defaults, what it answers."""
    rows: list[tuple[object, ...]] = []
    for view in engine.view_specs:
        skipped = engine.skipped_views.get(view.name)
        status = f"skipped: no table {skipped}" if skipped else "ok"
        params = ", ".join(f"{p.name}={p.default}" for p in view.params)
        rows.append((view.name, status, params, view.summary))
    return QueryResult(("view", "status", "params", "answers"), ("VARCHAR",) * 4, rows)


def render(result: QueryResult, fmt: str) -> str:
    """``result`` as text in format ``fmt`` (table, json or csv), ending with a newline."""
    if fmt == "json":
        records = [dict(zip(result.columns, (_json_value(v) for v in row), strict=True)) for row in result.rows]
        return json.dumps(records, indent=2, ensure_ascii=False) + "\n"
    if fmt == "csv":
        return _csv(result)
    return _table(result)


def _table(result: QueryResult) -> str:
    cells = [[terminal_safe(_text(value)) for value in row] for row in result.rows]
    widths = [max([len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(result.columns)]
    numeric = [_is_numeric(t) for t in result.types]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(result.columns), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    return "\n".join(out) + "\n"


def _csv(result: QueryResult) -> str:
    sink = io.StringIO()
    writer = csv.writer(sink, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([_text(value) for value in row] for row in result.rows)
    return sink.getvalue()


def _is_numeric(sql_type: str) -> bool:
    return sql_type.upper().split("(")[0] in _NUMERIC_TYPES


def _text(value: object) -> str:
    """A cell of the table or CSV: NULL is empty, times ISO-8601 UTC, the rest as JSON would show it."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    converted = _json_value(value)
    return converted if isinstance(converted, str) else json.dumps(converted, ensure_ascii=False)


def _json_value(value: object) -> object:
    """A JSON-ready value: timestamps as ISO-8601 UTC text, decimals as numbers, nested values converted."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return str(value)


def iso_utc(moment: datetime) -> str:
    """``moment`` as ISO-8601 in UTC to the second with a ``Z`` (a naive time is taken as UTC already).

    The fraction of a second is dropped, as everywhere a person reads a time; ``epoch_ms(column)`` in the query
    gives the milliseconds.
    """
    if moment.utcoffset() is not None:
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None, microsecond=0).isoformat() + "Z"
