from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.metadata_view import ChangeKind, KnownState, MetadataView, Node, NodeStat, diff, node_stat_lag


def node(mzxid: int, data: bytes = b"x", czxid: int = 1, version: int = 0) -> Node:
    return Node(data, NodeStat(version, czxid, mzxid, 1000, 2000 + mzxid))


def kinds(changes: list) -> list[tuple[str, object]]:  # type: ignore[type-arg]
    return [(c.kind.value, c.ledger_id if c.ledger_id is not None else c.bookie_id) for c in changes]


def test_first_snapshot_creates_everything() -> None:
    view = MetadataView(
        ledgers={2: node(5), 1: node(3)},
        marks={1: node(7)},
        writable={"b1:3181": b""},
        readonly={"b2:3181": b""},
        racks=b"{}",
    )
    assert kinds(diff(MetadataView(), view)) == [
        ("BOOKIE_REGISTERED", "b1:3181"),
        ("BOOKIE_READONLY", "b2:3181"),
        ("RACKS_CHANGED", None),
        ("UNDER_REPLICATION_MARKED", 1),  # marks first: a checker knows the mark before it judges the ledger
        ("LEDGER_CREATED", 1),
        ("LEDGER_CREATED", 2),
    ]


def test_resync_publishes_only_differences() -> None:
    old = MetadataView(ledgers={1: node(3), 2: node(4), 3: node(5)}, marks={2: node(6)}, writable={"a": b"", "b": b""})
    new = MetadataView(
        ledgers={1: node(3), 2: node(9), 4: node(10)}, marks={}, writable={"a": b""}, readonly={"b": b""}
    )
    assert kinds(diff(old, new)) == [
        ("BOOKIE_READONLY", "b"),
        ("UNDER_REPLICATION_CLEARED", 2),
        ("LEDGER_CHANGED", 2),
        ("LEDGER_DELETED", 3),
        ("LEDGER_CREATED", 4),
    ]
    deleted = next(c for c in diff(old, new) if c.kind is ChangeKind.LEDGER_DELETED)
    assert deleted.node == node(5)  # the last known stat travels with the deletion


def test_bookie_transitions() -> None:
    state = KnownState(MetadataView(writable={"a": b"", "b": b""}, readonly={"c": b""}))
    changes = state.bookies({"a": b"info", "c": b""}, {})
    assert kinds(changes) == [("BOOKIE_REGISTERED", "a"), ("BOOKIE_UNREGISTERED", "b"), ("BOOKIE_WRITABLE", "c")]
    assert state.bookies({"a": b"info", "c": b""}, {}) == []


def test_live_reads_never_go_backwards() -> None:
    state = KnownState()
    assert kinds([state.ledger(7, node(10))]) == [("LEDGER_CREATED", 7)]
    assert state.ledger(7, node(10)) is None  # duplicate notification
    assert state.ledger(7, node(9)) is None  # a late read of an older version
    changed = state.ledger(7, node(12, b"y", version=1))
    assert changed is not None and changed.kind is ChangeKind.LEDGER_CHANGED
    deleted = state.ledger(7, None)
    assert deleted is not None and deleted.kind is ChangeKind.LEDGER_DELETED
    assert state.ledger(7, None) is None
    recreated = state.ledger(7, node(20, czxid=20))
    assert recreated is not None and recreated.kind is ChangeKind.LEDGER_CREATED


def test_marks_and_racks() -> None:
    state = KnownState()
    marked = state.mark(3, node(4))
    assert marked is not None and marked.kind is ChangeKind.UNDER_REPLICATION_MARKED
    remarked = state.mark(3, node(8))
    assert remarked is not None and remarked.kind is ChangeKind.UNDER_REPLICATION_MARKED
    cleared = state.mark(3, None)
    assert cleared is not None and cleared.kind is ChangeKind.UNDER_REPLICATION_CLEARED
    racks = state.racks(b'{"default": {}}')
    assert racks is not None and racks.data == b'{"default": {}}'
    assert state.racks(b'{"default": {}}') is None
    gone = state.racks(None)
    assert gone is not None and gone.data == b""


def test_lag() -> None:
    assert node_stat_lag(node(0), 2500) == 0.5
    assert node_stat_lag(node(0), 0) == 0.0


_nodes = st.none() | st.builds(node, st.integers(1, 50), st.sampled_from([b"x", b"y"]), st.integers(1, 3))
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("ledger"), st.integers(0, 4), _nodes),
        st.tuples(st.just("mark"), st.integers(0, 4), _nodes),
        st.tuples(st.just("racks"), st.just(0), st.none() | st.sampled_from([b"{}", b"[]"])),
        st.tuples(st.just("bookies"), st.just(0), st.sampled_from(["a", "b", "ab"])),
    ),
    max_size=12,
)


@given(_steps, _steps)
def test_a_savepoint_restores_exactly_what_a_batch_changed(before: list, batch: list) -> None:  # type: ignore[type-arg]
    """Reference: a deep copy of the view taken before the batch."""
    state = KnownState()
    for step in before:
        _apply(state, step)
    reference = copy.deepcopy(state.view)
    savepoint = state.savepoint()
    for kind, ident, value in batch:
        savepoint.keep(kind, ident)
        _apply(state, (kind, ident, value))
    savepoint.restore()
    assert state.view == reference


def test_changes_to_leaves_the_known_state_until_adopted() -> None:
    state = KnownState(MetadataView(ledgers={1: node(3)}))
    observed = MetadataView(ledgers={2: node(4)})
    assert kinds(state.changes_to(observed)) == [("LEDGER_DELETED", 1), ("LEDGER_CREATED", 2)]
    assert state.view.ledgers == {1: node(3)}  # nothing published yet
    state.adopt(observed)
    assert state.changes_to(observed) == []


def _apply(state: KnownState, step: tuple) -> None:  # type: ignore[type-arg]
    kind, ident, value = step
    if kind == "ledger":
        state.ledger(ident, value)
    elif kind == "mark":
        state.mark(ident, value)
    elif kind == "racks":
        state.racks(value)
    else:
        state.bookies({b: b"" for b in value}, {})
