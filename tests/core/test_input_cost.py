"""Any bytes, bounded cost: every decoder and the verdict end in a result or the project's error, in bounded time.

The inputs (tests/support/input_cost.py) are shaped to be expensive: ensembles of thousands of bookies, listings
of thousands of groups whose periods stretch the verdict's modulus, deep JSON, long runs of escapes, some mangled.
Each run must end in a result or a ScrutinyError (anything else fails the test as a crash) within a bound far
above what a linear decoder needs and far below what the quadratic paths took (seconds to minutes at these
sizes). ``bench/input_cost_bench.py`` runs the same targets at length and prints the figures.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.errors import FormatError, MetadataFormatError
from scrutiny.core.ledger_metadata import MAX_ENSEMBLE_SIZE, build_ledger_metadata, decode_ledger_metadata
from scrutiny.core.periodic_sets import ResidueCounts, cyclic_runs, smallest_period
from scrutiny.core.protobuf_text import MAX_BACKSLASH_RUN
from scrutiny.core.sequence_groups import SequenceGroup
from scrutiny.core.striping import expected_groups, expected_residues
from scrutiny.core.verdict import BookieAnswer, VerdictKind, compute_verdict
from scrutiny.core.vocabulary import Category
from scrutiny.core.zk_records import parse_underreplication_mark
from tests.support.input_cost import TARGETS, Target, bookies, metadata_bytes, run_one

#: The most one input may take, whatever its size here (a hang detector with room for a loaded 2-core machine).
MAX_SECONDS = 3.0


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
@settings(max_examples=12, deadline=None, database=None)
@given(seed=st.integers(0, 2**32), scale=st.sampled_from((1, 10, 100, 1000, 2000)))
def test_every_input_ends_in_a_result_or_our_error_in_bounded_time(target: Target, seed: int, scale: int) -> None:
    data = target.make(random.Random(seed), scale)
    run = run_one(target, data)  # any error but ScrutinyError propagates: a crash fails the test
    assert run.seconds < MAX_SECONDS, f"{target.name}: {run.size} bytes took {run.seconds:.2f} s"


# ------------------------------------------------------------------------------------------ the limits, one by one


def test_an_ensemble_above_the_limit_is_refused_with_its_reason() -> None:
    data = metadata_bytes(random.Random(1), MAX_ENSEMBLE_SIZE + 1, 1)
    with pytest.raises(MetadataFormatError, match=f"ensemble size {MAX_ENSEMBLE_SIZE + 1} is above"):
        decode_ledger_metadata(data)
    assert decode_ledger_metadata(metadata_bytes(random.Random(1), MAX_ENSEMBLE_SIZE, 1)).ensemble_size == 1024


def test_a_duplicate_in_a_large_ensemble_is_named() -> None:
    data = metadata_bytes(random.Random(1), MAX_ENSEMBLE_SIZE, 3, duplicate=True)
    with pytest.raises(MetadataFormatError, match=r"'bookie-0\.example:3181' appears more than once"):
        decode_ledger_metadata(data)


def test_the_largest_ensemble_is_judged_without_replica_findings() -> None:
    metadata = decode_ledger_metadata(metadata_bytes(random.Random(3), MAX_ENSEMBLE_SIZE, 1))
    last = metadata.last_entry_id
    assert last is not None
    members = metadata.segments[0].ensemble
    answers = {
        b: BookieAnswer.listing(expected_groups(i, len(members), metadata.write_quorum, 0, last))
        for i, b in enumerate(members)
    }
    verdict = compute_verdict(metadata, answers, now_ms=0)
    assert verdict.retry_bookies == ()
    assert {v.category for v in verdict.violations} <= {Category.ACK_QUORUM_ONE}  # the quorums drawn may say AQ 1


def test_groups_that_stretch_the_modulus_past_the_budget_make_that_answer_unknown() -> None:
    members = bookies(3)
    last = 10**9
    metadata = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[(0, members)], last_entry_id=last, length=1
    )
    answers = {b: BookieAnswer.listing(expected_groups(i, 3, 2, 0, last)) for i, b in enumerate(members)}
    # Runs every 4095 entries: the common modulus becomes 4095, and what the bookie lacks between them repeats only
    # every 4095 entries (1,365 runs to write down per stretch): thirty such groups would make ~40,000 groups.
    hostile = [SequenceGroup(k * 10**6, k * 10**6 + 4095 * 10, 1, 4095) for k in range(30)]
    answers[members[1]] = BookieAnswer.listing(hostile)
    verdict = compute_verdict(metadata, answers, now_ms=0)
    assert verdict.verdict is VerdictKind.UNKNOWN and verdict.retry_bookies == (members[1],)
    assert verdict.violations == ()


def test_a_long_run_of_backslashes_is_refused_before_protobufs_parser() -> None:
    long = b'replica: "' + b"\\" * (MAX_BACKSLASH_RUN + 2) + b'"\n'
    with pytest.raises(FormatError, match=f"more than {MAX_BACKSLASH_RUN} backslashes in a row"):
        parse_underreplication_mark(long)
    short = b'replica: "a' + b"\\\\" * (MAX_BACKSLASH_RUN // 2) + b'"\n'
    assert len(parse_underreplication_mark(short).replicas) == 1


def test_the_harness_makes_inputs_that_the_limits_refuse() -> None:
    """The generators reach past every limit, so the bounded-time test above is not run on easy inputs only."""
    rng = random.Random(7)
    names = {t.name: t for t in TARGETS}
    refused = [run_one(names["ledger metadata"], names["ledger metadata"].make(rng, 2000)).refused for _ in range(30)]
    assert any(refused) and not all(refused)


# ------------------------------------------------------------------------------- the bit tricks against references


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, (1 << 12) - 1), max_size=20), st.integers(0, 25))
def test_residue_counts_at_least_matches_counting(masks: list[int], times: int) -> None:
    counts = ResidueCounts()
    for mask in masks:
        counts.add(mask)
    for mask in masks[::3]:
        counts.remove(mask)
    kept = [m for i, m in enumerate(masks) if i % 3]
    expected = sum(1 << r for r in range(12) if sum(m >> r & 1 for m in kept) >= times)
    assert counts.at_least(times, (1 << 12) - 1) == expected


@settings(max_examples=300, deadline=None)
@given(st.sampled_from((1, 2, 6, 12, 30, 64, 97)), st.data())
def test_smallest_period_and_cyclic_runs_match_the_residues(modulus: int, data: st.DataObject) -> None:
    period = data.draw(st.sampled_from([d for d in range(1, modulus + 1) if modulus % d == 0]))
    pattern = data.draw(st.integers(0, (1 << period) - 1))
    mask = sum(1 << r for r in range(modulus) if pattern >> (r % period) & 1)
    found = smallest_period(mask, modulus)
    assert modulus % found == 0 and period % found == 0
    assert all((mask >> r & 1) == (mask >> ((r + found) % modulus) & 1) for r in range(modulus))
    assert not any(
        all((mask >> r & 1) == (mask >> ((r + d) % modulus) & 1) for r in range(modulus))
        for d in range(1, found)
        if modulus % d == 0
    )
    if 0 < mask < (1 << modulus) - 1:
        runs = cyclic_runs(mask, modulus)
        covered = {(start + k) % modulus for start, length in runs for k in range(length)}
        assert covered == {r for r in range(modulus) if mask >> r & 1}
        assert sum(length for _, length in runs) == len(covered)  # disjoint
        assert all(not mask >> ((start - 1) % modulus) & 1 for start, _ in runs)  # maximal


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.data())
def test_expected_residues_match_the_write_sets(ensemble: int, data: st.DataObject) -> None:
    write = data.draw(st.integers(1, ensemble))
    bookie = data.draw(st.integers(0, ensemble - 1))
    modulus = ensemble * data.draw(st.integers(1, 4))
    mask = expected_residues(bookie, ensemble, write, modulus)
    held = {r for r in range(modulus) if bookie in {(r + w) % ensemble for w in range(write)}}
    assert {r for r in range(modulus) if mask >> r & 1} == held
