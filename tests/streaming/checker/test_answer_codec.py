"""Bookie answers and the decoded metadata survive the trip from the fetch stage to the processor unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.entry_header import EntryHeader
from scrutiny.core.ledger_metadata import build_ledger_metadata, decode_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.sequence_groups import from_entries
from scrutiny.core.verdict import AnswerKind, BookieAnswer
from scrutiny.streaming.checker.answer_codec import decode_answers, encode_answers
from tests.support.strategies import expand_set

pytestmark = pytest.mark.unit

headers = st.builds(
    lambda ledger, entry, lac, length: EntryHeader(ledger, entry, min(lac, entry - 1), length),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(-1, 2**63 - 1),
    st.integers(0, 2**63 - 1),
)
answers = st.builds(
    lambda answer, as_of, beyond: replace(answer, as_of_ms=as_of, beyond=beyond),
    st.one_of(
        st.sets(st.integers(0, 500), max_size=60).map(lambda s: BookieAnswer.listing(from_entries(sorted(s)))),
        st.just(BookieAnswer.no_ledger()),
        st.text(max_size=20).map(BookieAnswer.unknown),
        st.text(max_size=20).map(BookieAnswer.in_limbo),
    ),
    st.none() | st.integers(0, 2**62),  # an index read's time (the agent), or none (the bookie itself)
    st.none() | headers,  # the header of an entry held after a closed ledger's end, when one was read
)


@given(st.dictionaries(st.text(min_size=1, max_size=12), answers, max_size=6))
def test_round_trip_keeps_every_answer(given_answers: dict[str, BookieAnswer]) -> None:
    back, metadata = decode_answers(encode_answers(given_answers))
    assert metadata is None
    assert back.keys() == given_answers.keys()
    for bookie, answer in given_answers.items():
        assert back[bookie].kind is answer.kind
        assert back[bookie].as_of_ms == answer.as_of_ms  # the write-cache rule needs it after the trip
        assert back[bookie].beyond == answer.beyond  # so does the proof of a too-low close
        assert back[bookie].limbo == answer.limbo
        if answer.kind is AnswerKind.LISTING:
            assert back[bookie].groups == answer.groups  # as the fetch stage had them: no re-encoding on the way
            assert expand_set(back[bookie].groups) == expand_set(answer.groups)
        else:
            assert back[bookie].reason == answer.reason


def test_the_metadata_decoded_by_the_fetch_stage_travels_with_the_answers() -> None:
    blob = encode_ledger_metadata_v3(
        build_ledger_metadata(
            ensemble_size=3,
            write_quorum=2,
            ack_quorum=2,
            segments=[(0, ("b1:3181", "b2:3181", "b3:3181")), (50, ("b1:3181", "b4:3181", "b3:3181"))],
            last_entry_id=99,
            length=10_000,
            custom_metadata={"pulsar/managed-ledger": b"public/default/persistent/t"},
        )
    )
    decoded = decode_ledger_metadata(blob)
    given_answers = {"b1:3181": BookieAnswer.no_ledger(), "b2:3181": BookieAnswer.unknown("timed out")}
    back, metadata = decode_answers(encode_answers(given_answers, decoded))
    assert back == given_answers
    assert metadata == decoded and metadata is not decoded
    assert metadata is not None and encode_ledger_metadata_v3(metadata) == blob
