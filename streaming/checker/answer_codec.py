"""Bookie answers as bytes, to travel in a row from the fetch stage to the stateful processor.

A JSON object: bookie id -> ``["L", base64 listing]`` (the compact listing bytes of
:mod:`scrutiny.core.listing_codec`), ``["N"]`` (no ledger) or ``["U", reason]`` (unknown).
Written and read by this job only, within one micro-batch.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from scrutiny.core.listing_codec import decode_listing, encode_listing
from scrutiny.core.verdict import AnswerKind, BookieAnswer


def encode_answers(answers: Mapping[str, BookieAnswer]) -> bytes:
    """``answers`` as compact JSON bytes."""
    doc: dict[str, list[str]] = {}
    for bookie, answer in answers.items():
        if answer.kind is AnswerKind.LISTING:
            doc[bookie] = ["L", base64.b64encode(encode_listing(answer.groups)).decode("ascii")]
        elif answer.kind is AnswerKind.NO_LEDGER:
            doc[bookie] = ["N"]
        else:
            doc[bookie] = ["U", answer.reason]
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_answers(data: bytes) -> dict[str, BookieAnswer]:
    """The inverse of :func:`encode_answers`."""
    out: dict[str, BookieAnswer] = {}
    for bookie, item in json.loads(data).items():
        if item[0] == "L":
            out[bookie] = BookieAnswer.listing(decode_listing(base64.b64decode(item[1])))
        elif item[0] == "N":
            out[bookie] = BookieAnswer.no_ledger()
        else:
            out[bookie] = BookieAnswer.unknown(item[1])
    return out
