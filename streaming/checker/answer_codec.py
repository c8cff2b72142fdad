"""Bookie answers as bytes, to travel in a row from the fetch stage to the stateful processor, with the ledger's
metadata as the fetch stage decoded it.

A pair: the answers, then the metadata as :func:`~scrutiny.core.ledger_metadata.metadata_to_plain`'s tuple (None when
the fetch stage has none to hand on), so that the stateful step does not decode the same bytes again (three to
five times the cost of taking back the plain values). The answers are a dict, bookie id -> ``["L", [first_start,
last_start, size, period, ...]]`` (the listing's groups, four integers a group, as the fetch stage has them: both
bookie clients merge a listing's runs into periodic groups as they decode it,
:func:`~scrutiny.core.listing_codec.decode_listing_compact`), ``["N"]`` (no ledger), ``["U", reason]`` (unknown) or
``["Z", reason]`` (unknown: the ledger in limbo), each with the answer's ``as_of_ms`` appended when it has one (an
index read: the write-cache rule of the verdict needs it), then, when the answer has one, its ``beyond`` entry header
as ``[ledger, entry, last-add-confirmed, length]`` (after ``as_of_ms``, None when it has none).

In :mod:`marshal`'s format, not JSON: about five times cheaper to write and to read for these small trees of
integers and strings (``bench/README.md``). The bytes never leave the job and are never kept: the fetch stage writes
them and the stateful step of the same micro-batch reads them, in workers Spark requires to run the same Python
version, so the groups and the metadata are taken back as written (the fetch stage validated them when it decoded
the bookie's listing and the znode's bytes).
"""

from __future__ import annotations

import marshal
from collections.abc import Mapping

from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.ledger_metadata import LedgerMetadata, metadata_from_plain, metadata_to_plain
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.core.verdict import AnswerKind, BookieAnswer

_KIND_OF = {"L": AnswerKind.LISTING, "N": AnswerKind.NO_LEDGER, "U": AnswerKind.UNKNOWN, "Z": AnswerKind.UNKNOWN}


def encode_answers(answers: Mapping[str, BookieAnswer], metadata: LedgerMetadata | None = None) -> bytes:
    """``answers`` and the decoded ``metadata`` of the event they answer, as bytes (see the module's docstring)."""
    doc: dict[str, list[object]] = {}
    for bookie, answer in answers.items():
        item: list[object]
        if answer.kind is AnswerKind.LISTING:
            item = ["L", [n for g in answer.groups for n in (g.first_start, g.last_start, g.size, g.period)]]
        elif answer.kind is AnswerKind.NO_LEDGER:
            item = ["N"]
        else:
            item = ["Z" if answer.limbo else "U", answer.reason]
        if answer.beyond is not None:
            header = answer.beyond
            beyond = [header.ledger_id, header.entry_id, header.last_add_confirmed, header.length]
            item += [answer.as_of_ms, beyond]
        elif answer.as_of_ms is not None:
            item.append(answer.as_of_ms)
        doc[bookie] = item
    return marshal.dumps((doc, None if metadata is None else metadata_to_plain(metadata)))


def decode_answers(data: bytes) -> tuple[dict[str, BookieAnswer], LedgerMetadata | None]:
    """The inverse of :func:`encode_answers`: the answers and the metadata."""
    doc, plain = marshal.loads(data)
    out: dict[str, BookieAnswer] = {}
    for bookie, item in doc.items():
        tag = item[0]
        size = 1 if tag == "N" else 2
        as_of = item[size] if len(item) > size else None
        beyond = EntryHeader(*item[size + 1]) if len(item) > size + 1 else None
        groups: tuple[SequenceGroup, ...] = ()
        reason = ""
        if tag == "L":
            fields = item[1]
            groups = tuple(SequenceGroup(*fields[i : i + 4]) for i in range(0, len(fields), 4))
        elif tag != "N":
            reason = item[1]
        out[bookie] = BookieAnswer(_KIND_OF[tag], groups, reason, as_of, tag == "Z", beyond)
    return out, None if plain is None else metadata_from_plain(plain)
