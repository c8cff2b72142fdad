"""A batch's rows appended to a table without Spark: delta-rs, exactly once per app transaction.

The streaming job writes ``open_violations`` (a MERGE) through Delta Lake on Spark
(:mod:`scrutiny.streaming.delta_writer`), and its appends here: every batch's row in ``checker_runs`` (and, every
``checker.verification_ages_seconds``, its ``verification_ages`` rows), the only write of an idle checker's heartbeat,
and its rows of ``ledger_checks``, ``violations`` and ``rejected_events``. Delta on Spark spends about a second of CPU
on such an idempotent append (it rebuilds the table's state to find the app's last version, then plans, generates
code for, writes and commits the rows as Spark jobs); delta-rs makes the same commit in a few hundredths of a second.
:func:`append_once` makes it the way Delta on Spark would:

* **Exactly once.** The commit carries Delta's idempotent-write record (a ``txn`` action: app id and version), the one
  Spark's ``txnAppId``/``txnVersion`` options write, and nothing is written when the table already records that
  version or a later one for the app. Either engine then skips what the other wrote.
* **Only on tables both engines write alike.** Reader protocol 1 and writer protocol 2 at most (what Scrutiny creates:
  append-only and NOT NULL, no table features): anything newer is declined, not attempted.
* **Declined, not forced.** ``None`` tells the caller to write through Spark instead: the table's protocol, or a
  table holding ``max_files`` files or more (Spark's auto compaction only runs after Spark's writes, so the files
  these appends add are compacted by the next Spark write). A commit delta-rs cannot make raises its error.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

__all__ = ["MAX_WRITER_PROTOCOL", "append_once"]

#: The newest writer protocol appended to here: 2 (append-only, NOT NULL), the tables Scrutiny creates.
MAX_WRITER_PROTOCOL: Final = 2


def append_once(uri: str, rows: pa.Table, *, app_id: str, version: int, max_files: int | None = None) -> bool | None:
    """Append ``rows`` to the Delta table at ``uri`` (a local path) as app ``app_id``'s ``version``, once.

    True: committed now; False: the table already records ``version`` (or a later one) for the app, nothing written;
    None: declined (see the module docstring), nothing written: write it through Spark. delta-rs's errors are raised
    (``deltalake.exceptions.DeltaError``, ``OSError``, pyarrow's): whether a failed commit was made, the app's record
    in the table tells the next writer.
    """
    table = DeltaTable(uri)
    protocol = table.protocol()
    if protocol.min_reader_version > 1 or protocol.min_writer_version > MAX_WRITER_PROTOCOL:
        return None
    held = table.transaction_version(app_id)
    if held is not None and held >= version:
        return False
    if max_files is not None and len(table.file_uris()) >= max_files:
        return None
    transaction = Transaction(app_id=app_id, version=version)
    write_deltalake(table, rows, mode="append", commit_properties=CommitProperties(app_transactions=[transaction]))
    return True
