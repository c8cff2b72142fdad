"""SQL over the four Delta tables with DuckDB, in memory, without a JVM (``scrutiny sql``; docs/sql.md).

:class:`SqlEngine` opens a DuckDB connection in memory and, when built:

1. registers each table of the data directory that exists under its name, as delta-rs's
   ``DeltaTable(uri).to_pyarrow_dataset()`` (live files only: never files a MERGE or a compaction removed), its
   strings re-declared as ``string_view`` (:func:`live_dataset` says why); ``repair_actions`` is a view over its
   dataset with one more column, ``fixed_at`` (= ``at``, which DuckDB reads only quoted: ``at`` is a keyword);
2. sets the parameters (``SET VARIABLE``): ``now`` (default: the current time) and those the views declare, with
   their defaults unless given;
3. creates every view of ``conf/sql/`` (file name = view name; each file holds one bare SELECT that the engine
   wraps in ``CREATE VIEW``); a view whose tables are missing is skipped with a note, never an error;
4. turns DuckDB's external access off and locks its configuration, so no statement can read or write a file.

Queries are then refused unless they are one SELECT (or EXPLAIN) statement: with both guards nothing can write
to the data directory. A view file declares its parameters in its header comment, one line each::

    -- @param hours DOUBLE 24  the window, in hours

and reads them with ``getvariable('hours')``. Errors are :class:`SqlError` subclasses, one line each.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import duckdb
from deltalake import DeltaTable

from scrutiny.connectors.tables.delta import live_dataset, table_uri
from scrutiny.connectors.tables.schemas import CREATED_ON_FIRST_ROW, ORPHAN_SIGHTINGS, REPAIR_ACTIONS, TABLE_NAMES
from scrutiny.core.errors import ScrutinyError
from scrutiny.paths import SQL_VIEWS_DIR

__all__ = [
    "NOW_PARAM",
    "VIEWS_DIR",
    "DataDirError",
    "MissingTableError",
    "ParamError",
    "ParamSpec",
    "QueryResult",
    "RefusedStatementError",
    "SqlEngine",
    "SqlError",
    "ViewSpec",
    "declared_params",
    "load_views",
]

#: The views shipped with Scrutiny.
VIEWS_DIR: Final = SQL_VIEWS_DIR
#: The parameter every view may read: the moment "now" of the time windows (TIMESTAMPTZ, default: current time).
NOW_PARAM: Final = "now"
#: The types a parameter may be declared with (they are written into SQL, so only these).
PARAM_TYPES: Final = frozenset({"BIGINT", "INTEGER", "DOUBLE", "VARCHAR", "BOOLEAN", "TIMESTAMPTZ"})
#: Statement types a query may have: nothing else reaches DuckDB.
#: ``repair_actions.at`` under a name DuckDB reads unquoted.
FIXED_AT: Final = "fixed_at"
_REPAIR_ACTIONS_DATA: Final = "repair_actions_rows"
_ALLOWED_STATEMENTS: Final = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})
_NAME: Final = re.compile(r"[a-z_][a-z0-9_]*")
_PARAM_LINE: Final = re.compile(r"--\s*@param\s+(\S+)\s+(\S+)\s+(\S+)\s*(.*)")


class SqlError(ScrutinyError):
    """A query or view that cannot run: DuckDB's message, on one line."""


class DataDirError(SqlError):
    """The data directory does not exist or holds none of Scrutiny's tables."""


class MissingTableError(SqlError):
    """A query needs a table (or a view built on one) that the data directory does not hold."""

    def __init__(self, data_dir: str, table: str, *, via: str | None = None) -> None:
        self.data_dir = data_dir
        self.table = table
        through = f" (needed by view {via!r})" if via else ""
        super().__init__(f"table {table!r}{through} does not exist in data directory {data_dir}")


class RefusedStatementError(SqlError):
    """A statement other than one SELECT / EXPLAIN: refused, since the engine is read-only."""


class ParamError(SqlError):
    """A ``--param`` that no view declares, or whose value does not convert to the declared type."""


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """A parameter a view reads with ``getvariable(name)``: its SQL type, default (as text) and meaning."""

    name: str
    sql_type: str
    default: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class ViewSpec:
    """One ``conf/sql/<name>.sql`` file: the view's name, its SELECT, header comment and parameters."""

    name: str
    select: str
    header: str
    params: tuple[ParamSpec, ...] = ()

    @property
    def summary(self) -> str:
        """The header's first line without the view's name: the question the view answers."""
        first = self.header.splitlines()[0] if self.header else ""
        return first.removeprefix(f"{self.name}:").strip()


