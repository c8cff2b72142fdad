"""A large walk's ledger metadata decoded and redacted in worker processes while the watcher publishes.

A first snapshot (and a resync after a long absence) publishes one event per ledger, and part of the watcher's own
time per event goes to the metadata's decode and password redaction (:func:`redacted_metadata`: ~20 µs a ledger
for metadata as BookKeeper writes it, 50–90 µs for anything else, which is decoded in full; the event's
construction and hand-over to the producer take ~40 µs more). When a walk has at least ``min_ledgers`` ledger
events, ``workers`` processes do that work in chunks of ``chunk`` ledgers, a bounded number of chunks ahead of the
publishing (memory stays bounded by ``2 × workers`` chunks), and hand the results back in the walk's order. Smaller
walks, the live changes and ``workers = 0`` do it in the watcher's own thread.

The processes are spawned, never forked (the watcher runs ZooKeeper's and Kafka's threads), at the start of such a
walk, and stopped at its end or when the walk is cut off: a watcher running for months holds no idle workers (only
multiprocessing's small resource tracker stays once a pool has run). A pool that fails (a worker killed, no process
to be had) is logged and the rest of the walk is done in the watcher's own thread: the events are the same either
way.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections import deque
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import closing
from dataclasses import dataclass

from scrutiny.core.metadata_redaction import RedactedMetadata, redacted_metadata

log = logging.getLogger(__name__)

#: Ledgers per task handed to a worker: large enough that pickling and the hand-over are a small part of it.
CHUNK = 1000


def redact_chunk(blobs: Sequence[bytes]) -> list[tuple[bytes, str]]:
    """Each ledger znode's bytes without the password, and why the bytes do not decode (run in a worker)."""
    out: list[tuple[bytes, str]] = []
    for data in blobs:
        redacted = redacted_metadata(data)
        out.append((redacted.data, redacted.decode_error))
    return out


@dataclass(frozen=True, slots=True)
class RedactionPool:
    """How a walk's ledger metadata is redacted: by ``workers`` processes from ``min_ledgers`` ledgers on."""

    workers: int = 1
    min_ledgers: int = 20_000
    chunk: int = CHUNK

    def redacted(self, blobs: Sequence[bytes]) -> Generator[RedactedMetadata]:
        """The redaction of each of ``blobs``, in their order (see the module). Closing the iterator early stops
        the workers."""
        if self.workers < 1 or len(blobs) < max(1, self.min_ledgers):
            yield from map(redacted_metadata, blobs)
            return
        done = 0
        try:
            with closing(self._pooled(blobs)) as chunks:
                for results in chunks:
                    for data, error in results:
                        yield RedactedMetadata(data, error)
                    done += len(results)
        except Exception as error:  # BrokenProcessPool, OSError, RuntimeError (a main module spawn cannot import)
            log.warning(
                "the metadata redaction's worker processes failed (%s): the watcher redacts the remaining %d "
                "ledgers of this walk itself",
                error or type(error).__name__,
                len(blobs) - done,
            )
            yield from map(redacted_metadata, blobs[done:])

    def _pooled(self, blobs: Sequence[bytes]) -> Generator[list[tuple[bytes, str]]]:
        starts: Iterator[int] = iter(range(0, len(blobs), self.chunk))
        pending: deque[Future[list[tuple[bytes, str]]]] = deque()
        pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        try:
            for start in starts:
                pending.append(pool.submit(redact_chunk, blobs[start : start + self.chunk]))
                if len(pending) >= 2 * self.workers:
                    break
            while pending:
                results = pending.popleft().result()
                following = next(starts, None)
                if following is not None:
                    pending.append(pool.submit(redact_chunk, blobs[following : following + self.chunk]))
                yield results
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
