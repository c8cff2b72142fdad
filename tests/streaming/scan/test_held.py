"""The deep scan's survey hands its judge id ranges that follow each other and cover every id, one batch at a time;
the walk's ledger ids it consults answer as a set would."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.connectors.bookies.fetch import FetchConfig
from scrutiny.core.held_ledgers import LISTING_START, HeldLedger, LedgerPage
from scrutiny.core.orphans import IdRange
from scrutiny.streaming.scan import held

pytestmark = pytest.mark.unit

PAGES = (
    LedgerPage((HeldLedger(1), HeldLedger(2)), end=False),
    LedgerPage((HeldLedger(5), HeldLedger(8)), end=False),
    LedgerPage((HeldLedger(9),), end=True),
)


class _Client:
    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def ledger_pages(self, _size: int) -> Iterator[LedgerPage]:
        yield from PAGES


def test_the_judge_gets_contiguous_ranges_of_the_ledgers_without_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    route = SimpleNamespace(protocol="agent", target="127.0.0.1:1", problem="")
    monkeypatch.setattr(held, "plan_route", lambda *_: route)
    monkeypatch.setattr(held, "agent_roots", lambda _config: None)
    monkeypatch.setattr(held, "open_agent_client", lambda *_: _Client())
    monkeypatch.setattr(held, "JUDGE_BATCH", 2)
    calls: list[tuple[IdRange, list[int]]] = []

    def judge(bookie: str, ids: IdRange, without: list[HeldLedger]) -> int:
        assert bookie == "bk1:3181"
        calls.append((ids, [h.ledger_id for h in without]))
        return len(without) - 1

    # 2 is in the snapshot; 8 was created after it (ZooKeeper has it now): neither is handed to the judge.
    survey = held.survey_held_ledgers(
        {"bk1:3181": None},
        cast(FetchConfig, None),
        {2},
        lambda ids: {8} & set(ids),
        judge=judge,
    )
    assert calls == [(IdRange(LISTING_START, 8), [1, 5]), (IdRange(8, None), [9])]
    [found] = survey.bookies
    assert (found.listed, found.count, found.orphans, survey.orphans) == (5, 3, 1, 1)


@given(
    st.lists(st.lists(st.integers(min_value=-5, max_value=2**63 - 1) | st.integers(0, 50), max_size=20), max_size=6),
    st.lists(st.integers(0, 50) | st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=30),
)
def test_known_ledgers_answer_as_a_set_of_the_ids_given_batch_by_batch_in_any_order(
    batches: list[list[int]], probes: list[int]
) -> None:
    known = held.KnownLedgers()
    for batch in batches:
        known.extend(batch)
    reference = {ledger_id for batch in batches for ledger_id in batch}
    assert len(known) == sum(map(len, batches))
    assert [p in known for p in [*probes, *reference]] == [p in reference for p in [*probes, *reference]]
    assert "7" not in known
