"""The stateful step's key as Spark computes it: runs of consecutive ledger ids, the figures rows apart."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.functions import expr

from scrutiny.streaming.checker.buckets import BUCKET_EXPRESSION, BUCKET_SIZE
from scrutiny.streaming.checker.records import REJECTED_KEY, STATS_KEY

pytestmark = pytest.mark.integration

LEDGERS = [STATS_KEY, REJECTED_KEY, 0, 1, BUCKET_SIZE - 1, BUCKET_SIZE, 5 * BUCKET_SIZE + 3, 2**31, 2**63 - 1]


def test_buckets_are_runs_of_consecutive_ids_and_the_figures_keep_their_key(spark: SparkSession) -> None:
    frame = spark.createDataFrame([(ledger,) for ledger in LEDGERS], "ledger_id long")
    got = {row.ledger_id: row.bucket for row in frame.withColumn("bucket", expr(BUCKET_EXPRESSION)).collect()}
    assert got == {ledger: ledger if ledger < 0 else ledger // BUCKET_SIZE for ledger in LEDGERS}
    assert got[0] == got[BUCKET_SIZE - 1] != got[BUCKET_SIZE]
