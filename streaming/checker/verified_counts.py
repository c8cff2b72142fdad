"""The driver's count of ledgers by the age of their last verification, kept with the checkpoint.

The stateful step reports the changes of its ledgers' last verified checks in a "verified" record a bucket
(:func:`~scrutiny.streaming.checker.records.verified_records`); the sink moves the counts of
:class:`~scrutiny.core.verification_ages.VerifiedSlots` with them, publishes the age classes as metrics and, every
``checker.verification_ages_seconds``, as rows of the ``verification_ages`` table. The counts live in the checkpoint
directory (``scrutiny-verified``: the counts before and after the last batch, with its id), so a restart continues
them, and a batch Spark runs again (its records replayed) starts again from the counts before it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import cast

import pyarrow as pa

from scrutiny.connectors.tables.schemas import VERIFICATION_AGES_SCHEMA
from scrutiny.core.compact_json import compact_json
from scrutiny.core.verification_ages import AgeClass, VerifiedSlots, slot_width_ms
from scrutiny.streaming.checker.records import VERIFIED_RECORD
from scrutiny.streaming.checkpoint_files import CheckpointFiles

#: The file in the checkpoint directory.
COUNTS_FILE = "scrutiny-verified"


class VerifiedCounts:
    """The counts across batches (see the module docstring). ``files`` None: kept in memory only."""

    def __init__(self, files: CheckpointFiles | None, *, interval_ms: int, grace_ms: int, table_every_s: float) -> None:
        self.files = files
        self.interval_ms = interval_ms
        self.grace_ms = grace_ms
        self.table_every_s = table_every_s
        width = slot_width_ms(interval_ms)
        self._batch = -1
        self._before = VerifiedSlots(width)
        self.current = VerifiedSlots(width)
        self._table_at: float | None = None
        kept = files.read(COUNTS_FILE) if files is not None else None
        if kept is not None:
            doc = json.loads(kept)
            self._batch = int(doc["batch"])
            self._before = VerifiedSlots.from_doc(doc["before"], slot_ms=width)
            self.current = VerifiedSlots.from_doc(doc["after"], slot_ms=width)

    def apply(self, batch_id: int, records: Iterable[Mapping[str, object]]) -> None:
        """Move the counts with a batch's "verified" records (a batch run again starts from the counts before it)."""
        base = self._before if batch_id == self._batch else self.current
        after = base.copy()
        for record in records:
            if record["record"] == VERIFIED_RECORD:
                # A bucket's moves in one record; a record of one ledger's ("was", "now") before 2026-12-07.
                moves = cast("list[list[object]]", record.get("moves", [[record.get("was"), record.get("now")]]))
                for was, now in moves:
                    after.move(was if isinstance(was, int) else None, now if isinstance(now, int) else None)
        self._batch, self._before, self.current = batch_id, base, after

    def keep(self) -> None:
        """Write the counts to the checkpoint directory (after the batch's tables)."""
        if self.files is not None:
            doc = {"batch": self._batch, "before": self._before.to_doc(), "after": self.current.to_doc()}
            self.files.write(COUNTS_FILE, compact_json(doc).encode())

    def classes(self, now_ms: int) -> tuple[AgeClass, ...]:
        """The age classes now."""
        return self.current.classes(now_ms, interval_ms=self.interval_ms, grace_ms=self.grace_ms)

    def table_rows(self, now_ms: int, *, batch_id: int, run_id: str) -> pa.Table | None:
        """The ``verification_ages`` rows of this batch: the classes now, when the last rows are
        ``table_every_s`` old (or none were written by this run yet: then from the first ledger counted); None
        otherwise."""
        clock = time.monotonic()
        if self._table_at is None and not self.current.total():
            return None  # nothing counted yet: no table for a job that never verified a ledger
        if self._table_at is not None and clock - self._table_at < self.table_every_s:
            return None
        self._table_at = clock
        at = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
        oldest = self.current.oldest_ms()
        rows = [
            {
                "at": at,
                "age_class": c.name,
                "age_from_seconds": c.from_s,
                "age_to_seconds": c.to_s,
                "ledgers": c.ledgers,
                "overdue": c.overdue,
                "oldest_verification": None if oldest is None else datetime.fromtimestamp(oldest / 1000, tz=UTC),
                "batch_id": batch_id,
                "run_id": run_id,
            }
            for c in self.classes(now_ms)
        ]
        return pa.Table.from_pylist(rows, schema=VERIFICATION_AGES_SCHEMA)
