"""The checker's output records (``OUTPUT_SCHEMA`` of :mod:`scrutiny.connectors.tables.schemas`) from a step.

Runs in the stateful processor: each :class:`~scrutiny.core.ledger_tracker.Outcome` becomes one
"violation" record per finding, one "resolved" record per resolved violation and one "check"
record per completed check, stamped with the ledger, the time and the metadata they concern.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

import pyarrow as pa

from scrutiny.core.compact_json import compact_json
from scrutiny.core.ledger_metadata import LedgerMetadata
from scrutiny.core.ledger_tracker import Outcome, TrackedLedger, ViolationKey
from scrutiny.core.verdict import Violation
from scrutiny.core.vocabulary import CLUSTER_LEDGER_ID

#: The rows the stateful step emits: kind, ledger, time, and the rest of the record as JSON. A narrow row costs
#: PySpark far less to convert per ledger than the 25 columns of the checker output; the sink widens it again.
NARROW_DDL = "record string, ledger_id long, at timestamp, payload string"
_NARROW_KEYS = ("record", "ledger_id", "at")

#: The ledger id of cluster-level findings (``BOOKIE_LOST``), and the key of the bookie events they come from.
CLUSTER_LEDGER = CLUSTER_LEDGER_ID
#: The key of the records the fetch stage rejected (their details as JSON in the ``event`` column).
REJECTED_KEY = -2
#: The key of the fetch stage's figures rows (no ledger has a negative id: the fetch stage rejects one).
STATS_KEY = -3

#: The record kind of a state change (kept with the batch, written to no table).
STATE_RECORD = "state"
#: The record kind of a change of a ledger's last verified check (:func:`verified_records`).
VERIFIED_RECORD = "verified"

Record = dict[str, object]


def outcome_records(ledger_id: int, outcome: Outcome, *, now_ms: int, source: str) -> list[Record]:
    """The records of one step, in the order they happened (findings, resolutions, the check)."""
    at = utc(now_ms)
    context = _context(outcome.metadata, outcome.version)
    base: Record = {"ledger_id": ledger_id, "at": at, "source": source, **context}
    out = [{**base, **_violation(v)} for v in outcome.found]
    out += [{**base, **_resolved(key)} for key in outcome.resolved]
    if outcome.check is not None:
        check = outcome.check
        out.append(
            {
                **base,
                "record": "check",
                "verdict": check.verdict.value,
                "ledger_state": check.state.value,
                "latency_ms": check.latency_ms,
                "bookies_asked": check.bookies_asked,
                "retries": check.retries,
                "violation_count": check.violation_count,
            }
        )
    return out


def retry_records(
    ledger_id: int, before: TrackedLedger | None, after: TrackedLedger | None, *, now_ms: int, source: str
) -> list[Record]:
    """A "retry" record when a step scheduled a new delayed re-check, a "forgotten" one when a step dropped a ledger
    (deleted) that had one pending: the driver counts the pending ones."""
    if after is None and before is not None and before.retry_at_ms is not None:
        return [{"record": "forgotten", "ledger_id": ledger_id, "at": utc(now_ms), "source": source}]
    if after is None or after.retry_at_ms is None or (before is not None and before.retry_at_ms == after.retry_at_ms):
        return []
    record = {"record": "retry", "ledger_id": ledger_id, "at": utc(now_ms), "metadata_version": after.version}
    return [{**record, "retries": after.attempts, "source": source}]


def state_records(
    before: Mapping[int, TrackedLedger], after: Mapping[int, TrackedLedger], *, now_ms: int
) -> list[Record]:
    """One "state" record for the ledgers of a bucket whose state a step changed (none if none did): ``states`` lists
    ``[ledger id, new state]`` in ledger order, the state None when forgotten; the record names the first of them, so
    that a batch run again finds it with its bucket. One record a bucket, not one a ledger: each output row costs
    PySpark a conversion.

    Not written to any table: the sink keeps them with the batch, so that a batch run again after a crash sets the
    states its first run reached (:mod:`scrutiny.streaming.checker.replay`).
    """
    states = [
        [ledger_id, None if state is None else state.to_doc()]
        for ledger_id in sorted(before.keys() | after.keys())
        if before.get(ledger_id) != (state := after.get(ledger_id))
    ]
    if not states:
        return []
    return [{"record": STATE_RECORD, "ledger_id": states[0][0], "at": utc(now_ms), "states": states}]


def verified_records(
    before: Mapping[int, TrackedLedger], after: Mapping[int, TrackedLedger], *, now_ms: int
) -> list[Record]:
    """One "verified" record for the ledgers of a bucket whose last verified check a step changed (verified again,
    verified for the first time, or forgotten), none if none did: ``moves`` lists ``[was, now]``, the times before
    and after (None: none), under the first such ledger's id. Written to no table: the sink keeps the count of
    ledgers by the age of their last verification (:mod:`scrutiny.streaming.checker.verification_ages`) from them."""
    first: int | None = None
    moves: list[list[int | None]] = []
    for ledger_id in sorted(before.keys() | after.keys()):
        old, new = before.get(ledger_id), after.get(ledger_id)
        was = old.verified_ms if old is not None else None
        now = new.verified_ms if new is not None else None
        if was != now:
            first = ledger_id if first is None else first
            moves.append([was, now])
    if first is None:
        return []
    return [{"record": VERIFIED_RECORD, "ledger_id": first, "at": utc(now_ms), "moves": moves}]


def stats_records(figures: list[bytes], *, now_ms: int, source: str) -> list[Record]:
    """One "stats" record per fetch-stage figures row (JSON); the sink sums them for ``checker_runs``."""
    at = utc(now_ms)
    return [
        {"record": "stats", "ledger_id": STATS_KEY, "at": at, "details": bytes(f).decode(), "source": source}
        for f in figures
    ]


def rejected_records(rejected: list[bytes], *, now_ms: int, source: str) -> list[Record]:
    """One "rejected" record per record the fetch stage could not use (its JSON: partition, offset, reason...)."""
    at = utc(now_ms)
    return [
        {"record": "rejected", "ledger_id": REJECTED_KEY, "at": at, "source": source, **json.loads(bytes(r))}
        for r in rejected
    ]


def utc(epoch_ms: int) -> datetime:
    """A UTC datetime from epoch milliseconds."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def narrow(record: Record) -> tuple[object, object, object, str]:
    """``record`` as a row of :data:`NARROW_DDL` (nulls left out of the payload)."""
    rest = {k: v for k, v in record.items() if k not in _NARROW_KEYS and v is not None}
    return record["record"], record["ledger_id"], record["at"], compact_json(rest)


