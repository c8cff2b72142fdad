"""Hostile inputs for every decoder and for the verdict, and what each costs: the cost-bound fuzz harness.

Each :class:`Target` turns bytes from outside (a znode, a bookie's frame, an agent's response, a Kafka record)
into what the checker uses, the way the checker does, and makes inputs for it from a random generator and a
scale: mostly well-formed and shaped to be expensive (huge ensembles, thousands of groups with periods that
stretch the verdict's modulus, deep JSON, long text), some mangled by a flipped or cut byte. Running one must end
in a result or the project's own error (:class:`ScrutinyError`), in time that grows with the bytes, never with
their square: ``tests/core/test_input_cost.py`` runs them briefly, ``bench/input_cost_bench.py`` at length.
"""

from __future__ import annotations

import json
import random
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from scrutiny.connectors.bookies import agent_client
from scrutiny.connectors.bookies.v3_protocol import classify_response
from scrutiny.connectors.kafka.events import LEDGER_KINDS, accept_event, ledger_key
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.ledger_metadata import (
    HEADER_MAGIC,
    MAX_ENSEMBLE_SIZE,
    LedgerMetadata,
    decode_ledger_metadata,
    encode_varint,
)
from scrutiny.core.listing_codec import decode_listing_compact
from scrutiny.core.metadata_redaction import redact_ledger_metadata
from scrutiny.core.verdict import BookieAnswer, compute_verdict
from scrutiny.core.zk_records import parse_pulsar_racks, parse_underreplication_mark
from scrutiny.proto import bookie_agent_pb2 as agent_pb2
from scrutiny.proto import bookkeeper_formats_pb2, bookkeeper_protocol_pb2, ledger_events_pb2

ROOT = "/ledgers"
#: Periods a hostile listing uses: BookKeeper's own (the ensemble size), small ones, and large ones that push the
#: verdict's common modulus as far as it goes.
_PERIODS = (3, 2, 4, 5, 7, 6, 12, 1024, 2048, 4096, 4095, 3072, 97)
_GROUP = struct.Struct(">qqii")


@dataclass(frozen=True)
class Target:
    """One decoder (or the verdict) under test: how to make an input of a given scale, and how to run it."""

    name: str
    make: Callable[[random.Random, int], bytes]
    run: Callable[[bytes], object]


@dataclass(frozen=True)
class Run:
    """One input run: its size, its time, and whether it ended in the project's own error."""

    size: int
    seconds: float
    refused: bool

    @property
    def ms_per_kib(self) -> float:
        """Milliseconds per KiB of input (inputs under 1 KiB count as 1 KiB)."""
        return self.seconds * 1000 / max(1.0, self.size / 1024)


def run_one(target: Target, data: bytes) -> Run:
    """Run ``target`` on ``data``: a result or a ScrutinyError; anything else propagates (a crash)."""
    started = time.perf_counter()
    try:
        target.run(data)
        refused = False
    except ScrutinyError:
        refused = True
    return Run(len(data), time.perf_counter() - started, refused)


# ------------------------------------------------------------------------------------------------ building blocks


def mangle(rng: random.Random, data: bytes) -> bytes:
    """``data`` as it is (most often), or with one byte flipped, one cut off the end or one inserted."""
    roll = rng.random()
    if roll < 0.7 or not data:
        return data
    at = rng.randrange(len(data))
    if roll < 0.8:
        return data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :]
    if roll < 0.9:
        return data[:at]
    return data[:at] + bytes([rng.randrange(256)]) + data[at:]


def bookies(count: int) -> list[str]:
    """``count`` distinct valid bookie ids."""
    return [f"bookie-{index}.example:3181" for index in range(count)]


