"""The ``orphan_sightings`` table on Spark: when each ledger a bookie holds without metadata was first seen there.

``ORPHAN_LEDGER``'s grace runs from a ledger's first sighting (:mod:`scrutiny.core.orphans`), and ZooKeeper keeps
no time of a deletion, so the first sightings are kept between scans in this small Delta table: one row per
(bookie, ledger) held without metadata, dropped once the ledger is no longer held without metadata. A healthy
cluster's table holds the ledgers deleted within the last garbage collection period; a leak's holds the leak.

It is read whole, without Spark (:func:`~scrutiny.connectors.tables.orphan_rows.read_sightings`: the candidates
only, never a listing). :func:`merge_sightings` replaces the sightings of the bookies whose sightings changed by one
MERGE (one commit: a crash leaves them as they were or as they are now, never half of it). It is not called when
nothing changed, so a survey that found nothing new writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as sql

from scrutiny.connectors.tables.schemas import ORPHAN_SIGHTINGS, ORPHAN_SIGHTINGS_SCHEMA
from scrutiny.streaming.delta_writer import conflict_retrying, ensure_table, location


def merge_sightings(
    spark: SparkSession,
    data_dir: str | Path,
    sightings: Mapping[str, Mapping[int, int]],
    *,
    conflict_attempts: int,
) -> None:
    """Make each given bookie's sightings exactly the given ones (bookie → {ledger id: first sighting, ms}) in one
    MERGE: insert the new ones, delete the bookie's others, leave those kept (and other bookies') as they are."""
    if not sightings:
        return
    ensure_table(spark, data_dir, ORPHAN_SIGHTINGS)
    ordered = [(bookie, lid, ms) for bookie in sorted(sightings) for lid, ms in sorted(sightings[bookie].items())]
    rows = pa.Table.from_arrays(
        [
            pa.array([bookie for bookie, _, _ in ordered], pa.string()),
            pa.array([lid for _, lid, _ in ordered], pa.int64()),
            pa.array([ms for _, _, ms in ordered], pa.timestamp("ms", tz="UTC")).cast(
                ORPHAN_SIGHTINGS_SCHEMA.field("first_seen").type
            ),
        ],
        schema=ORPHAN_SIGHTINGS_SCHEMA,
    )
    # Columns and literals: no text of a bookie id in SQL.
    theirs = sql.col("t.bookie").isin([sql.lit(bookie) for bookie in sorted(sightings)])

    def merge() -> None:
        source = spark.createDataFrame(rows).alias("s")
        target = DeltaTable.forPath(spark, location(data_dir, ORPHAN_SIGHTINGS)).alias("t")
        (
            target.merge(source, "t.bookie = s.bookie AND t.ledger_id = s.ledger_id")
            .whenNotMatchedInsertAll()
            .whenNotMatchedBySourceDelete(condition=theirs)
            .execute()
        )

    conflict_retrying(conflict_attempts)(merge)
