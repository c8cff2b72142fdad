"""The kept outputs of batches: written atomically, found again for the batch Spark did not commit, forgotten after.

The same on a local path and behind a URI (Hadoop's file system, as ``hdfs://`` would be).
"""

from __future__ import annotations

import json
import pickle
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from scrutiny.core.ledger_tracker import TrackedLedger
from scrutiny.streaming.checker.buckets import BUCKET_SIZE
from scrutiny.streaming.checker.records import STATS_KEY, narrow, state_records, verified_records
from scrutiny.streaming.checker.replay import OUTPUTS_DIR, BatchOutputs, replayed_states
from scrutiny.streaming.checker.verified_counts import VerifiedCounts
from scrutiny.streaming.checkpoint_files import CheckpointFiles

pytestmark = pytest.mark.integration

AT = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
SCHEMA = pa.schema(
    [("record", pa.string()), ("ledger_id", pa.int64()), ("at", pa.timestamp("us", tz="UTC")), ("payload", pa.string())]
)


def ledger(version: int, *, retry_at_ms: int | None = None) -> TrackedLedger:
    return TrackedLedger(version=version, checked=True, retry_at_ms=retry_at_ms)


def output(records: list[dict[str, object]]) -> pa.Table:
    rows = [narrow(r) for r in records]
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, row, strict=True)) for row in rows], schema=SCHEMA)


@pytest.fixture(params=["path", "uri"])
def files(request: pytest.FixtureRequest, spark: SparkSession, tmp_path: Path) -> CheckpointFiles:
    where = str(tmp_path / "checkpoint")
    return CheckpointFiles(spark, where if request.param == "path" else f"file://{where}")


def test_files_are_written_whole_read_listed_and_deleted(files: CheckpointFiles, tmp_path: Path) -> None:
    assert files.read("d/x") is None and files.names("d") == []
    files.write("d/x", b"one")
    files.write("d/x", b"two")  # replaced
    files.write("d/y", b"")
    assert files.read("d/x") == b"two" and files.read("d/y") == b""
    assert files.names("d") == ["x", "y"]  # no temporary left behind
    assert files.create_once("d/x", b"three") == b"two"
    files.delete("d/x")
    files.delete("d/x")  # already gone
    assert files.names("d") == ["y"] and (tmp_path / "checkpoint" / "d" / "y").exists()


def test_the_output_of_the_batch_spark_did_not_commit_is_found_again(files: CheckpointFiles) -> None:
    outputs = BatchOutputs(files)
    first = output([{"record": "check", "ledger_id": 3, "at": AT, "verdict": "HEALTHY"}])
    second = output(
        [
            {"record": "check", "ledger_id": 3, "at": AT, "verdict": "VIOLATED"},
            {"record": "stats", "ledger_id": STATS_KEY, "at": AT, "details": "{}"},
            {"record": "state", "ledger_id": BUCKET_SIZE + 1, "at": AT},
        ]
    )
    assert outputs.interrupted() is None  # a new checkpoint
    files.write("offsets/4", b"v1")
    outputs.keep(4, first)
    files.write("commits/4", b"v1")
    assert outputs.interrupted() is None  # committed
    files.write("offsets/5", b"v1")
    assert outputs.interrupted() is None  # planned, but stopped before its output was kept: it wrote nothing
    outputs.keep(5, second)
    replay = outputs.interrupted()
    assert replay is not None and replay.batch_id == 5
    replay = pickle.loads(pickle.dumps(replay))  # as the tasks get it
    assert [row[0] for row in replay.rows(0)] == ["check"] and replay.rows(0)[0][2] == AT
    assert json.loads(replay.rows(0)[0][3] or "{}") == {"verdict": "VIOLATED"}
    assert [row[0] for row in replay.rows(STATS_KEY)] == ["stats"]  # by bucket, the fetch stage's rows their own
    assert [row[1] for row in replay.rows(1)] == [BUCKET_SIZE + 1] and replay.rows(2) == ()
    outputs.forget_before(5)
    assert files.names(OUTPUTS_DIR) == ["5"]


def test_a_bucket_replayed_from_its_state_records_reaches_the_states_of_the_first_run() -> None:
    before = {1: ledger(1), 2: ledger(2), 3: ledger(3, retry_at_ms=9)}
    middle = {1: ledger(1), 2: ledger(5, retry_at_ms=7), 4: ledger(1)}  # 2 changed, 3 forgotten, 4 new
    after = {1: ledger(2), 2: ledger(5, retry_at_ms=7), 4: ledger(1)}
    kept = [*state_records(before, middle, now_ms=1), *state_records(middle, after, now_ms=2)]
    assert [r["ledger_id"] for r in kept] == [2, 1]  # one record a call, under its first changed ledger
    assert [[lid for lid, _ in r["states"]] for r in kept] == [[2, 3, 4], [1]]  # type: ignore[attr-defined]
    assert state_records(after, after, now_ms=3) == []  # unchanged ledgers say nothing
    rows = tuple(narrow(r) for r in kept)
    assert replayed_states(before, rows) == after  # type: ignore[arg-type]
    assert replayed_states(before, ()) == before


def test_state_records_of_one_ledger_each_as_kept_before_2026_12_07_replay_too() -> None:
    before = {2: ledger(2), 3: ledger(3)}
    kept = [
        {"record": "state", "ledger_id": 2, "at": AT, "state": ledger(5, retry_at_ms=7).to_doc()},
        {"record": "state", "ledger_id": 3, "at": AT},  # forgotten
    ]
    rows = tuple(narrow(r) for r in kept)
    assert replayed_states(before, rows) == {2: ledger(5, retry_at_ms=7)}  # type: ignore[arg-type]


def test_the_verification_counts_continue_after_a_restart_and_a_batch_run_again_counts_once(
    files: CheckpointFiles,
) -> None:
    def counts() -> VerifiedCounts:
        return VerifiedCounts(files, interval_ms=256_000, grace_ms=10_000, table_every_s=60)

    verified = {i: TrackedLedger(version=1, checked=True, verified_ms=1_000 * i) for i in range(1, 4)}
    first_batch = verified_records({}, verified, now_ms=4_000)
    assert [r["moves"] for r in first_batch] == [[[None, 1_000], [None, 2_000], [None, 3_000]]]  # one a bucket
    kept = counts()
    kept.apply(0, first_batch)
    kept.keep()
    second_batch = [  # one record a ledger, as kept before 2026-12-07
        {"record": "verified", "ledger_id": 1, "was": 1_000, "now": 90_000},  # verified again
        {"record": "verified", "ledger_id": 3, "was": 3_000, "now": None},  # deleted
        {"record": "check", "ledger_id": 2},  # not a verification
    ]
    kept.apply(1, second_batch)
    kept.keep()  # then the job crashes before Spark commits batch 1
    restarted = counts()
    assert restarted.current.total() == 2
    restarted.apply(1, second_batch)  # Spark runs batch 1 again: counted from the counts before it, once
    assert restarted.current.counts == {2_000: 1, 90_000: 1}
    rows = restarted.table_rows(100_000, batch_id=1, run_id="r").to_pylist()  # type: ignore[union-attr]
    assert [(r["age_class"], r["ledgers"]) for r in rows if r["ledgers"]] == [("0-25%", 1), ("25-50%", 1)]
    assert restarted.table_rows(100_000, batch_id=2, run_id="r") is None  # not again within table_every_s
