"""A micro-batch that Spark runs again after a crash does exactly what its first run did, so the tables stay exact.

Spark commits a batch (its state and its offsets) only after the sink returned, and the sink writes each table in a
commit of its own. A crash in between leaves some tables holding the batch; Spark then runs it again from the state
before it. Were the bookies asked again, they could answer otherwise (a bookie came back, a ledger was repaired), and
the second run's records and state would differ from what those tables already hold: an open violation nobody
tracks any more, a check without its violations. So the second run asks nobody:

* the sink keeps each batch's whole output (the processor's records and the state changes it made, see
  :func:`~scrutiny.streaming.checker.records.state_records`) in the checkpoint directory, ``scrutiny-outputs/<batch
  id>``, before it writes any table, and removes it once Spark has moved on to the next batch;
* when the job starts and Spark's offset log names a batch that its commit log does not, and that batch's output was
  kept, the job runs that batch from the kept output (:class:`ReplayHandle`, carried by the query's tasks): for
  every bucket it is called for in that batch, the processor sets the states the first run reached and returns the
  first run's records; the fetch stage fetches nothing.

The tables that already hold the batch skip it (Delta's idempotent writes), the others get the same records, and the
state is the one those records were made from. A batch interrupted before its output was kept wrote no table, and
simply runs again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark import TaskContext

from scrutiny.core.ledger_tracker import TrackedLedger
from scrutiny.streaming.checker.buckets import bucket_of
from scrutiny.streaming.checker.records import STATE_RECORD
from scrutiny.streaming.checkpoint_files import CheckpointFiles

#: The directory of the kept outputs in the checkpoint directory.
OUTPUTS_DIR = "scrutiny-outputs"
#: The task property in which Spark's micro-batch execution names the batch a task belongs to.
BATCH_ID_PROPERTY = "streaming.sql.batchId"

#: A row of the processor's output: record kind, ledger, time, payload (``NARROW_DDL``).
NarrowRow = tuple[str, int, datetime, str | None]


def current_batch() -> int | None:
    """The micro-batch the running task belongs to (None outside a streaming task)."""
    context = TaskContext.get()
    value = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
    return int(value) if value else None


class ReplayHandle:
    """The batch to run again and its kept output, as the executors hold it.

    Carried in every task of the query (Spark ships a stateful processor's broadcast variables to no task), so the
    output stays the compressed bytes that were kept, a copy to unpickle; it is decoded only by the tasks of the
    batch run again, once per process.
    """

    def __init__(self, batch_id: int, kept: bytes) -> None:
        self.batch_id = batch_id
        self.kept = kept
        self._rows: dict[int, tuple[NarrowRow, ...]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "kept": self.kept}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.batch_id, self.kept, self._rows = state["batch_id"], state["kept"], None

    def running(self) -> bool:
        """Whether the running task belongs to the batch to run again."""
        return current_batch() == self.batch_id

    def rows(self, bucket: int) -> tuple[NarrowRow, ...]:
        """The kept rows of a bucket, in their order (none when the first run had nothing to say of it)."""
        if self._rows is None:
            self._rows = rows_by_bucket(read_output(self.kept))
        return self._rows.get(bucket, ())


def rows_by_bucket(output: pa.Table) -> dict[int, tuple[NarrowRow, ...]]:
    """The rows of a kept output by bucket (the fetch stage's figures and rejected records are their own buckets)."""
    columns = [output.column(name).to_pylist() for name in ("record", "ledger_id", "at", "payload")]
    by_bucket: dict[int, list[NarrowRow]] = {}
    for row in zip(*columns, strict=True):
        by_bucket.setdefault(bucket_of(row[1]), []).append(row)
    return {bucket: tuple(rows) for bucket, rows in by_bucket.items()}


def write_output(output: pa.Table) -> bytes:
    """A batch's output as it is kept: Arrow's stream format, compressed."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, output.schema, options=options) as writer:
        writer.write_table(output)
    return bytes(sink.getvalue().to_pybytes())


def read_output(kept: bytes) -> pa.Table:
    """The inverse of :func:`write_output`."""
    return pa.ipc.open_stream(kept).read_all()


def replayed_states(before: Mapping[int, TrackedLedger], rows: tuple[NarrowRow, ...]) -> dict[int, TrackedLedger]:
    """A bucket's states after the first run: ``before`` with the kept state changes applied in order."""
    states = dict(before)
    for kind, ledger_id, _, payload in rows:
        if kind != STATE_RECORD:
            continue
        doc = json.loads(payload or "{}")
        # A bucket's changes in one record; a record of one ledger's (its "state", none: forgotten) before 2026-12-07.
        for changed, document in doc["states"] if "states" in doc else [(ledger_id, doc.get("state"))]:
            if document is None:
                states.pop(changed, None)
            else:
                states[changed] = TrackedLedger.from_doc(document)
    return states


class BatchOutputs:
    """The kept outputs in a checkpoint directory (the driver's side)."""

    def __init__(self, files: CheckpointFiles) -> None:
        self.files = files

    def keep(self, batch_id: int, output: pa.Table) -> None:
        """Keep a batch's output (before any table is written)."""
        self.files.write(f"{OUTPUTS_DIR}/{batch_id}", write_output(output))

    def forget_before(self, batch_id: int) -> None:
        """Remove the outputs of the batches before ``batch_id`` (Spark committed them before it began this one)."""
        for name in self._kept():
            if int(name) < batch_id:
                self.files.delete(f"{OUTPUTS_DIR}/{name}")

    def interrupted(self) -> ReplayHandle | None:
        """The batch Spark planned and did not commit, when its output was kept; None otherwise."""
        planned = [int(name) for name in self.files.names("offsets") if name.isdigit()]
        if not planned or str(max(planned)) in self.files.names("commits"):
            return None
        batch_id = max(planned)
        kept = self.files.read(f"{OUTPUTS_DIR}/{batch_id}")
        return None if kept is None else ReplayHandle(batch_id, kept)

    def _kept(self) -> Iterator[str]:
        return (name for name in self.files.names(OUTPUTS_DIR) if name.isdigit())
