"""What ZooKeeper told the watcher and it has not handled yet: session states, and the nodes to read again.

kazoo's threads put, the watcher's loop takes. Memory is bounded by the tree, not by time: a node notified again
before it was read is kept once, at the place of its last notification (only its newest state matters, and it is
read when taken). Session states are few and are taken first: a suspension or a new session makes the watcher walk
the whole tree, which covers any node still waiting.
"""

from __future__ import annotations

import threading
from collections import deque


class Inbox:
    """Session states (in order) and the notified node paths (coalesced); thread-safe."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._states: deque[str] = deque()
        self._paths: dict[str, None] = {}

    def put_state(self, state: str) -> None:
        """A session state change (CONNECTED, SUSPENDED, LOST)."""
        with self._ready:
            self._states.append(state)
            self._ready.notify()

    def put_path(self, path: str) -> None:
        """A node notification; an earlier one of the same node still waiting moves here."""
        with self._ready:
            self._paths.pop(path, None)
            self._paths[path] = None
            self._ready.notify()

    def take(self, timeout_s: float, *, batch: int) -> str | list[str] | None:
        """The oldest session state, else up to ``batch`` paths in notification order; None after ``timeout_s``."""
        with self._ready:
            if not self._ready.wait_for(lambda: self._states or self._paths, timeout=timeout_s):
                return None
            if self._states:
                return self._states.popleft()
            taken = []
            for path in self._paths:
                taken.append(path)
                if len(taken) >= batch:
                    break
            for path in taken:
                del self._paths[path]
            return taken

    def take_state(self, timeout_s: float) -> str | None:
        """The oldest session state, leaving the paths; None after ``timeout_s``."""
        with self._ready:
            if not self._ready.wait_for(lambda: self._states, timeout=timeout_s):
                return None
            return self._states.popleft()

    def clear(self) -> None:
        """Forget everything waiting (a new leadership starts with a walk of the whole tree)."""
        with self._ready:
            self._states.clear()
            self._paths.clear()

    def waiting_paths(self) -> int:
        """Nodes notified and not read yet."""
        with self._ready:
            return len(self._paths)
