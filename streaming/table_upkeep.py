"""Keeping the tables the job writes small in files, so that a write costs the same after weeks as after minutes.

Every micro-batch adds a file to each table it writes, and every idempotent write (``txnAppId``/``txnVersion``)
makes Delta 4.4 rebuild the table's state, one row per file: a checker that writes a batch every few seconds adds
tens of thousands of files a day, and each write grows slower with them (bench/README.md, "The table's file count").
Two of Delta's own mechanisms keep the count bounded:

* **Auto compaction** (``spark.databricks.delta.autoCompact.*``, set on the writer's own sessions): once
  ``compact_min_files`` small files have piled up in a table, the write that added the last one rewrites them as one
  file in a commit of its own (Delta's OPTIMIZE: the rows are the same, marked as no data change, so readers of new
  rows and Delta streaming readers skip it). It runs inside that write, after the batch's own commit; a compaction
  that fails is logged by Delta and leaves the write as committed (the next write tries again). Files grow to about
  ``compact_file_mb``; one of half of that or more is not rewritten again, which bounds what a compaction rewrites.
* **A short retention of replaced files** (the table property ``delta.deletedFileRetentionDuration``): the files a
  compaction or a MERGE replaced stay in the table's state as removals until this retention has passed (a week by
  Delta's default), and each costs a write nearly what a live file does. It is also the default retention of a
  ``VACUUM`` without ``RETAIN``.

Neither changes what any table holds: the rows, their order of commits and Delta's idempotent-write records stay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from pyspark.sql import SparkSession

from scrutiny.core.errors import ConfigError

__all__ = ["RETENTION_PROPERTY", "TableUpkeep"]

#: The table property that says how long replaced files stay in a table's state.
RETENTION_PROPERTY: Final = "delta.deletedFileRetentionDuration"

_AUTO_COMPACT: Final = "spark.databricks.delta.autoCompact.enabled"
_MIN_FILES: Final = "spark.databricks.delta.autoCompact.minNumFiles"
#: Auto compaction's target file size; files of half of it or more are left as they are.
_FILE_SIZE: Final = "spark.databricks.delta.autoCompact.maxFileSize"


class UpkeepSettings(Protocol):
    """The keys of ``[checker]`` the upkeep follows (the settings' checker section has them)."""

    @property
    def compact_min_files(self) -> int: ...
    @property
    def removed_file_retention_hours(self) -> float: ...
    @property
    def compact_file_mb(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TableUpkeep:
    """How the writer keeps its tables' file counts down (``checker.compact_min_files``, ``checker.compact_file_mb``
    and ``checker.removed_file_retention_hours``); 0 turns the compaction or the retention off (the table's own
    setting, Delta's default)."""

    compact_min_files: int = 0
    removed_file_retention_hours: float = 0.0
    compact_file_mb: int = 16

    def __post_init__(self) -> None:
        if self.compact_min_files < 0 or self.compact_min_files == 1:
            raise ConfigError(f"checker.compact_min_files must be 0 (off) or at least 2, not {self.compact_min_files}")
        if self.compact_file_mb < 1:
            raise ConfigError(f"checker.compact_file_mb must be at least 1, not {self.compact_file_mb}")
        hours = self.removed_file_retention_hours
        if not hours >= 0 or hours == float("inf"):
            raise ConfigError(f"checker.removed_file_retention_hours must be a number of hours ≥ 0, not {hours!r}")

    @classmethod
    def of(cls, checker: UpkeepSettings) -> TableUpkeep:
        """The upkeep the ``[checker]`` settings ask for."""
        return cls(checker.compact_min_files, checker.removed_file_retention_hours, checker.compact_file_mb)

    @property
    def retention(self) -> str | None:
        """The retention property's value (in whole seconds, at least one), or None when it is left as it is."""
        if not self.removed_file_retention_hours:
            return None
        return f"interval {max(1, round(self.removed_file_retention_hours * 3600))} seconds"

    def properties(self) -> Mapping[str, str]:
        """The table properties every table written with this upkeep carries."""
        retention = self.retention
        return {} if retention is None else {RETENTION_PROPERTY: retention}

    def apply_to(self, session: SparkSession) -> None:
        """Turn Delta's auto compaction on (or off) for the writes of ``session`` (a writer's own session)."""
        session.conf.set(_AUTO_COMPACT, "true" if self.compact_min_files else "false")
        if self.compact_min_files:
            session.conf.set(_MIN_FILES, str(self.compact_min_files))
            session.conf.set(_FILE_SIZE, str(self.compact_file_mb * 1024 * 1024))
