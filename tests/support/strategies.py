"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from hypothesis import strategies as st

from scrutiny.core.sequence_groups import SequenceGroup


@st.composite
def sequence_groups(draw: st.DrawFn, max_entry: int = 200) -> SequenceGroup:
    """Any consistent group within [0, max_entry + a run]."""
    first = draw(st.integers(0, max_entry))
    size = draw(st.integers(1, 8))
    if draw(st.booleans()):
        return SequenceGroup(first, first, size, 0)
    period = draw(st.integers(size, 16))
    runs = draw(st.integers(1, 12))
    return SequenceGroup(first, first + (runs - 1) * period, size, period)


def expand_set(groups: list[SequenceGroup] | tuple[SequenceGroup, ...]) -> set[int]:
    """The entries of groups as a Python set (the naive reference)."""
    out: set[int] = set()
    for group in groups:
        for first, last in group.run_bounds():
            out.update(range(first, last + 1))
    return out


class Changed(NamedTuple):
    """A near-valid input: a valid encoding with ONE change applied (``change`` says which; "none": unchanged)."""

    data: bytes
    change: str


#: Byte values that matter to the formats under test: separators, quotes, digits, signs, the ends of a varint and
#: bytes that are not UTF-8. Space and tab stand at the ends, which hypothesis draws most.
_TELLING_BYTES = (0x20, 0x00, 0x01, 0x02, 0x08, 0x0A, 0x22, 0x2D, 0x2F, 0x30, 0x31, 0x3A, 0x7B, 0x7F, 0x80, 0xFF, 0x09)
#: Hypothesis draws the ends of a list more often than its middle: the changes that tell most are there.
_BYTE_CHANGES = (
    "increment",
    "flip",
    "replace",
    "insert",
    "delete",
    "none",
    "truncate",
    "append",
    "increment",
    "decrement",
)


@st.composite
def one_byte_change(draw: st.DrawFn, data: bytes, hot: Sequence[int] = ()) -> Changed:
    """``data`` with one bit flipped, or one byte replaced, incremented, decremented, inserted or deleted, or cut
    short, or one to three bytes appended. Three positions in four come from ``hot`` when given (the bytes that
    hold a number, say), so that a good share of the changes still decode."""
    kind = draw(st.sampled_from(_BYTE_CHANGES))
    if kind == "append" or not data:
        tail = draw(st.lists(st.sampled_from(_TELLING_BYTES) | st.integers(0, 255), min_size=1, max_size=3))
        return Changed(data + bytes(tail), f"append {bytes(tail)!r}")
    if kind == "none":
        return Changed(data, "none")
    spots = [at for at in hot if 0 <= at < len(data)]
    from_hot = bool(spots) and draw(st.integers(0, 3)) > 0
    at = draw(st.sampled_from(spots) if from_hot else st.integers(0, len(data) - 1))
    old = data[at]
    new = {
        "flip": old ^ (1 << draw(st.integers(0, 7))),
        "increment": (old + 1) % 256,
        "decrement": (old - 1) % 256,
    }.get(kind)
    if new is not None:
        return Changed(data[:at] + bytes([new]) + data[at + 1 :], f"{kind} byte {at} ({old:#04x} -> {new:#04x})")
    if kind == "delete":
        return Changed(data[:at] + data[at + 1 :], f"delete byte {at} ({old:#04x})")
    if kind == "truncate":
        return Changed(data[:at], f"truncate to {at} bytes")
    byte = draw(st.sampled_from(_TELLING_BYTES) | st.integers(0, 255))
    if kind == "insert":
        return Changed(data[:at] + bytes([byte]) + data[at:], f"insert {byte:#04x} at byte {at}")
    return Changed(data[:at] + bytes([byte]) + data[at + 1 :], f"replace byte {at} ({old:#04x} -> {byte:#04x})")


_TEXT_CHANGES = (
    "nudge number",
    "replace",
    "insert",
    "delete",
    "none",
    "delete token",
    "delete line",
    "duplicate line",
    "swap lines",
)
_NUMBER = re.compile(r"-?[0-9]+")
#: What separates the tokens of the text formats under test (protobuf text, JSON, LAYOUT).
_TOKEN = re.compile(r"[^\s:\"{},\[\]]+")


@st.composite
def one_text_change(draw: st.DrawFn, text: str, alphabet: str) -> Changed:
    """``text`` (UTF-8 encoded) with one character replaced, inserted or deleted (characters from ``alphabet``),
    one number changed by one, one token (a run between separators) or one line deleted, one line duplicated, or
    two lines swapped. A change that does not apply to ``text`` (no number, one line) replaces a character."""
    kind = draw(st.sampled_from(_TEXT_CHANGES))
    lines = text.split("\n")
    if kind in ("delete line", "duplicate line", "swap lines") and len(lines) > 1:
        at = draw(st.integers(0, len(lines) - 2))
        if kind == "swap lines":
            lines[at], lines[at + 1] = lines[at + 1], lines[at]
        elif kind == "duplicate line":
            lines.insert(at, lines[at])
        else:
            del lines[at]
        return Changed("\n".join(lines).encode(), f"{kind} at line {at}")
    spans = [m.span() for m in (_NUMBER if kind == "nudge number" else _TOKEN).finditer(text)]
    if kind in ("nudge number", "delete token") and spans:
        start, end = draw(st.sampled_from(spans))
        if kind == "delete token":
            return Changed((text[:start] + text[end:]).encode(), f"delete token {text[start:end]!r}")
        number = int(text[start:end]) + draw(st.sampled_from((1, -1)))
        return Changed((text[:start] + str(number) + text[end:]).encode(), f"nudge {text[start:end]} to {number}")
    if kind == "none":
        return Changed(text.encode(), "none")
    if kind not in ("insert", "delete") or not text:  # a replacement, or a change that does not apply here
        kind = "replace" if text else "insert"
    at = draw(st.integers(0, len(text) - (0 if kind == "insert" else 1)))
    if kind == "delete":
        return Changed((text[:at] + text[at + 1 :]).encode(), f"delete {text[at]!r} at {at}")
    char = draw(st.sampled_from(alphabet))
    rest = text[at:] if kind == "insert" else text[at + 1 :]
    return Changed((text[:at] + char + rest).encode(), f"{kind} {char!r} at {at}")


def assert_fair_shares(outcomes: Counter[str], decoded: float, rejected: float) -> None:
    """Fail when fewer than ``decoded`` of a fuzz test's examples decoded or fewer than ``rejected`` were refused."""
    total = outcomes.total()
    assert outcomes["decoded"] >= decoded * total and outcomes["rejected"] >= rejected * total, (
        f"of {total} examples {outcomes['decoded']} decoded and {outcomes['rejected']} were rejected: the fuzz "
        f"inputs no longer reach the decoded-value check (want >= {decoded:.0%}) and the format error "
        f"(want >= {rejected:.0%}) often enough"
    )
