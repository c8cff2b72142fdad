"""No ledger password reaches the checker's state or output, from the watcher's events or from its own reads.

The stateful processor runs here without Spark: its state and timers are held by small fakes, the events are built
by the watcher's own code from znode bytes that hold a password, and the re-verification's reads go through the
cluster reader's own code, with ZooKeeper's answers replaced by a dict.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Collection, Iterator
from typing import Any, NamedTuple

import pytest
from pyspark.sql import Row

from scrutiny.connectors.bookies.fetch import FetchConfig
from scrutiny.connectors.zookeeper.cluster_cache import CachedClusterReader, ClusterSnapshot
from scrutiny.connectors.zookeeper.settings import ZooKeeperSection
from scrutiny.core.errors import MetadataFormatError
from scrutiny.core.ledger_metadata import build_ledger_metadata, decode_ledger_metadata
from scrutiny.core.ledger_metadata import encode_ledger_metadata_v3 as encode
from scrutiny.core.ledger_tracker import TrackedLedger, TrackerConfig
from scrutiny.core.verdict import BookieAnswer, ClusterView
from scrutiny.streaming.checker import processor as processor_module
from scrutiny.streaming.checker.buckets import bucket_of, decode_bucket
from scrutiny.streaming.checker.config import JobConfig
from scrutiny.streaming.checker.processor import LedgerProcessor
from tests.support.processor_fakes import Handle, Timers, held_stripe, snapshot_row

pytestmark = pytest.mark.unit

BOOKIES = ("b1:3181", "b2:3181", "b3:3181")
#: Passwords no other byte of these tests holds: 16 bytes each, the first read from the events, the second by a
#: re-verification.
PASSWORD = b"\xa7event-password\x01"
REREAD_PASSWORD = b"\xfereread-passwd\x02"
LOST, HEALTHY, GARBLED = 128, 129, 130  # one bucket
MTIME_MS = 1_700_000_000_000


def blob(password: bytes) -> bytes:
    """A closed ledger, E=3 WQ=2, entries 0..9, stored with ``password``."""
    built = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[(0, BOOKIES)], last_entry_id=9, password=password
    )
    return encode(built)


#: LOST: b1 and b2 hold nothing, so the entries whose write set they are have no copy (NO_REPLICA, its metadata
#: kept in the state while the finding is open); HEALTHY: every entry where it belongs.
ANSWERS = {
    LOST: {BOOKIES[0]: BookieAnswer.no_ledger(), BOOKIES[1]: BookieAnswer.no_ledger(), BOOKIES[2]: held_stripe(2)},
    HEALTHY: {bookie: held_stripe(index) for index, bookie in enumerate(BOOKIES)},
}


class Stat(NamedTuple):
    version: int
    mtime: int


class Znodes(CachedClusterReader):
    """The cluster reader, ZooKeeper replaced by ``znodes`` (ledger -> bytes, version); the redaction is its own."""

    def __init__(self) -> None:
        super().__init__(ZooKeeperSection())
        self.znodes: dict[int, tuple[bytes, int]] = {}

    def get(self, *, refresh: bool = False) -> ClusterSnapshot:
        return ClusterSnapshot(ClusterView(writable=frozenset(BOOKIES)), {}, MTIME_MS)

    def ledger_versions(self, ledger_ids: Collection[int]) -> dict[int, int]:
        return {ledger: self.znodes[ledger][1] for ledger in ledger_ids if ledger in self.znodes}

    def ledgers_present(self, ledger_ids: Collection[int]) -> frozenset[int]:
        return frozenset(ledger for ledger in ledger_ids if ledger in self.znodes)

    def _read_ledgers(self, ledger_ids: Collection[int], request: Any, *, path_of: Any = None) -> dict[int, Any]:
        found = {ledger: self.znodes[ledger] for ledger in ledger_ids if ledger in self.znodes}
        return {ledger: (data, Stat(version, MTIME_MS)) for ledger, (data, version) in found.items()}


@pytest.fixture
def znodes(monkeypatch: pytest.MonkeyPatch) -> Znodes:
    reader = Znodes()
    monkeypatch.setattr(JobConfig, "cluster_reader", lambda self: reader)
    monkeypatch.setattr(
        processor_module,
        "fetch_answers",
        lambda config, wanted, **_: (0, {ledger: ANSWERS[ledger] for ledger in wanted}),
    )
    return reader


def event_row(ledger_id: int, offset: int, data: bytes) -> Row:
    """What the fetch stage hands the processor for the watcher's event of this znode (with its answers and the
    event's metadata decoded)."""
    return snapshot_row(ledger_id, offset, data, ANSWERS.get(ledger_id), mtime_ms=MTIME_MS)


