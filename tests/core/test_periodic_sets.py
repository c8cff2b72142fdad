"""The sweep over pieces against a per-position reference, overlapping pieces included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.periodic_sets import Piece, sweep

MODULUS = 12


@st.composite
def piece_lists(draw: st.DrawFn) -> list[list[Piece]]:
    """A few inputs, each with pieces that may overlap, nest or repeat exactly."""
    inputs: list[list[Piece]] = []
    for _ in range(draw(st.integers(1, 4))):
        pieces: list[Piece] = []
        for _ in range(draw(st.integers(0, 8))):
            start = draw(st.integers(0, 40))
            end = draw(st.integers(start, 45))
            pieces.append((start, end, draw(st.integers(1, (1 << MODULUS) - 1))))
        repeat = draw(st.booleans())
        if pieces and repeat:
            pieces.append(pieces[0])  # the same piece twice: still counted until both close
        inputs.append(pieces)
    return inputs


@settings(max_examples=300, deadline=None)
@given(piece_lists(), st.integers(0, 10), st.integers(30, 50))
def test_sweep_gives_each_inputs_union_at_every_position(inputs: list[list[Piece]], lo: int, hi: int) -> None:
    covered: list[int] = []
    for start, end, masks in sweep(inputs, lo, hi):
        assert start <= end
        for position in range(start, end + 1):
            covered.append(position)
            for pieces, mask in zip(inputs, masks, strict=True):
                expected = 0
                for first, last, piece_mask in pieces:
                    if first <= position <= last:
                        expected |= piece_mask
                assert mask == expected, (position, pieces)
    assert covered == list(range(lo, hi + 1))


def test_sweep_of_many_overlapping_pieces_keeps_the_union_until_the_last_closes() -> None:
    # 300 nested pieces on distinct residues: the union shrinks one residue at a time as they close.
    pieces: list[Piece] = [(k, 1000 - k, 1 << k) for k in range(300)]
    results = list(sweep([pieces], 0, 1000))
    at = {start: masks[0] for start, _, masks in results}
    assert at[299] == (1 << 300) - 1
    assert at[702] == (1 << 299) - 1  # piece 299 covers [299, 701]
    assert at[1000] == 1