@dataclass(frozen=True, slots=True)
class QueryResult:
    """A query's columns (names and DuckDB type names) and rows (Python values; timestamps are aware, UTC)."""

    columns: tuple[str, ...]
    types: tuple[str, ...]
    rows: list[tuple[object, ...]]


def load_views(directory: Path = VIEWS_DIR) -> tuple[ViewSpec, ...]:
    """Every ``*.sql`` file of ``directory`` as a view, sorted by name; raises SqlError on a malformed file."""
    if not directory.is_dir():
        raise SqlError(f"views directory {directory} does not exist")
    return tuple(_parse_view(path) for path in sorted(directory.glob("*.sql")))


def _parse_view(path: Path) -> ViewSpec:
    name = path.stem
    if not _NAME.fullmatch(name):
        raise SqlError(f"view file {path}: the name must be a lower-case SQL identifier")
    text = path.read_text(encoding="utf-8")
    header: list[str] = []
    params: list[ParamSpec] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("--"):
            break
        match = _PARAM_LINE.fullmatch(stripped)
        if match:
            params.append(_param_spec(path, *match.groups()))
        else:
            header.append(stripped.removeprefix("--").strip())
    select = text.strip().rstrip(";").strip()
    if ";" in _strip_comments(select):
        raise SqlError(f"view file {path}: one SELECT statement only (no ';' inside)")
    return ViewSpec(name, select, "\n".join(header).strip(), tuple(params))


def _param_spec(path: Path, name: str, sql_type: str, default: str, description: str) -> ParamSpec:
    if not _NAME.fullmatch(name) or name == NOW_PARAM:
        raise SqlError(f"view file {path}: bad parameter name {name!r}")
    if sql_type.upper() not in PARAM_TYPES:
        raise SqlError(f"view file {path}: parameter {name} has type {sql_type}, not one of {sorted(PARAM_TYPES)}")
    return ParamSpec(name, sql_type.upper(), default, description.strip())


def _strip_comments(sql: str) -> str:
    return "\n".join(line.split("--")[0] for line in sql.splitlines())


def declared_params(views: Iterable[ViewSpec]) -> dict[str, ParamSpec]:
    """The parameters of ``views`` by name (``now`` included); SqlError if two views declare one differently."""
    params = {NOW_PARAM: ParamSpec(NOW_PARAM, "TIMESTAMPTZ", "", "the current time of the time windows")}
    for view in views:
        for param in view.params:
            known = params.setdefault(param.name, param)
            if (known.sql_type, known.default) != (param.sql_type, param.default):
                raise SqlError(
                    f"parameter {param.name!r} is declared as {known.sql_type} {known.default} and, by view "
                    f"{view.name}, as {param.sql_type} {param.default}"
                )
    return params


@dataclass(slots=True)
class _Catalog:
    tables: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # view -> the first missing table it needs