def stored(handle: Handle) -> tuple[bytes, dict[int, TrackedLedger]]:
    assert handle.state.value is not None
    value = bytes(handle.state.value[0])
    return value, decode_bucket(value)


def payloads(rows: Iterator[Any]) -> list[dict[str, Any]]:
    return [{"record": row["record"], "ledger_id": row["ledger_id"], **json.loads(row["payload"])} for row in rows]


def texts(value: object) -> Iterator[bytes]:
    """Every string of a JSON document, and the bytes of those that are base64 (the state's metadata is)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from texts(item)
    elif isinstance(value, str):
        yield value.encode("utf-8", "surrogateescape")
        try:
            decoded: bytes | None = base64.b64decode(value, validate=True)
        except ValueError:
            decoded = None
        if decoded is not None:
            yield decoded


def assert_no_password(password: bytes, value: bytes, records: list[dict[str, Any]]) -> None:
    assert password not in value
    for text in texts(json.loads(value)):
        assert password not in text
    for record in records:
        for text in texts(record):
            assert password not in text


def same_but_password(kept: bytes | None, original: bytes) -> None:
    """``kept`` decodes as ``original`` does, but for an empty password (still stored)."""
    assert kept is not None
    metadata = decode_ledger_metadata(kept)
    assert metadata == dataclasses.replace(decode_ledger_metadata(original), password=b"") and metadata.password_set


def error_of(data: bytes) -> str:
    with pytest.raises(MetadataFormatError) as info:
        decode_ledger_metadata(data)
    return str(info.value)


def test_events_and_rereads_leave_no_password_in_the_state_or_the_records(znodes: Znodes) -> None:
    config = JobConfig(
        ZooKeeperSection(), "/ledgers", "/bookies", FetchConfig(), TrackerConfig(reverify_interval_ms=60_000)
    )
    processor = LedgerProcessor(config)
    handle = Handle()
    processor.init(handle)  # type: ignore[arg-type]
    garbage = b"\x00not metadata, with the password " + PASSWORD
    originals = {LOST: blob(PASSWORD), HEALTHY: blob(PASSWORD), GARBLED: garbage}
    znodes.znodes = {ledger: (data, 1) for ledger, data in originals.items()}
    rows = [event_row(ledger, offset, data) for offset, (ledger, data) in enumerate(originals.items())]
    records = payloads(processor.handleInputRows((bucket_of(LOST),), iter(rows), Timers(MTIME_MS)))  # type: ignore[arg-type]

    value, states = stored(handle)
    assert {(r["ledger_id"], r["category"]) for r in records if r["record"] == "violation"} >= {
        (LOST, "NO_REPLICA"),
        (GARBLED, "METADATA_UNREADABLE"),
    }
    same_but_password(states[LOST].metadata, originals[LOST])  # kept while NO_REPLICA is open, without the password
    unreadable = [r for r in records if r["record"] == "violation" and r["ledger_id"] == GARBLED]
    assert [r["details"] for r in unreadable] == [error_of(garbage)]  # the error of the znode's bytes, not of none
    assert_no_password(PASSWORD, value, records)

    # Both checked ledgers come due for their re-verification: their znodes are read afresh, another password in
    # LOST's, and HEALTHY's garbled.
    reread_garbage = b"BookieMetadataFormatVersion\t3\n\x7f" + REREAD_PASSWORD
    znodes.znodes[LOST] = (blob(REREAD_PASSWORD), 2)
    znodes.znodes[HEALTHY] = (reread_garbage, 2)
    due = max(s.reverify_at_ms or 0 for ledger, s in states.items() if ledger in (LOST, HEALTHY))
    assert due > 0
    expired = processor.handleExpiredTimer((bucket_of(LOST),), Timers(due), None)  # type: ignore[arg-type]
    records = payloads(expired)

    value, states = stored(handle)
    assert states[LOST].version == 2 and states[HEALTHY].version == 2
    same_but_password(states[LOST].metadata, blob(REREAD_PASSWORD))
    unreadable = [r for r in records if r["record"] == "violation" and r["ledger_id"] == HEALTHY]
    assert [r["details"] for r in unreadable] == [error_of(reread_garbage)]
    assert_no_password(REREAD_PASSWORD, value, records)
    assert_no_password(PASSWORD, value, records)
