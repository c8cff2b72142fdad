"""What the tables hold of ``ORPHAN_LEDGER``, read without Spark (delta-rs, live files only, through
:mod:`~scrutiny.connectors.tables.health`'s readers): the first sightings (``orphan_sightings``) and the open findings
(``open_violations``). The streaming job's sweep reads them every few minutes and must not pay a Spark job each time;
the deep scan reads them once. :class:`~scrutiny.connectors.tables.health.TableReadError` when a table does not
read."""

from __future__ import annotations

import pyarrow as pa

from scrutiny.connectors.tables.health import TableMissingError, TableReadError, read_columns, read_open_violations
from scrutiny.connectors.tables.schemas import ORPHAN_SIGHTINGS
from scrutiny.core.vocabulary import Category

#: Bookie id → {ledger id: first sighting, ms since the epoch}.
Sightings = dict[str, dict[int, int]]
#: Bookie id → the ledgers with an ``ORPHAN_LEDGER`` open for it.
OpenOrphans = dict[str, set[int]]


def read_sightings(data_dir: str) -> Sightings:
    """Every row of ``orphan_sightings`` (none when there is no table yet)."""
    try:
        table = read_columns(data_dir, ORPHAN_SIGHTINGS, ["bookie", "ledger_id", "first_seen"])
    except TableMissingError:
        return {}
    if any(table[name].null_count for name in table.column_names):  # NOT NULL in the schema: not Scrutiny's table
        raise TableReadError(f"table {ORPHAN_SIGHTINGS!r} under {data_dir} has rows without a bookie, ledger or time")
    micros = table["first_seen"].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    out: Sightings = {}
    for bookie, ledger_id, at in zip(table["bookie"].to_pylist(), table["ledger_id"].to_pylist(), micros, strict=True):
        out.setdefault(str(bookie), {})[int(ledger_id)] = int(at) // 1000
    return out


def read_open_orphans(data_dir: str) -> OpenOrphans:
    """The ``ORPHAN_LEDGER`` findings open now, by bookie (none when there is no table yet)."""
    try:
        found = read_open_violations(data_dir)
    except TableMissingError:
        return {}
    out: OpenOrphans = {}
    for violation in found:
        if violation.category is Category.ORPHAN_LEDGER:
            out.setdefault(violation.bookie or "", set()).add(violation.ledger_id)
    return out
