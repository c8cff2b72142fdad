"""The watcher's inbox: states first and in order, node notifications coalesced per node, memory bounded."""

from __future__ import annotations

import threading

import pytest

from scrutiny.watcher.inbox import Inbox

pytestmark = pytest.mark.unit


def test_a_node_notified_again_is_kept_once_at_its_last_place() -> None:
    inbox = Inbox()
    for path in ["/a", "/b", "/a", "/c", "/b"]:
        inbox.put_path(path)
    assert inbox.waiting_paths() == 3
    assert inbox.take(0, batch=2) == ["/a", "/c"]
    assert inbox.take(0, batch=2) == ["/b"]
    assert inbox.take(0, batch=2) is None


def test_states_come_first_in_order_and_take_state_leaves_the_paths() -> None:
    inbox = Inbox()
    inbox.put_path("/a")
    inbox.put_state("SUSPENDED")
    inbox.put_state("CONNECTED")
    assert inbox.take_state(0) == "SUSPENDED"
    assert inbox.take(0, batch=10) == "CONNECTED"
    assert inbox.take_state(0) is None and inbox.waiting_paths() == 1
    inbox.clear()
    assert inbox.take(0, batch=10) is None


def test_memory_stays_bounded_by_the_nodes_not_by_the_notifications() -> None:
    inbox = Inbox()
    for round_ in range(500):
        for ledger in range(100):
            inbox.put_path(f"/ledgers/L{ledger}")
        inbox.put_path(f"/ledgers/L{round_ % 100}")
    assert inbox.waiting_paths() == 100


def test_a_waiting_taker_wakes_when_something_arrives() -> None:
    inbox = Inbox()
    got: list[object] = []
    taker = threading.Thread(target=lambda: got.append(inbox.take(30, batch=5)))
    taker.start()
    inbox.put_path("/x")
    taker.join(timeout=10)
    assert got == [["/x"]]
