"""Ledger directories laid out like DbLedgerStorage's, written read-write as the bookie does (for the agent's tests)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rocksdict import DBCompressionType, Options, Rdict, WriteBatch

from scrutiny.agent.dbstorage import entry_key, ledger_key
from scrutiny.proto import bookie_agent_pb2 as pb

#: The storage-flags key of a ``ledgers`` database: a negative id, never a ledger.
FLAGS_KEY = bytes.fromhex("ffffffffffff1103")


class FakeBookie:
    """Ledger directories laid out like DbLedgerStorage's, written through primary RocksDB instances."""

    def __init__(self, root: Path, directories: int) -> None:
        self.dirs = [root / f"ledgers{i}" for i in range(directories)]
        self._dbs: dict[tuple[int, str], Rdict] = {}
        self.open()

    def open(self) -> None:
        for index, directory in enumerate(self.dirs):
            for name, compression in (("ledgers", DBCompressionType.snappy()), ("locations", DBCompressionType.lz4())):
                path = directory / "current" / name
                path.parent.mkdir(parents=True, exist_ok=True)
                options = Options(raw_mode=True)
                options.create_if_missing(True)
                options.set_compression_type(compression)
                self._dbs[(index, name)] = Rdict(str(path), options)
                (path / "rocksdict-config.json").unlink()  # rocksdict's file; a bookie has none

    def db(self, directory: int, name: str) -> Rdict:
        return self._dbs[(directory, name)]

    def home(self, ledger_id: int) -> int:
        return ledger_id % len(self.dirs)

    def put_record(
        self, ledger_id: int, *, fenced: bool = False, limbo: bool = False, key16: bool = False, home: int | None = None
    ) -> None:
        key = ledger_key(ledger_id) + (bytes(7) + b"\x01" if key16 else b"")
        value = pb.LedgerData(exists=True, fenced=fenced, master_key=b"pw", limbo=limbo).SerializeToString()
        self.db(self.home(ledger_id) if home is None else home, "ledgers")[key] = value

    def put_entries(self, ledger_id: int, entries: Sequence[int], *, home: int | None = None) -> None:
        batch = WriteBatch(raw_mode=True)
        for entry in entries:
            batch.put(entry_key(ledger_id, entry), ((entry << 20) % 2**64).to_bytes(8, "big"))  # a location (unread)
        self.db(self.home(ledger_id) if home is None else home, "locations").write(batch)

    def flush(self) -> None:
        for db in self._dbs.values():
            db.flush()

    def close(self) -> None:
        for db in self._dbs.values():
            db.close()
        self._dbs.clear()

    def restart(self) -> None:
        self.close()
        self.open()
