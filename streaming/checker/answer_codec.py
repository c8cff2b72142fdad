"""Bookie answers as bytes, to travel in a row from the fetch stage to the stateful processor.

A JSON object: bookie id -> ``["L", base64 listing]`` (the compact listing bytes of
:mod:`scrutiny.core.listing_codec`), ``["N"]`` (no ledger), ``["U", reason]`` (unknown) or ``["Z", reason]``
(unknown: the ledger in limbo), each with the answer's ``as_of_ms`` appended when it has one (an index read: the
write-cache rule of the verdict needs it), then, when the answer has one, its ``beyond`` entry header as
``[ledger, entry, last-add-confirmed, length]`` (after ``as_of_ms``, null when it has none).
Written and read by this job only, within one micro-batch.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import replace

from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.listing_codec import decode_listing, encode_listing
from scrutiny.core.verdict import AnswerKind, BookieAnswer


def encode_answers(answers: Mapping[str, BookieAnswer]) -> bytes:
    """``answers`` as compact JSON bytes."""
    doc: dict[str, list[object]] = {}
    for bookie, answer in answers.items():
        item: list[object]
        if answer.kind is AnswerKind.LISTING:
            item = ["L", base64.b64encode(encode_listing(answer.groups)).decode("ascii")]
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
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_answers(data: bytes) -> dict[str, BookieAnswer]:
    """The inverse of :func:`encode_answers`."""
    out: dict[str, BookieAnswer] = {}
    for bookie, item in json.loads(data).items():
        size = 1 if item[0] == "N" else 2
        as_of = int(item[size]) if len(item) > size and item[size] is not None else None
        beyond = EntryHeader(*item[size + 1]) if len(item) > size + 1 else None
        if item[0] == "L":
            answer = BookieAnswer.listing(decode_listing(base64.b64decode(item[1])))
        elif item[0] == "N":
            answer = BookieAnswer.no_ledger()
        elif item[0] == "Z":
            answer = BookieAnswer.in_limbo(item[1])
        else:
            answer = BookieAnswer.unknown(item[1])
        out[bookie] = answer if as_of is None and beyond is None else replace(answer, as_of_ms=as_of, beyond=beyond)
    return out
