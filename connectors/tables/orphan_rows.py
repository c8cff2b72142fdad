"""What the tables hold of ``ORPHAN_LEDGER``, read without Spark (delta-rs, live files only): the first sightings
(``orphan_sightings``) and the open findings (``open_violations``), for the streaming job's sweep, which reads them
every few minutes and must not pay a Spark job each time."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from scrutiny.connectors.tables.delta import TableError, read_table
from scrutiny.connectors.tables.schemas import OPEN_VIOLATIONS, ORPHAN_SIGHTINGS
from scrutiny.core.vocabulary import Category

#: Bookie id → {ledger id: first sighting, ms since the epoch}.
Sightings = dict[str, dict[int, int]]
#: Bookie id → the ledgers with an ``ORPHAN_LEDGER`` open for it.
OpenOrphans = dict[str, set[int]]


def read_sightings_rows(data_dir: str) -> Sightings:
    """Every row of ``orphan_sightings`` (none when there is no table yet)."""
    try:
        table = read_table(data_dir, ORPHAN_SIGHTINGS, columns=["bookie", "ledger_id", "first_seen"])
    except TableError:
        return {}
    micros = table["first_seen"].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    out: Sightings = {}
    for bookie, ledger_id, at in zip(table["bookie"].to_pylist(), table["ledger_id"].to_pylist(), micros, strict=True):
        out.setdefault(str(bookie), {})[int(ledger_id)] = int(at) // 1000
    return out


def read_open_orphans(data_dir: str) -> OpenOrphans:
    """The ``ORPHAN_LEDGER`` rows of ``open_violations`` still open, by bookie (none when there is no table yet)."""
    try:
        table = read_table(data_dir, OPEN_VIOLATIONS, columns=["ledger_id", "category", "bookie", "resolved_at"])
    except TableError:
        return {}
    mask = pc.and_(pc.is_null(table["resolved_at"]), pc.equal(table["category"], Category.ORPHAN_LEDGER.value))
    rows = table.filter(mask)
    out: OpenOrphans = {}
    for bookie, ledger_id in zip(rows["bookie"].to_pylist(), rows["ledger_id"].to_pylist(), strict=True):
        out.setdefault(bookie or "", set()).add(int(ledger_id))
    return out
