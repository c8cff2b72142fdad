"""The fetch stage's answers on their way to the stateful step: the codec's bytes against the same tree as JSON, and
the metadata handed on decoded against decoding it again.

Run from the repository root::

    .venv/bin/python -m bench.answer_codec_bench           # 7 rounds of 20,000 (~20 s)
    .venv/bin/python -m bench.answer_codec_bench --quick   # 3 rounds of 2,000

The answers are those of a healthy closed ledger of ``checker_bench``'s backlog (E=3/WQ=2/AQ=2, 100 entries): three
bookies, each listing its stripe, read from the agent's index (an as-of time each), with the ledger's metadata (a
Pulsar ledger's, as BookKeeper writes it) decoded. Timed in the same run, with ``timeit``:
:func:`~scrutiny.streaming.checker.answer_codec.encode_answers` and ``decode_answers`` (a :mod:`marshal` dump of the
answers and the metadata's plain values), the answers' tree written as compact JSON and read back with
:func:`json.loads` (the codec's form before 2026-12-07), and the metadata taken back from its plain values against
:func:`~scrutiny.core.ledger_metadata.decode_ledger_metadata` of its bytes (what the stateful step did before the fetch
stage handed it on). Printed: the median per ledger of each, their ratios and the bytes. Nothing is asserted: exit 0.
"""

from __future__ import annotations

import argparse
import json
import marshal
import statistics
import timeit
from collections.abc import Callable

from scrutiny.core.compact_json import compact_json
from scrutiny.core.ledger_metadata import (
    build_ledger_metadata,
    decode_ledger_metadata,
    encode_ledger_metadata_v3,
    metadata_from_plain,
)
from scrutiny.core.striping import expected_groups
from scrutiny.core.verdict import BookieAnswer
from scrutiny.streaming.checker import answer_codec

AS_OF_MS = 1_700_000_000_000


def answers() -> dict[str, BookieAnswer]:
    """Three bookies' answers for a healthy E=3/WQ=2 ledger of 100 entries."""
    return {
        f"127.0.0.1:{3181 + index}": BookieAnswer.listing(expected_groups(index, 3, 2, 0, 99), AS_OF_MS)
        for index in range(3)
    }


def metadata_bytes() -> bytes:
    """The stored metadata of a closed Pulsar ledger of 100 entries on the three bookies."""
    metadata = build_ledger_metadata(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        segments=[(0, tuple(answers()))],
        last_entry_id=99,
        length=10_000,
        ctime=AS_OF_MS,
        custom_metadata={
            "application": b"pulsar",
            "component": b"managed-ledger",
            "pulsar/managed-ledger": b"public/default/persistent/orders",
        },
    )
    return encode_ledger_metadata_v3(metadata)


def median_us(call: Callable[[], object], number: int, rounds: int) -> float:
    return statistics.median(timeit.repeat(call, number=number, repeat=rounds)) / number * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 2,000")
    args = parser.parse_args()
    number, rounds = (2_000, 3) if args.quick else (20_000, 7)
    given, stored = answers(), metadata_bytes()
    metadata = decode_ledger_metadata(stored)
    encoded = answer_codec.encode_answers(given, metadata)
    tree, plain = marshal.loads(encoded)
    as_json = compact_json(tree).encode()
    assert answer_codec.decode_answers(encoded) == (given, metadata) and json.loads(as_json) == tree  # the same
    dump = marshal.dumps(tree)
    figures = {
        "encode_answers (marshal)": median_us(lambda: answer_codec.encode_answers(given, metadata), number, rounds),
        "  the answers' tree: marshal.dumps": median_us(lambda: marshal.dumps(tree), number, rounds),
        "  the answers' tree as compact JSON": median_us(lambda: compact_json(tree).encode(), number, rounds),
        "decode_answers (marshal)": median_us(lambda: answer_codec.decode_answers(encoded), number, rounds),
        "  the answers' tree: marshal.loads": median_us(lambda: marshal.loads(dump), number, rounds),
        "  the answers' tree: json.loads": median_us(lambda: json.loads(as_json), number, rounds),
        "  the metadata from its plain values": median_us(lambda: metadata_from_plain(plain), number, rounds),
        "decode_ledger_metadata of its bytes": median_us(lambda: decode_ledger_metadata(stored), number, rounds),
    }
    print(f"three bookies' answers, a healthy ledger; median of {rounds} rounds of {number:,}, µs a ledger:")
    for label, micros in figures.items():
        print(f"  {label:<38} {micros:6.1f}")
    writing = figures["  the answers' tree: marshal.dumps"] / figures["  the answers' tree as compact JSON"]
    reading = figures["  the answers' tree: marshal.loads"] / figures["  the answers' tree: json.loads"]
    taking = figures["  the metadata from its plain values"] / figures["decode_ledger_metadata of its bytes"]
    print(f"the answers' tree, marshal against JSON: writing ×{writing:.2f}, reading ×{reading:.2f}")
    print(f"the metadata taken back against decoded again: ×{taking:.2f}")
    print(f"bytes: {len(encoded)} in all, the answers' tree {len(dump)} (JSON {len(as_json)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