def metadata_bytes(rng: random.Random, ensemble: int, segments: int, *, duplicate: bool = False) -> bytes:
    """v3 ledger metadata of a closed ledger, written field by field (no validation: any ensemble size)."""
    msg = bookkeeper_formats_pb2.LedgerMetadataFormat()
    write = rng.randint(1, min(ensemble, 5))
    msg.ensembleSize, msg.quorumSize, msg.ackQuorumSize = ensemble, write, rng.randint(1, write)
    msg.state = bookkeeper_formats_pb2.LedgerMetadataFormat.CLOSED
    last = rng.choice((ensemble * 40, 10**6, 10**12))
    msg.lastEntryId, msg.length = last, last * 100
    msg.password = b"secret"
    msg.digestType = bookkeeper_formats_pb2.LedgerMetadataFormat.CRC32C
    names = bookies(ensemble + segments)
    step = max(1, last // segments)
    for index in range(segments):
        segment = msg.segment.add()
        segment.firstEntryId = index * step
        members = names[index : index + ensemble]
        if duplicate and ensemble > 1:
            members[-1] = members[0]
        segment.ensembleMember.extend(members)
    body = msg.SerializeToString()
    return HEADER_MAGIC + b"3\n" + encode_varint(len(body)) + body


def hostile_listing(rng: random.Random, groups: int, last: int) -> bytes:
    """A valid listing (BP-34) of ``groups`` periodic groups in disjoint windows, with periods chosen to cost."""
    window = max(1, last // max(1, groups))
    fields: list[tuple[int, int, int, int]] = []
    for index in range(groups):
        start = index * window
        period = rng.choice(_PERIODS)
        size = rng.randint(1, period - 1)
        runs = max(1, (window - size) // period)
        if runs == 1 or start + (runs - 1) * period + size > start + window:
            fields.append((start, start, 1, 0))
        else:
            fields.append((start, start + (runs - 1) * period, size, period))
    header = struct.pack(">ii56x", 0, len(fields))
    return header + b"".join(_GROUP.pack(*f) for f in fields)


# ------------------------------------------------------------------------------------------------ the targets


def _make_metadata(rng: random.Random, scale: int) -> bytes:
    ensemble = rng.choice((3, 5, min(scale, MAX_ENSEMBLE_SIZE), scale * 4))
    segments = rng.randint(1, max(1, scale // max(1, ensemble)))
    return mangle(rng, metadata_bytes(rng, max(1, ensemble), segments, duplicate=rng.random() < 0.5))


def _make_listing(rng: random.Random, scale: int) -> bytes:
    return mangle(rng, hostile_listing(rng, scale, 10**9))


def _make_verdict(rng: random.Random, scale: int) -> bytes:
    """Metadata, then each ensemble bookie's listing, each prefixed by its length (int32)."""
    ensemble = rng.choice((3, 5, min(scale, MAX_ENSEMBLE_SIZE)))
    metadata = metadata_bytes(rng, ensemble, rng.randint(1, 4))
    parts = [metadata]
    for _ in range(ensemble):
        parts.append(hostile_listing(rng, rng.randint(1, max(1, scale // ensemble)), 10**6))
    return b"".join(struct.pack(">i", len(p)) + p for p in parts)


def _run_verdict(data: bytes) -> object:
    parts: list[bytes] = []
    at = 0
    while at < len(data):
        (length,) = struct.unpack_from(">i", data, at)
        parts.append(data[at + 4 : at + 4 + length])
        at += 4 + length
    metadata = decode_ledger_metadata(parts[0])
    members = [b for segment in metadata.segments for b in segment.ensemble]
    answers = {b: BookieAnswer.listing(decode_listing_compact(p)) for b, p in zip(members, parts[1:], strict=False)}
    return compute_verdict(metadata, answers, now_ms=0)


_SMALL_LEDGER: LedgerMetadata = decode_ledger_metadata(metadata_bytes(random.Random(0), 3, 1))


def _make_v3_frame(rng: random.Random, scale: int) -> bytes:
    response = bookkeeper_protocol_pb2.Response()
    response.header.version = bookkeeper_protocol_pb2.VERSION_THREE
    response.header.operation = bookkeeper_protocol_pb2.GET_LIST_OF_ENTRIES_OF_LEDGER
    response.header.txnId = 1
    response.status = bookkeeper_protocol_pb2.EOK
    inner = response.getListOfEntriesOfLedgerResponse
    inner.status = bookkeeper_protocol_pb2.EOK
    inner.ledgerId = 1
    inner.availabilityOfEntriesOfLedger = hostile_listing(rng, scale, 10**9)
    return mangle(rng, response.SerializeToString())


def _answer_verdict(answer: BookieAnswer) -> object:
    """The verdict of a small ledger whose first bookie gave ``answer`` (what the listing then costs)."""
    first = _SMALL_LEDGER.segments[0].ensemble[0]
    return compute_verdict(_SMALL_LEDGER, {first: answer}, now_ms=0)


def _run_v3_frame(data: bytes) -> object:
    response = bookkeeper_protocol_pb2.Response()
    try:
        response.ParseFromString(data)
    except Exception:
        return BookieAnswer.unknown("unparsable frame")
    return _answer_verdict(classify_response(1, response))


def _make_agent_response(rng: random.Random, scale: int) -> bytes:
    response = agent_pb2.ListingsResponse(bookie_id="bookie-0.example:3181")
    for ledger in range(rng.randint(1, 4)):
        listing = response.listings.add()
        listing.ledger_id = ledger
        listing.status = agent_pb2.LedgerListing.Status.POSITIVE
        listing.listing = hostile_listing(rng, max(1, scale // 4), 10**9)
        listing.as_of_ms = 1
    return mangle(rng, response.SerializeToString())


def _run_agent_response(data: bytes) -> object:
    response = agent_pb2.ListingsResponse()
    try:
        response.ParseFromString(data)
    except Exception:
        return None
    return [_answer_verdict(agent_client._answer_of(listing).answer) for listing in response.listings]


def _make_racks(rng: random.Random, scale: int) -> bytes:
    shape = rng.random()
    if shape < 0.3:
        depth = scale * 20
        return mangle(rng, b"[" * depth + b"]" * depth)
    if shape < 0.4:
        return mangle(rng, b'{"a":' * scale + b"1" + b"}" * scale)
    groups = {
        f"group-{g}": {b: {"rack": f"/rack-{i % 7}", "hostname": b.split(":")[0]} for i, b in enumerate(bookies(scale))}
        for g in range(rng.randint(1, 3))
    }
    return mangle(rng, json.dumps(groups).encode())


def _make_mark(rng: random.Random, scale: int) -> bytes:
    lines = [f"replica: {b!r}".replace("'", '"') for b in bookies(scale)]
    if rng.random() < 0.3:
        lines = ["replica: " + '"' + "\\" * scale * 10 + '"']
    return mangle(rng, ("\n".join(lines) + f"\nctime: {rng.randint(0, 2**62)}\n").encode())


def _make_event(rng: random.Random, scale: int) -> bytes:
    """A Kafka record: int32 key length, key, value (a ledger event with metadata, a mark or racks)."""
    kind = rng.choice(
        (ledger_events_pb2.LEDGER_CHANGED, ledger_events_pb2.UNDER_REPLICATION_MARKED, ledger_events_pb2.RACKS_CHANGED)
    )
    event = ledger_events_pb2.LedgerEvent(kind=kind, ledger_id=rng.randint(0, 2**40), ledgers_root=ROOT)
    if kind == ledger_events_pb2.LEDGER_CHANGED:
        event.metadata = _make_metadata(rng, scale)
    elif kind == ledger_events_pb2.UNDER_REPLICATION_MARKED:
        event.under_replication.replicas.extend(bookies(scale))
    else:
        event.racks = _make_racks(rng, scale)
    key = ledger_key(event.ledger_id) if kind in LEDGER_KINDS else b"cluster"
    return struct.pack(">i", len(key)) + key + mangle(rng, event.SerializeToString())


def _run_event(data: bytes) -> object:
    (length,) = struct.unpack_from(">i", data, 0)
    event = accept_event(data[4 : 4 + length], data[4 + length :], ROOT)
    if event.kind == ledger_events_pb2.LEDGER_CHANGED:
        return decode_ledger_metadata(event.metadata)
    if event.kind == ledger_events_pb2.RACKS_CHANGED:
        return parse_pulsar_racks(event.racks)
    return event


TARGETS: tuple[Target, ...] = (
    Target("ledger metadata", _make_metadata, decode_ledger_metadata),
    Target("password redaction", _make_metadata, redact_ledger_metadata),
    Target("listing", _make_listing, decode_listing_compact),
    Target("verdict", _make_verdict, _run_verdict),
    Target("v3 frame", _make_v3_frame, _run_v3_frame),
    Target("agent response", _make_agent_response, _run_agent_response),
    Target("rack json", _make_racks, parse_pulsar_racks),
    Target("under-replication mark", _make_mark, parse_underreplication_mark),
    Target("kafka event", _make_event, _run_event),
)