class SqlEngine:
    """A read-only DuckDB connection over one data directory's tables and the shipped views.

    Built once per command; :meth:`query` may then run any number of SELECTs. ``params`` override the views'
    defaults (values as text, converted to the declared type); ``now`` fixes the ``now`` parameter (tests).
    Raises DataDirError when the directory holds no table, ParamError for a bad parameter.
    """

    def __init__(
        self,
        data_dir: str | Path,
        *,
        params: Mapping[str, str] | None = None,
        views_dir: Path = VIEWS_DIR,
        now: datetime | None = None,
    ) -> None:
        self.data_dir = str(data_dir)
        self.view_specs = load_views(views_dir)
        self.params = declared_params(self.view_specs)
        self._catalog = _Catalog()
        self._con = duckdb.connect(
            ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
        )
        try:
            self._con.execute("SET TimeZone = 'UTC'")
            self._register_tables()
            self._set_params(dict(params or {}), now or datetime.now(UTC))
            self._create_views()
            self._con.execute("SET enable_external_access = false")
            self._con.execute("SET lock_configuration = true")
        except BaseException:
            self._con.close()
            raise

    @property
    def tables(self) -> tuple[str, ...]:
        """The tables registered (those the data directory holds)."""
        return tuple(self._catalog.tables)

    @property
    def missing_tables(self) -> tuple[str, ...]:
        """The checker's tables that the data directory does not hold (``repair_actions`` and ``rejected_events`` may
        well be absent)."""
        return tuple(name for name in self._catalog.missing if name in TABLE_NAMES)

    @property
    def views(self) -> tuple[str, ...]:
        """The views created."""
        return tuple(self._catalog.views)

    @property
    def skipped_views(self) -> Mapping[str, str]:
        """Views not created, each with the missing table it needs."""
        return dict(self._catalog.skipped)

    def notes(self) -> list[str]:
        """One line per skipped view, for standard error."""
        return [
            f"view {view} skipped: table {table!r} does not exist in data directory {self.data_dir}"
            for view, table in self._catalog.skipped.items()
        ]

    def query(self, sql: str) -> QueryResult:
        """Run one SELECT (or EXPLAIN) and return all its rows; SqlError (one line) for anything else or a failure."""
        statement = self._one_statement(sql)
        self._check_needs(statement)
        try:
            relation = self._con.sql(statement)
            columns, types = tuple(relation.columns), tuple(str(t) for t in relation.types)
            return QueryResult(columns, types, relation.fetchall())
        except duckdb.Error as error:
            raise SqlError(_one_line(str(error))) from error

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._con.close()

    def __enter__(self) -> SqlEngine:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _register_tables(self) -> None:
        if "://" not in self.data_dir and not Path(self.data_dir).is_dir():
            raise DataDirError(f"data directory {self.data_dir} does not exist")
        for name in TABLE_NAMES:
            if not self._register(name):
                self._catalog.missing.append(name)
        if not self._catalog.tables:
            raise DataDirError(f"data directory {self.data_dir} holds none of the tables {', '.join(TABLE_NAMES)}")
        # Only after a `scan --fix`, a rejected record, a deep scan's first sighting of a ledger without metadata...
        for optional in (REPAIR_ACTIONS, *CREATED_ON_FIRST_ROW, ORPHAN_SIGHTINGS):
            if not self._register(optional):
                self._catalog.missing.append(optional)

    def _register(self, name: str) -> bool:
        """Register table ``name`` if the data directory holds it; whether it does."""
        if not DeltaTable.is_deltatable(table_uri(self.data_dir, name)):
            return False
        dataset = live_dataset(self.data_dir, name, string_view=True)
        if name == REPAIR_ACTIONS:
            self._con.register(_REPAIR_ACTIONS_DATA, dataset)
            self._con.execute(f'CREATE VIEW {name} AS SELECT *, "at" AS {FIXED_AT} FROM {_REPAIR_ACTIONS_DATA}')
        else:
            self._con.register(name, dataset)
        self._catalog.tables.append(name)
        return True

    def _set_params(self, given: dict[str, str], now: datetime) -> None:
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            raise ParamError(f"unknown parameter {unknown[0]!r} (known: {', '.join(sorted(self.params))})")
        values = {name: spec.default for name, spec in self.params.items()}
        values[NOW_PARAM] = now.astimezone(UTC).isoformat()
        values.update(given)
        for name, value in values.items():
            sql_type = self.params[name].sql_type
            try:
                self._con.execute(f"SET VARIABLE {name} = CAST(? AS {sql_type})", [value])
            except duckdb.Error as error:
                raise ParamError(f"parameter {name}={value!r} is not a {sql_type}: {_one_line(str(error))}") from error

    def _create_views(self) -> None:
        missing = set(self._catalog.missing)
        for view in self.view_specs:
            needed = sorted(self._con.get_table_names(view.select) & missing)
            if needed:
                self._catalog.skipped[view.name] = needed[0]
                continue
            try:
                self._con.execute(f"CREATE VIEW {view.name} AS {view.select}")
            except duckdb.Error as error:
                raise SqlError(f"view {view.name}: {_one_line(str(error))}") from error
            self._catalog.views.append(view.name)

    def _one_statement(self, sql: str) -> str:
        try:
            statements = self._con.extract_statements(sql)
        except duckdb.Error as error:
            raise SqlError(_one_line(str(error))) from error
        if len(statements) != 1:
            raise RefusedStatementError(f"expected one SQL statement, got {len(statements)}")
        statement = statements[0]
        if statement.type not in _ALLOWED_STATEMENTS:
            kind = statement.type.name
            raise RefusedStatementError(f"only SELECT queries may run (the tables are read-only), not {kind}")
        return str(statement.query)

    def _check_needs(self, sql: str) -> None:
        """Name the missing table when the query reads one, or a view skipped for lack of one."""
        try:
            names = self._con.get_table_names(sql)
        except duckdb.Error:
            return  # DuckDB reports the error itself when the query runs
        for name in sorted(names):
            if name in self._catalog.missing:
                raise MissingTableError(self.data_dir, name)
            if name in self._catalog.skipped:
                raise MissingTableError(self.data_dir, self._catalog.skipped[name], via=name)


def _one_line(text: str) -> str:
    return " ".join(text.split())
