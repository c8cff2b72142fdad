"""ZooKeeper 3.6+ requests that kazoo 2.11 does not have, in its request-object form.

kazoo sends any object with a ``type`` (the opcode), ``serialize()`` and a ``deserialize(buffer,
offset)`` class method through ``KazooClient._call``; these are two such objects. Paths must be
given in full (a client's chroot included).

* :class:`AddWatch` (opcode 106): a persistent, optionally recursive, watch.
* :class:`MultiRead` (opcode 22): many getData requests in one round trip, each answered on its
  own (a node that does not exist is an error for that node only).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from kazoo.protocol.serialization import multiheader_struct, read_buffer, stat_struct, write_string
from kazoo.protocol.states import ZnodeStat

_GET_DATA = 4
_ERROR = -1
_INT = struct.Struct(">i")


class AddWatchMode(IntEnum):
    """ZooKeeper's addWatch modes."""

    PERSISTENT = 0
    PERSISTENT_RECURSIVE = 1


@dataclass(frozen=True)
class AddWatch:
    """The addWatch request (opcode 106): the path and the mode; the reply has no body."""

    path: str
    mode: AddWatchMode
    type = 106

    def serialize(self) -> bytearray:
        """The request body as ZooKeeper's jute encoding: string path, int mode."""
        body = bytearray(write_string(self.path))
        body.extend(_INT.pack(int(self.mode)))
        return body

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> bool:
        """The reply carries nothing beyond its header."""
        return True


@dataclass(frozen=True)
class MultiRead:
    """getData of every path in one request; the reply is one result per path, in order.

    A result is ``(data, ZnodeStat)``, or ZooKeeper's error code (an int, e.g. -101 for a node
    that does not exist).
    """

    paths: tuple[str, ...]
    type = 22

    def serialize(self) -> bytearray:
        """Each operation as a multi header (getData, not done) with its path and no watch; then the end."""
        body = bytearray()
        for path in self.paths:
            body += multiheader_struct.pack(_GET_DATA, False, -1) + write_string(path) + b"\x00"
        body += multiheader_struct.pack(-1, True, -1)
        return body

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[tuple[bytes, ZnodeStat] | int]:
        """The results, in the order of the paths."""
        results: list[tuple[bytes, ZnodeStat] | int] = []
        while True:
            kind, done, _ = multiheader_struct.unpack_from(buffer, offset)
            offset += multiheader_struct.size
            if done:
                return results
            if kind == _GET_DATA:
                data, offset = read_buffer(buffer, offset)
                results.append((bytes(data), ZnodeStat._make(stat_struct.unpack_from(buffer, offset))))
                offset += stat_struct.size
            else:  # an error result: its code
                results.append(_INT.unpack_from(buffer, offset)[0])
                offset += _INT.size
