"""The ``orphan_sightings`` table on Spark: when each ledger a bookie holds without metadata was first seen there.

``ORPHAN_LEDGER``'s grace runs from a ledger's first sighting (:mod:`scrutiny.core.orphans`), and ZooKeeper keeps
no time of a deletion, so the first sightings are kept between scans in this small Delta table: one row per
(bookie, ledger) held without metadata, dropped once the ledger is no longer held without metadata. A healthy
cluster's table holds the ledgers deleted within the last garbage collection period; a leak's holds the leak.

:func:`read_sightings` reads it whole (the candidates only, never a listing); :func:`merge_sightings` replaces one
bookie's sightings within one id range of its listing by one MERGE (one commit: a crash leaves the range as it was
or as it is now, never half of it), and is not called for a range whose sightings did not change, so a survey that
found nothing new writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as sql

from scrutiny.connectors.tables.delta import TableError
from scrutiny.connectors.tables.schemas import ORPHAN_SIGHTINGS, ORPHAN_SIGHTINGS_SCHEMA
from scrutiny.core.orphans import IdRange
from scrutiny.streaming.delta_writer import conflict_retrying, ensure_table, location, read_delta

#: Bookie id → {ledger id: first sighting, ms since the epoch}.
Sightings = dict[str, dict[int, int]]


def read_sightings(spark: SparkSession, data_dir: str | Path) -> Sightings:
    """Every sighting of the table (none when there is no table yet)."""
    try:
        frame = read_delta(spark, data_dir, ORPHAN_SIGHTINGS)
    except TableError:
        return {}
    out: Sightings = {}
    for row in frame.selectExpr("bookie", "ledger_id", "unix_millis(first_seen) AS first_seen_ms").collect():
        out.setdefault(row["bookie"], {})[row["ledger_id"]] = row["first_seen_ms"]
    return out


def merge_sightings(
    spark: SparkSession,
    data_dir: str | Path,
    bookie: str,
    ids: IdRange,
    sightings: Mapping[int, int],
    *,
    conflict_attempts: int,
) -> None:
    """Make the bookie's sightings within ``ids`` exactly ``sightings`` (ledger id → first sighting, ms): insert the
    new ones, delete those of the range not among them, leave the others (and other bookies') as they are."""
    ensure_table(spark, data_dir, ORPHAN_SIGHTINGS)
    ordered = sorted(sightings.items())
    rows = pa.Table.from_arrays(
        [
            pa.array([bookie] * len(ordered), pa.string()),
            pa.array([lid for lid, _ in ordered], pa.int64()),
            pa.array([ms for _, ms in ordered], pa.timestamp("ms", tz="UTC")).cast(
                ORPHAN_SIGHTINGS_SCHEMA.field("first_seen").type
            ),
        ],
        schema=ORPHAN_SIGHTINGS_SCHEMA,
    )

    def merge() -> None:
        source = spark.createDataFrame(rows).alias("s")
        target = DeltaTable.forPath(spark, location(data_dir, ORPHAN_SIGHTINGS)).alias("t")
        (
            target.merge(source, "t.bookie = s.bookie AND t.ledger_id = s.ledger_id")
            .whenNotMatchedInsertAll()
            .whenNotMatchedBySourceDelete(condition=_in_range(bookie, ids))
            .execute()
        )

    conflict_retrying(conflict_attempts)(merge)


def _in_range(bookie: str, ids: IdRange) -> Column:
    """The target rows of the bookie within the range (columns and literals: no text of the bookie id in SQL)."""
    condition = (sql.col("t.bookie") == sql.lit(bookie)) & (sql.col("t.ledger_id") > sql.lit(ids.after))
    if ids.last is not None:
        condition = condition & (sql.col("t.ledger_id") <= sql.lit(ids.last))
    return condition
