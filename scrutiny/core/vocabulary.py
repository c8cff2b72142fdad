"""The closed vocabulary of checks: every category and severity Scrutiny reports.

This module is the one place that defines them; tables, views and the CLI all refer here.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

#: The ``ledger_id`` of cluster-level findings (``BOOKIE_LOST``, ``AUTORECOVERY_DISABLED``, ``NO_AUDITOR``): they
#: concern no one ledger.
CLUSTER_LEDGER_ID: Final = -1


class Severity(StrEnum):
    """How bad a violation is. Ordered: ``CRITICAL`` > ``WARNING`` > ``INFO``."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """0 for info, 1 for warning, 2 for critical: compare severities with this."""
        return _RANK[self]


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class Category(StrEnum):
    """What was violated (docs/architecture.md, "The findings")."""

    NO_REPLICA = "NO_REPLICA"
    BELOW_ACK_QUORUM = "BELOW_ACK_QUORUM"
    BELOW_WRITE_QUORUM = "BELOW_WRITE_QUORUM"
    MISSING_REPLICA = "MISSING_REPLICA"
    ENTRIES_BEYOND_LAST_ENTRY = "ENTRIES_BEYOND_LAST_ENTRY"
    PLACEMENT_FAIL = "PLACEMENT_FAIL"
    PLACEMENT_SOFT = "PLACEMENT_SOFT"
    UNDER_REPLICATION_STUCK = "UNDER_REPLICATION_STUCK"
    BOOKIE_UNRESPONSIVE = "BOOKIE_UNRESPONSIVE"
    BOOKIE_NOT_REGISTERED = "BOOKIE_NOT_REGISTERED"
    METADATA_UNREADABLE = "METADATA_UNREADABLE"
    ACK_QUORUM_ONE = "ACK_QUORUM_ONE"
    CHECK_OVERDUE = "CHECK_OVERDUE"
    BOOKIE_LOST = "BOOKIE_LOST"
    UNDER_REPLICATION_NOT_MARKED = "UNDER_REPLICATION_NOT_MARKED"
    RECOVERY_STALLED = "RECOVERY_STALLED"
    OPEN_LEDGER_STALLED = "OPEN_LEDGER_STALLED"
    LEDGER_IN_LIMBO = "LEDGER_IN_LIMBO"
    AUTORECOVERY_DISABLED = "AUTORECOVERY_DISABLED"
    NO_AUDITOR = "NO_AUDITOR"
    ORPHAN_LEDGER = "ORPHAN_LEDGER"


#: The severity of each category whose severity does not depend on the evidence.
#: ``MISSING_REPLICA`` takes the ledger's worst replica severity and
#: ``ENTRIES_BEYOND_LAST_ENTRY`` depends on whether an entry after the end has AQ copies in its write set;
#: ``AUTORECOVERY_DISABLED`` is a warning that turns critical once auto-recovery has been off past its grace.
FIXED_SEVERITY: dict[Category, Severity] = {
    Category.NO_REPLICA: Severity.CRITICAL,
    Category.BELOW_ACK_QUORUM: Severity.CRITICAL,
    Category.BELOW_WRITE_QUORUM: Severity.WARNING,
    Category.PLACEMENT_FAIL: Severity.WARNING,
    Category.PLACEMENT_SOFT: Severity.INFO,
    Category.UNDER_REPLICATION_STUCK: Severity.CRITICAL,
    Category.BOOKIE_UNRESPONSIVE: Severity.WARNING,
    Category.BOOKIE_NOT_REGISTERED: Severity.WARNING,
    Category.METADATA_UNREADABLE: Severity.CRITICAL,
    Category.ACK_QUORUM_ONE: Severity.INFO,
    Category.CHECK_OVERDUE: Severity.WARNING,
    Category.BOOKIE_LOST: Severity.WARNING,
    Category.UNDER_REPLICATION_NOT_MARKED: Severity.CRITICAL,
    Category.RECOVERY_STALLED: Severity.CRITICAL,
    Category.OPEN_LEDGER_STALLED: Severity.WARNING,
    Category.LEDGER_IN_LIMBO: Severity.WARNING,
    Category.NO_AUDITOR: Severity.WARNING,
    Category.ORPHAN_LEDGER: Severity.WARNING,
}


#: The categories that can mean data loss (docs/architecture.md, "Data loss"): some acknowledged entry cannot be
#: read now. ``NO_REPLICA``: an entry has no copy; ``ENTRIES_BEYOND_LAST_ENTRY`` when critical: acknowledged entries
#: lie beyond the close, where no reader looks; ``METADATA_UNREADABLE``: no reader can open the ledger at all.
#: ``BELOW_ACK_QUORUM`` is not among them: every entry still has a copy (it is at risk, not lost).
DATA_LOSS_CATEGORIES: frozenset[Category] = frozenset(
    {Category.NO_REPLICA, Category.ENTRIES_BEYOND_LAST_ENTRY, Category.METADATA_UNREADABLE}
)


def is_data_loss(category: Category, severity: Severity) -> bool:
    """Whether a finding means data loss: the one definition the report, the views and the dashboard use."""
    return severity is Severity.CRITICAL and category in DATA_LOSS_CATEGORIES