def widen(kind: str, ledger_id: int, at: datetime, payload: str | None) -> Record:
    """The record of a :data:`NARROW_DDL` row."""
    return {"record": kind, "ledger_id": ledger_id, "at": at, **json.loads(payload or "{}")}


def widen_table(narrow_rows: pa.Table) -> list[Record]:
    """The records of a table of :data:`NARROW_DDL` rows (what ``toArrow`` gives of the step's output)."""
    columns = [narrow_rows.column(name).to_pylist() for name in ("record", "ledger_id", "at", "payload")]
    return [widen(*row) for row in zip(*columns, strict=True)]


def _violation(violation: Violation) -> Record:
    entries = violation.entries
    return {
        "record": "violation",
        "category": violation.category.value,
        "severity": violation.severity.value,
        "bookie": violation.bookie,
        "segment_first_entry": violation.segment_first_entry,
        "entries": compact_json(entries.as_json_dict()) if entries is not None else None,
        "entry_count": entries.count if entries is not None else None,
        "first_entry": entries.first if entries is not None else None,
        "last_entry": entries.last if entries is not None else None,
        "details": violation.details,
    }


def _resolved(key: ViolationKey) -> Record:
    category, bookie, segment = key
    return {
        "record": "resolved",
        "category": category,
        "bookie": bookie or None,
        "segment_first_entry": None if segment < 0 else segment,
    }


def _context(metadata: LedgerMetadata | None, version: int) -> Record:
    if metadata is None:
        return {"metadata_version": version if version >= 0 else None}
    segments = [{"first_entry": s.first_entry_id, "bookies": list(s.ensemble)} for s in metadata.segments]
    return {
        "metadata_version": version,
        "ensemble": compact_json(segments),
        "ensemble_size": metadata.ensemble_size,
        "write_quorum": metadata.write_quorum,
        "ack_quorum": metadata.ack_quorum,
        "ledger_state": metadata.state.value,
        "pulsar_topic": metadata.pulsar_topic,
    }
