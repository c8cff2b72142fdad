"""The Delta tables under one data directory, read without a JVM (delta-rs for the log, pyarrow for the files).

Scrutiny's own writers run on Spark (:mod:`scrutiny.streaming.delta_writer`, Delta Lake's writer); the commands that
only read — ``scrutiny sql``, ``report``, ``dashboard``, ``status`` — use this module so that they start in a
fraction of a second. :func:`live_dataset` lists the files of a table's latest version from its Delta log and reads
them with pyarrow; the tables are created without deletion vectors, so those files are exactly the table's rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from scrutiny.connectors.tables.schemas import READABLE_SCHEMAS
from scrutiny.core.errors import ScrutinyError

__all__ = ["TableError", "live_dataset", "read_table", "table_uri"]


class TableError(ScrutinyError):
    """A Delta table that cannot be used as asked: unknown name, missing, or a schema other than Scrutiny's."""

    def __init__(self, table: str, reason: str) -> None:
        self.table = table
        self.reason = reason
        super().__init__(f"Delta table {table!r}: {reason}")


def table_uri(data_dir: str | Path, name: str) -> str:
    """Where table ``name`` lives under ``data_dir`` (a local path or an object-store URI)."""
    if name not in READABLE_SCHEMAS:
        raise TableError(name, f"unknown table (known: {', '.join(READABLE_SCHEMAS)})")
    base = str(data_dir)
    if "://" in base:
        return f"{base.rstrip('/')}/{name}"
    return str(Path(base) / name)


def live_dataset(
    data_dir: str | Path, name: str, *, string_view: bool = False, storage_options: Mapping[str, str] | None = None
) -> ds.Dataset:
    """The live files of table ``name`` (as of its latest version) as a pyarrow dataset, for readers.

    Local tables are read with pyarrow's own file system: delta-rs's file-system handler makes the
    interpreter abort at exit now and then ("terminate called without an active exception", exit
    134), which would break the CLI's exit codes. ``string_view`` declares text columns as
    ``string_view``: the files delta-rs's MERGE writes store them so, and a filter pushed into the
    dataset (e.g. by DuckDB) on a ``string`` declaration fails in pyarrow ("no kernel matching
    input types (string, string_view)"); files stored as ``string`` are cast on read.
    """
    uri = table_uri(data_dir, name)
    table = _open(uri, name, storage_options)
    declared = READABLE_SCHEMAS[name]
    schema = pa.schema([_as_view(f) for f in declared]) if string_view else declared
    if "://" in uri:
        remote_dataset = table.to_pyarrow_dataset()
        files = [fragment.path for fragment in remote_dataset.get_fragments()]
        return ds.FileSystemDataset.from_paths(
            files, schema=schema, format=remote_dataset.format, filesystem=remote_dataset.filesystem
        )
    paths = [uri.removeprefix("file://") for uri in table.file_uris()]
    return ds.FileSystemDataset.from_paths(
        paths, schema=schema, format=ds.ParquetFileFormat(), filesystem=pafs.LocalFileSystem()
    )


def read_table(
    data_dir: str | Path,
    name: str,
    *,
    columns: list[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The current rows of table ``name`` (live files only, as of its latest version), in its declared schema."""
    return live_dataset(data_dir, name, storage_options=storage_options).to_table(columns=columns)


def _as_view(field: pa.Field) -> pa.Field:
    if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
        return field.with_type(pa.string_view())
    return field


def _open(uri: str, name: str, storage_options: Mapping[str, str] | None) -> DeltaTable:
    try:
        return DeltaTable(uri, storage_options=dict(storage_options) if storage_options else None)
    except TableNotFoundError as error:
        raise TableError(name, f"no Delta table at {uri}") from error
