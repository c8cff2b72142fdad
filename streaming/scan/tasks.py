"""The executors' part of a one-shot scan: check a partition of the snapshot's ledgers (``mapInArrow``).

Each task decodes its ledgers, asks the bookies (deep scans: every ledger of the partition at once, batched per
bookie, as the streaming checker's fetch stage does), judges each ledger with :mod:`scrutiny.core.ledger_scan`, asks
the bookies that gave no answer again after the streaming checker's backoff, and yields the checker's output records
as narrow rows (:data:`~scrutiny.streaming.checker.records.NARROW_DDL`), plus one figures row (``ledger_id`` =
:data:`~scrutiny.streaming.checker.records.STATS_KEY`). Nothing here writes anything.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from scrutiny.connectors.bookies.fetch import FetchConfig, shared_fetcher
from scrutiny.core.compact_json import compact_json
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.ledger_metadata import closed_last_entry
from scrutiny.core.ledger_scan import (
    ScanItem,
    ScanMode,
    ScanStep,
    bookies_to_ask,
    retry_due,
    scan_deep,
    scan_fast,
    scan_retried,
)
from scrutiny.core.ledger_tracker import TrackedLedger, TrackerConfig, ViolationKey
from scrutiny.core.replication_locks import ReplicationLock
from scrutiny.core.verdict import BookieAnswer, ClusterView
from scrutiny.core.zk_records import UnderReplicationMark
from scrutiny.streaming.checker.records import Record, narrow, outcome_records, stats_records
from scrutiny.streaming.scan.progress import ProgressSender

log = logging.getLogger(__name__)

SOURCE = "scan"
#: The rows the driver hands to the tasks: one per ledger of the snapshot.
INPUT_SCHEMA = pa.schema(
    [
        pa.field("ledger_id", pa.int64(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
        pa.field("mark_replicas", pa.list_(pa.string())),
        pa.field("mark_ctime", pa.int64()),
        pa.field("open_keys", pa.string()),
        pa.field("written_ms", pa.int64()),
        pa.field("decode_error", pa.string()),
        pa.field("lock_bookie", pa.string()),
        pa.field("lock_since_ms", pa.int64()),
    ]
)
OUTPUT_SCHEMA = pa.schema(
    [
        pa.field("record", pa.string()),
        pa.field("ledger_id", pa.int64()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("payload", pa.string()),
    ]
)


@dataclass(frozen=True)
class ScanConfig:
    """What the tasks need (picklable): the mode, the rules, how to reach the bookies, the cluster as read."""

    mode: ScanMode
    tracker: TrackerConfig
    fetch: FetchConfig
    cluster: ClusterView
    registrations: Mapping[str, bytes | None]
    fetch_timeout_s: float = 10.0
    #: The bookies the streaming job declared lost (an open ``BOOKIE_LOST`` in the tables): ``OPEN_LEDGER_STALLED``.
    lost_bookies: frozenset[str] = frozenset()
    #: Where the tasks report ledgers as they finish (:mod:`~scrutiny.streaming.scan.progress`); None: nowhere.
    progress_to: tuple[str, int] | None = None


class ScanLedgers:
    """The ``mapInArrow`` function of a scan."""

    def __init__(self, config: ScanConfig) -> None:
        self.config = config

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The output records of every ledger in the partition, then the partition's figures."""
        started = time.monotonic()
        items = [item for batch in batches for item in input_items(batch)]
        progress = ProgressSender(self.config.progress_to)
        try:
            check = self._fast if self.config.mode is ScanMode.FAST else self._deep
            records, rpcs = check(items, progress)
        finally:
            progress.close()
        figures = {"events": len(items), "rpcs": rpcs, "fetch_ms": int((time.monotonic() - started) * 1000)}
        records += stats_records([json.dumps(figures).encode()], now_ms=_now_ms(), source=SOURCE)
        yield output_batch(records)

    def _fast(self, items: list[ScanItem], progress: ProgressSender) -> tuple[list[Record], int]:
        config = self.config
        records: list[Record] = []
        for item in items:
            now = _now_ms()
            step = scan_fast(
                item, now_ms=now, cluster=config.cluster, config=config.tracker, lost_bookies=config.lost_bookies
            )
            records += step_records(item.ledger_id, step, now)
            progress.finished()
        return records, 0

    def _deep(self, items: list[ScanItem], progress: ProgressSender) -> tuple[list[Record], int]:
        config = self.config
        by_id = {item.ledger_id: item for item in items}
        ends = {item.ledger_id: end for item in items if (end := closed_last_entry(item.data)) is not None}
        rpcs, answers = self._ask({item.ledger_id: bookies_to_ask(item.data) for item in items}, ends)
        records: list[Record] = []
        pending: dict[int, TrackedLedger] = {}
        for item in items:
            now = _now_ms()
            got = answers.get(item.ledger_id, {})
            step = scan_deep(
                item, got, now_ms=now, cluster=config.cluster, config=config.tracker, lost_bookies=config.lost_bookies
            )
            records += step_records(item.ledger_id, step, now)
            if step.state is not None and step.retry_at_ms is not None:
                pending[item.ledger_id] = step.state
            else:
                progress.finished()
        progress.flush()  # the first pass is done: only re-checks remain
        while pending:
            due_at = min(s.retry_at_ms or 0 for s in pending.values())
            time.sleep(max(0.0, (due_at - _now_ms()) / 1000))
            now = _now_ms()
            due = {ledger: state for ledger, state in pending.items() if (state.retry_at_ms or 0) <= now}
            wanted: dict[int, tuple[str, ...]] = {}
            for ledger, state in due.items():
                pending[ledger], wanted[ledger] = retry_due(state, now_ms=now)
            sent, answers = self._ask(wanted, ends)
            rpcs += sent
            for ledger in due:
                now = _now_ms()
                step = scan_retried(
                    by_id[ledger], pending[ledger], answers.get(ledger, {}), now_ms=now, cluster=config.cluster,
                    config=config.tracker,
                )  # fmt: skip
                records += step_records(ledger, step, now)
                if step.state is not None and step.retry_at_ms is not None:
                    pending[ledger] = step.state
                else:
                    del pending[ledger]
                    progress.finished()
        return records, rpcs

    def _ask(
        self, wanted: dict[int, tuple[str, ...]], ends: dict[int, int]
    ) -> tuple[int, dict[int, dict[str, BookieAnswer]]]:
        wanted = {ledger: bookies for ledger, bookies in wanted.items() if bookies}
        if not wanted:
            return 0, {}
        config = self.config
        try:
            fetcher = shared_fetcher(config.fetch)
            result = fetcher.fetch(wanted, config.registrations, timeout_s=config.fetch_timeout_s, ends=ends)
        except ScrutinyError as error:  # e.g. an unreadable CA file: every answer unknown, the retries decide
            log.warning("cannot fetch listings: %s", error)
            unknown = BookieAnswer.unknown(f"cannot fetch listings: {error}")
            return 0, {ledger: dict.fromkeys(bookies, unknown) for ledger, bookies in wanted.items()}
        return result.rpcs, result.answers


