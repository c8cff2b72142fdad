"""Tests for scrutiny.core.repair_plan: which ledgers a fix marks, with which bytes, and the plan's text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.errors import PathError
from scrutiny.core.repair_plan import (
    PlanAction,
    PlannedRepair,
    RepairAction,
    RepairCandidate,
    RepairError,
    RepairOutcome,
    plan_repairs,
    render_actions,
    render_plan,
    repair_candidates,
)
from scrutiny.core.vocabulary import Category
from scrutiny.core.zk_records import parse_underreplication_mark

NOW = 1_700_000_000_123
MARK_5 = "/ledgers/underreplication/ledgers/0000/0000/0000/0005/urL0000000005"
MARK_7 = "/ledgers/underreplication/ledgers/0000/0000/0000/0007/urL0000000007"
MARK_9 = "/ledgers/underreplication/ledgers/0000/0000/0000/0009/urL0000000009"


def plan_of(
    rows: list[tuple[int, str, str | None]],
    *,
    marked: tuple[int, ...] = (),
    disabled: bool = False,
    force: bool = False,
    root: str = "/ledgers",
) -> list[PlannedRepair]:
    candidates = repair_candidates(rows)
    return list(plan_repairs(candidates, marked=marked, disabled=disabled, force=force, now_ms=NOW, root=root).items)


# --------------------------------------------------------------------------- candidates


def test_only_missing_replica_rows_with_a_bookie_qualify() -> None:
    rows: list[tuple[int, str, str | None]] = [
        (9, "MISSING_REPLICA", "bk2:3181"),
        (9, "NO_REPLICA", None),
        (9, "MISSING_REPLICA", "bk1:3181"),
        (9, "MISSING_REPLICA", "bk2:3181"),
        (3, "BOOKIE_UNRESPONSIVE", "bk1:3181"),
        (4, "PLACEMENT_FAIL", "bk1:3181"),
        (5, "BOOKIE_NOT_REGISTERED", "bk3:3181"),
        (6, "MISSING_REPLICA", None),
        (7, "MISSING_REPLICA", ""),
        (8, "SOMETHING_NEW", "bk1:3181"),
        (2, Category.MISSING_REPLICA, "bk4:3181"),
    ]
    assert repair_candidates(rows) == [
        RepairCandidate(2, ("bk4:3181",)),
        RepairCandidate(9, ("bk1:3181", "bk2:3181")),
    ]
    assert repair_candidates([]) == []


def test_a_candidate_is_normalised_and_validated() -> None:
    candidate = RepairCandidate(1, ("b", "a", "b"))
    assert candidate.missing_bookies == ("a", "b")
    with pytest.raises(RepairError):
        RepairCandidate(1, ())
    with pytest.raises(RepairError):
        RepairCandidate(1, ("",))
    with pytest.raises(PathError):
        RepairCandidate(-1, ("a",))
    with pytest.raises(PathError):
        repair_candidates([(2**63, "MISSING_REPLICA", "a")])


# --------------------------------------------------------------------------- the plan


def test_a_mark_carries_bookkeepers_path_and_text() -> None:
    (item,) = plan_of([(5, "MISSING_REPLICA", "bk2:3181"), (5, "MISSING_REPLICA", "bk1:3181")])
    assert item == PlannedRepair(
        5,
        PlanAction.MARK,
        ("bk1:3181", "bk2:3181"),
        MARK_5,
        b'replica: "bk1:3181"\nreplica: "bk2:3181"\nctime: 1700000000123\n',
    )


def test_long_ids_and_other_roots_hash_into_four_hex_slices() -> None:
    ledger = 2**40 + 7  # slices 0000 0100 0000 0007
    (item,) = plan_of([(ledger, "MISSING_REPLICA", "b")], root="/pulsar/ledgers")
    assert item.path == "/pulsar/ledgers/underreplication/ledgers/0000/0100/0000/0007/urL1099511627783"
    (item,) = plan_of([(0x7BCD_EF01_2A45_6C89, "MISSING_REPLICA", "b")], root="/")
    assert item.path == f"/underreplication/ledgers/7bcd/ef01/2a45/6c89/urL{0x7BCD_EF01_2A45_6C89:010d}"
    with pytest.raises(PathError):
        plan_of([(1, "MISSING_REPLICA", "b")], root="ledgers")
    with pytest.raises(PathError):
        plan_repairs([], marked=(), disabled=False, force=False, now_ms=NOW, root="/ledgers/")


def test_a_marked_ledger_is_skipped_whatever_else_holds() -> None:
    rows: list[tuple[int, str, str | None]] = [(5, "MISSING_REPLICA", "a"), (7, "MISSING_REPLICA", "b")]
    for disabled, force in [(False, False), (True, False), (True, True), (False, True)]:
        items = plan_of(rows, marked=(7, 100), disabled=disabled, force=force)
        skipped = items[1]
        assert (skipped.ledger_id, skipped.action, skipped.data) == (7, PlanAction.SKIP_ALREADY_MARKED, None)
        assert skipped.path == MARK_7


def test_disabled_auto_recovery_blocks_marks_unless_forced() -> None:
    rows: list[tuple[int, str, str | None]] = [(5, "MISSING_REPLICA", "a"), (9, "MISSING_REPLICA", "b")]
    assert [i.action for i in plan_of(rows, disabled=True)] == [PlanAction.SKIP_DISABLED] * 2
    assert all(i.data is None for i in plan_of(rows, disabled=True))
    assert [i.action for i in plan_of(rows, disabled=True, force=True)] == [PlanAction.MARK] * 2
    assert [i.action for i in plan_of(rows, force=True)] == [PlanAction.MARK] * 2


def test_candidates_of_one_ledger_are_merged_and_ordered() -> None:
    candidates = [RepairCandidate(9, ("c",)), RepairCandidate(5, ("b",)), RepairCandidate(9, ("a", "c"))]
    plan = plan_repairs(candidates, marked=set(), disabled=False, force=False, now_ms=NOW, root="/ledgers")
    assert [(i.ledger_id, i.missing_bookies) for i in plan.items] == [(5, ("b",)), (9, ("a", "c"))]
    assert plan.count(PlanAction.MARK) == 2
    assert plan.marks == plan.items
    assert plan.disable_path == "/ledgers/underreplication/disable"


# --------------------------------------------------------------------------- the texts


def test_render_plan_is_pinned() -> None:
    rows: list[tuple[int, str, str | None]] = [
        (9, "MISSING_REPLICA", "bk3:3181"),
        (5, "MISSING_REPLICA", "bk2:3181"),
        (5, "MISSING_REPLICA", "bk1:3181"),
        (7, "MISSING_REPLICA", "odd id"),
    ]
    plan = plan_repairs(repair_candidates(rows), marked={7}, disabled=False, force=False, now_ms=NOW, root="/ledgers")
    assert render_plan(plan) == (
        f"MARK                ledger=5 missing=bk1:3181,bk2:3181 path={MARK_5}\n"
        f'SKIP_ALREADY_MARKED ledger=7 missing="odd id" path={MARK_7}\n'
        f"MARK                ledger=9 missing=bk3:3181 path={MARK_9}\n"
        "plan: ledgers=3 mark=2 skip_already_marked=1 skip_disabled=0 auto_recovery=enabled force=no"
    )
    blocked = plan_repairs(
        repair_candidates(rows[:1]), marked=(), disabled=True, force=False, now_ms=0, root="/ledgers"
    )
    assert render_plan(blocked) == (
        f"SKIP_DISABLED       ledger=9 missing=bk3:3181 path={MARK_9}\n"
        "plan: ledgers=1 mark=0 skip_already_marked=0 skip_disabled=1 auto_recovery=disabled force=no"
    )
    empty = plan_repairs([], marked=(), disabled=True, force=True, now_ms=0, root="/ledgers")
    assert render_plan(empty) == (
        "plan: ledgers=0 mark=0 skip_already_marked=0 skip_disabled=0 auto_recovery=disabled force=yes"
    )


def test_render_actions_is_pinned() -> None:
    actions = [
        RepairAction(5, RepairOutcome.MARKED, ("bk1:3181",), MARK_5),
        RepairAction(7, RepairOutcome.FAILED, ("bk1:3181", "bk2:3181"), MARK_7, 'NoAuthError: "x"'),
        RepairAction(9, RepairOutcome.ALREADY_MARKED, ("bk3:3181",), MARK_9, "marked"),
    ]
    assert render_actions(actions) == (
        f"MARKED           ledger=5 missing=bk1:3181 path={MARK_5}\n"
        f'FAILED           ledger=7 missing=bk1:3181,bk2:3181 path={MARK_7} reason="NoAuthError: \\"x\\""\n'
        f'ALREADY_MARKED   ledger=9 missing=bk3:3181 path={MARK_9} reason="marked"\n'
        "fix: ledgers=3 marked=1 already_marked=1 skipped_disabled=0 failed=1 skipped_stale=0"
    )
    assert render_actions([]) == "fix: ledgers=0 marked=0 already_marked=0 skipped_disabled=0 failed=0 skipped_stale=0"


# --------------------------------------------------------------------------- property: against a naive reference

LEDGER_IDS = st.one_of(st.integers(0, 40), st.integers(0, 2**63 - 1))
CATEGORIES = st.sampled_from([*(c.value for c in Category), "UNKNOWN", ""])
BOOKIES = st.one_of(st.none(), st.just(""), st.from_regex(r"[A-Za-z0-9:_.-]{1,12}", fullmatch=True))
ROWS = st.lists(st.tuples(LEDGER_IDS, CATEGORIES, BOOKIES), max_size=40)


def reference_plan(
    rows: list[tuple[int, str, str | None]], marked: set[int], disabled: bool, force: bool, now_ms: int
) -> list[tuple[int, str, tuple[str, ...], str, bytes | None]]:
    """Per ledger: (id, action, bookies, path, bytes), computed the plain way."""
    bookies: dict[int, set[str]] = {}
    for ledger_id, category, bookie in rows:
        if category == "MISSING_REPLICA" and bookie is not None and bookie != "":
            bookies.setdefault(ledger_id, set()).add(bookie)
    out: list[tuple[int, str, tuple[str, ...], str, bytes | None]] = []
    for ledger_id in sorted(bookies):
        missing = tuple(sorted(bookies[ledger_id]))
        hexes = "/".join(format((ledger_id >> (16 * k)) & 0xFFFF, "04x") for k in (3, 2, 1, 0))
        path = "/ledgers/underreplication/ledgers/" + hexes + "/urL" + str(ledger_id).rjust(10, "0")
        if ledger_id in marked:
            out.append((ledger_id, "SKIP_ALREADY_MARKED", missing, path, None))
        elif disabled and not force:
            out.append((ledger_id, "SKIP_DISABLED", missing, path, None))
        else:
            text = "".join('replica: "' + b + '"\n' for b in missing) + "ctime: " + str(now_ms) + "\n"
            out.append((ledger_id, "MARK", missing, path, text.encode()))
    return out


@settings(max_examples=300, deadline=None)
@given(
    rows=ROWS,
    marked=st.sets(st.integers(0, 40), max_size=10),
    disabled=st.booleans(),
    force=st.booleans(),
    now_ms=st.integers(0, 2**63 - 1),
)
def test_plan_matches_the_reference(
    rows: list[tuple[int, str, str | None]], marked: set[int], disabled: bool, force: bool, now_ms: int
) -> None:
    plan = plan_repairs(
        repair_candidates(rows), marked=marked, disabled=disabled, force=force, now_ms=now_ms, root="/ledgers"
    )
    got = [(i.ledger_id, i.action.value, i.missing_bookies, i.path, i.data) for i in plan.items]
    assert got == reference_plan(rows, marked, disabled, force, now_ms)
    for item in plan.marks:
        assert item.data is not None
        mark = parse_underreplication_mark(item.data)
        assert (mark.replicas, mark.ctime_ms) == (item.missing_bookies, now_ms)
    lines = render_plan(plan).split("\n")
    assert len(lines) == len(plan.items) + 1
    for line, item in zip(lines, plan.items, strict=False):
        assert line.split()[:2] == [item.action.value, f"ledger={item.ledger_id}"]
        assert line.endswith(f" path={item.path}")
