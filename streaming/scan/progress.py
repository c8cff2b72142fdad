"""Ledgers finished inside a running scan job, counted as they finish (not when a task ends).

A Spark task reports nothing until it ends, and a scan's task holds up to a chunk's share of ledgers, some waiting
for their delayed re-checks: its progress would sit at 0 for the whole wait. So each task sends, at most every
:data:`SEND_EVERY_S`, how many of its ledgers have finished since its last message, as one UDP datagram to the
driver's :class:`ProgressListener` on loopback. Only with a local master (the executors are on the driver's machine);
elsewhere the scan shows progress per chunk. A lost datagram only makes the count lag: the chunk's end sets it
exactly.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from typing import Final

#: How often a task reports at most.
SEND_EVERY_S: Final = 0.25
_COUNT: Final = struct.Struct("!I")


class ProgressListener:
    """The driver's end: a UDP socket on 127.0.0.1 (a free port); :meth:`receive` sums what arrived."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        host, port = self._socket.getsockname()[:2]
        self.address: tuple[str, int] = (str(host), int(port))

    def receive(self, timeout_s: float) -> int:
        """Ledgers reported finished within ``timeout_s`` seconds (returns early once something arrived)."""
        total = 0
        self._socket.settimeout(timeout_s)
        try:
            while True:
                data = self._socket.recv(64)
                if len(data) == _COUNT.size:
                    total += _COUNT.unpack(data)[0]
                self._socket.settimeout(0)  # drain what else is queued, without waiting
        except (TimeoutError, BlockingIOError):
            return total

    def close(self) -> None:
        """Close the socket."""
        self._socket.close()

    def __enter__(self) -> ProgressListener:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class ProgressSender:
    """A task's end: :meth:`finished` counts ledgers, sent at most every :data:`SEND_EVERY_S`; :meth:`flush` at the
    end. Sending never fails the task (a full or closed socket only loses the count)."""

    def __init__(self, address: tuple[str, int] | None) -> None:
        self._address = address
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if address is not None else None
        self._unsent = 0
        self._last = time.monotonic()

    def finished(self, ledgers: int = 1) -> None:
        """``ledgers`` more have their final outcome."""
        self._unsent += ledgers
        if time.monotonic() - self._last >= SEND_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Send what is counted and not sent yet."""
        self._last = time.monotonic()
        if self._socket is None or self._address is None or not self._unsent:
            return
        with contextlib.suppress(OSError):
            self._socket.sendto(_COUNT.pack(min(self._unsent, 0xFFFFFFFF)), self._address)
        self._unsent = 0

    def close(self) -> None:
        """Flush, then close the socket."""
        self.flush()
        if self._socket is not None:
            self._socket.close()
