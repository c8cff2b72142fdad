"""The rate limit of the rolling re-verification, as one task of the stateful step applies it.

Every checked ledger comes due for re-verification on its schedule (:mod:`scrutiny.core.reverify`); when many come
due at once (the job was stopped for a while, or the interval is short for the number of ledgers) the due ones
beyond a task's share of ``checker.reverify_max_per_second`` in this micro-batch are put off, spaced at that rate
over the following micro-batches, so a restart never turns into a burst of requests to the bookies.
"""

from __future__ import annotations

from collections.abc import Sequence

from scrutiny.streaming.checker.replay import current_batch


class ReverifyBudget:
    """How many re-verifications one task may start in one micro-batch (``per_batch``; 0: no limit), and when the
    ones beyond are due again: the k-th one put off in the batch waits ``spacing_ms × (1 + k // per_batch)``."""

    def __init__(self, per_batch: int, spacing_ms: int) -> None:
        self.per_batch = per_batch
        self.spacing_ms = spacing_ms
        self._batch: int | None = None
        self._started = 0
        self._put_off = 0

    def split(self, due: Sequence[int], *, now_ms: int) -> tuple[list[int], dict[int, int]]:
        """The ledgers of ``due`` to re-verify now, and the others with the time each is put off to."""
        batch = current_batch()
        if batch != self._batch:  # a new micro-batch of this task: a new share
            self._batch, self._started, self._put_off = batch, 0, 0
        if self.per_batch <= 0:
            return list(due), {}
        room = max(0, self.per_batch - self._started)
        now, later = list(due[:room]), due[room:]
        self._started += len(now)
        put_off: dict[int, int] = {}
        for ledger in later:
            put_off[ledger] = now_ms + self.spacing_ms * (1 + self._put_off // self.per_batch)
            self._put_off += 1
        return now, put_off