def input_items(batch: pa.RecordBatch) -> Iterator[ScanItem]:
    """The scan items of an :data:`INPUT_SCHEMA` batch."""
    columns = {name: batch.column(name).to_pylist() for name in INPUT_SCHEMA.names}
    for index, ledger_id in enumerate(columns["ledger_id"]):
        replicas = columns["mark_replicas"][index]
        mark = None if replicas is None else UnderReplicationMark(tuple(replicas), columns["mark_ctime"][index])
        keys_text = columns["open_keys"][index]
        lock_since = columns["lock_since_ms"][index]
        lock = None if lock_since is None else ReplicationLock(columns["lock_bookie"][index], lock_since)
        yield ScanItem(
            ledger_id=ledger_id,
            version=columns["version"][index],
            data=columns["data"][index],
            mark=mark,
            open_keys=decode_keys(keys_text),
            written_ms=columns["written_ms"][index],
            decode_error=columns["decode_error"][index] or "",
            lock=lock,
        )


def encode_keys(keys: list[ViolationKey]) -> str | None:
    """Open violation keys as the compact JSON of the input's ``open_keys`` column (None: none)."""
    return compact_json([list(k) for k in keys]) if keys else None


def decode_keys(text: str | None) -> tuple[ViolationKey, ...]:
    """The inverse of :func:`encode_keys`."""
    return tuple((k[0], k[1], k[2]) for k in json.loads(text)) if text else ()


def step_records(ledger_id: int, step: ScanStep, now_ms: int) -> list[Record]:
    """The output records of a step's outcomes, in order."""
    return [r for outcome in step.outcomes for r in outcome_records(ledger_id, outcome, now_ms=now_ms, source=SOURCE)]


def output_batch(records: list[Record]) -> pa.RecordBatch:
    """Records as one :data:`OUTPUT_SCHEMA` batch (narrow rows)."""
    rows = [narrow(record) for record in records]
    return pa.RecordBatch.from_arrays(
        [pa.array([row[i] for row in rows], OUTPUT_SCHEMA.field(i).type) for i in range(4)], schema=OUTPUT_SCHEMA
    )


def _now_ms() -> int:
    return int(time.time() * 1000)
