"""The scan's progress channel: tasks count ledgers as they finish, the driver sums them."""

from __future__ import annotations

import pytest

from scrutiny.streaming.scan.progress import SEND_EVERY_S, ProgressListener, ProgressSender

pytestmark = pytest.mark.unit


def test_every_finished_ledger_is_counted_once() -> None:
    with ProgressListener() as listener:
        senders = [ProgressSender(listener.address) for _ in range(3)]
        for sender in senders:
            for _ in range(50):
                sender.finished()
        for sender in senders:
            sender.close()
        total = 0
        while (got := listener.receive(0.2)) or not total:
            total += got
        assert total == 150


def test_a_task_sends_at_most_every_interval_until_flushed() -> None:
    with ProgressListener() as listener:
        sender = ProgressSender(listener.address)
        sender.finished(3)  # within the interval of its creation: kept
        assert listener.receive(SEND_EVERY_S / 5) == 0
        sender.flush()
        assert listener.receive(1.0) == 3
        sender.close()
        assert listener.receive(SEND_EVERY_S / 5) == 0  # nothing left to send


def test_without_a_listener_a_sender_only_counts() -> None:
    sender = ProgressSender(None)
    sender.finished(5)
    sender.close()  # no socket, no error
