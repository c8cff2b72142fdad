"""ZooKeeper 3.6+ persistent (recursive) watches on top of kazoo, which lacks them.

One persistent recursive watch on the ledgers root sees every node created, changed or
deleted below it, without a watch per ledger. kazoo 2.11 has no ``addWatch`` call, so this
module adds the one request it needs (opcode 106, path + mode) and routes the notifications,
which kazoo would otherwise drop because no one-shot watcher is registered for their paths, to
the registered callbacks.

Guarantees and limits:

* callbacks run on kazoo's event thread, in the order ZooKeeper sent the notifications;
* a persistent watch lives as long as the connection: after any reconnect or session loss the
  caller must add it again (:meth:`PersistentWatchClient.add_persistent_watch`) and resync,
  since changes made while disconnected produce no notification. The watcher does exactly
  that on every ``CONNECTED`` transition.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

from scrutiny.connectors.zookeeper.requests import AddWatch, AddWatchMode

WatchCallback = Callable[[WatchedEvent], None]


@dataclass(frozen=True)
class _Persistent:
    path: str  # full path, chroot included
    recursive: bool
    callback: WatchCallback

    def covers(self, path: str) -> bool:
        if path == self.path:
            return True
        if not self.recursive:
            return False
        prefix = self.path if self.path.endswith("/") else self.path + "/"
        return path.startswith(prefix)


class _DataWatchers(defaultdict[str, set[Any]]):
    """kazoo's map of one-shot data watchers, which also hands out the persistent ones for a path."""

    def __init__(self, persistent: list[_Persistent]) -> None:
        super().__init__(set)
        self.persistent = persistent

    def pop(self, path: str, default: Any = None) -> Any:
        one_shot = super().pop(path, None)
        matching = [p.callback for p in self.persistent if p.covers(path)]
        if one_shot is None and not matching:
            return default if default is not None else []
        return [*(one_shot or ()), *matching]


class PersistentWatchClient(KazooClient):  # type: ignore[misc]
    """A KazooClient that can also hold persistent and persistent recursive watches."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._persistent: list[_Persistent] = []
        super().__init__(*args, **kwargs)
        self._data_watchers = _DataWatchers(self._persistent)

    def _reset_watchers(self) -> None:
        super()._reset_watchers()
        self._data_watchers = _DataWatchers(self._persistent)

    def add_persistent_watch(self, path: str, callback: WatchCallback, *, recursive: bool = True) -> None:
        """Register ``callback`` and ask the server for the watch; blocks until the server agrees.

        Adding a watch again for the same path (after a reconnect) replaces the callback.
        """
        full = self.chroot + path if self.chroot else path
        self._persistent[:] = [p for p in self._persistent if p.path != full]
        self._persistent.append(_Persistent(full, recursive, callback))
        mode = AddWatchMode.PERSISTENT_RECURSIVE if recursive else AddWatchMode.PERSISTENT
        result = self.handler.async_result()
        self._call(AddWatch(full, mode), result)
        result.get(timeout=self._session_timeout_seconds())

    def remove_persistent_watches(self) -> None:
        """Stop routing notifications to the callbacks (the server-side watch ends with the connection)."""
        self._persistent.clear()

    def _session_timeout_seconds(self) -> float:
        return float(self._session_timeout) / 1000.0
