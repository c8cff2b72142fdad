"""The ZooKeeper side of ``scrutiny scan --fix``: read the recovery state, write under-replication marks.

The plan itself is pure (:mod:`scrutiny.core.repair_plan`); the record of what was done is the ``repair_actions``
table (:mod:`scrutiny.connectors.tables.repair_log`); :mod:`scrutiny.streaming.scan.fix` runs the sequence. What this
module guarantees:

* **Reads only, except marks.** :func:`read_recovery_state` only reads. :func:`apply_repairs` creates
  nothing but the plan's mark nodes and, through kazoo's ``makepath``, their missing parent
  directories, with the ACL the client is configured with (creator-all with ``zookeeper.enable_security``,
  else the open ACL), as BookKeeper does. It never sets, deletes or re-writes a node.
* **Never touches a marked ledger.** A mark that exists when the plan is made is skipped; one
  that appears between the plan and the write makes the create fail with NodeExistsError,
  which is recorded as already marked (the node keeps its bytes and version).
* **Honours a disabled auto-recovery.** Unless the plan is forced, the ``disable`` node is
  checked again just before the first write; if it exists then, nothing is written.
* **One ledger's error is not another's.** A ZooKeeper error while marking one ledger is recorded
  as FAILED with its reason and the next ledger is tried.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError

from scrutiny.connectors.zookeeper.tree import mark_leaves
from scrutiny.core.repair_plan import (
    REASON_MARKED_BEFORE,
    REASON_MARKED_CONCURRENTLY,
    PlanAction,
    PlannedRepair,
    RepairAction,
    RepairError,
    RepairOutcome,
    RepairPlan,
)
from scrutiny.core.zk_paths import LedgerManager, ledger_path, underreplication_disable_path

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- ZooKeeper


def read_recovery_state(client: KazooClient, root: str) -> tuple[bool, set[int]]:
    """(auto-recovery disabled?, ids of the ledgers marked under-replicated) under ledgers root ``root``.

    Disabled means ``<root>/underreplication/disable`` exists. Marks are the canonical leaves
    ``<root>/underreplication/ledgers/<h>/<h>/<h>/<h>/urL%010d`` (any other node is ignored);
    a missing tree means no marks. Reads only; retried with the client's command retry.
    Raises PathError for an invalid root and kazoo's errors when ZooKeeper cannot be read.
    """
    disable_path = underreplication_disable_path(root=root)

    def read() -> tuple[bool, set[int]]:
        disabled = client.exists(disable_path) is not None
        return disabled, {ledger_id for ledger_id, _ in mark_leaves(client, root)}

    result: tuple[bool, set[int]] = client.retry(read)
    return result


def apply_repairs(
    client: KazooClient, plan: RepairPlan, *, manager: LedgerManager = LedgerManager.HIERARCHICAL
) -> list[RepairAction]:
    """Carry out ``plan``; what happened to each of its ledgers, in the plan's order.

    SKIP_ALREADY_MARKED becomes ALREADY_MARKED and SKIP_DISABLED becomes SKIPPED_DISABLED with
    no ZooKeeper access. For the MARK items, unless the plan is forced, the disable node is read
    once first: if it now exists they all become SKIPPED_DISABLED (and if it cannot be read, FAILED).
    Each ledger's znode is read again first: deleted, or at another version than the scan checked, it gets
    SKIPPED_STALE (a scan that ran for an hour must not mark a ledger re-replicated or deleted meanwhile). Each
    mark is then created with its planned bytes (``makepath``, the client's ACL, the
    client's command retry): MARKED; NodeExistsError gives ALREADY_MARKED (unless the node holds
    exactly the planned bytes, i.e. this create landed before a lost connection was retried);
    any other ZooKeeper error gives FAILED with the error as reason, and the next ledger is tried.
    """
    blocked: str | None = None
    if plan.marks and not plan.force:
        try:
            if client.retry(client.exists, plan.disable_path) is not None:
                blocked = _disabled_reason(plan.disable_path, after_plan=True)
        except KazooException as error:
            failure = f"could not check {plan.disable_path}: {describe_error(error)}"
            return [
                _planned_outcome(item, plan.disable_path) or _action(item, RepairOutcome.FAILED, failure)
                for item in plan.items
            ]
    actions: list[RepairAction] = []
    for item in plan.items:
        outcome = _planned_outcome(item, plan.disable_path)
        if outcome is None:
            if blocked:
                outcome = _action(item, RepairOutcome.SKIPPED_DISABLED, blocked)
            else:
                outcome = _create_mark(client, item, ledger_path(item.ledger_id, manager=manager, root=plan.root))
        actions.append(outcome)
    return actions


def _action(item: PlannedRepair, outcome: RepairOutcome, reason: str | None = None) -> RepairAction:
    return RepairAction(item.ledger_id, outcome, item.missing_bookies, item.path, reason)


def _disabled_reason(disable_path: str, *, after_plan: bool = False) -> str:
    when = " (it appeared after the plan was made)" if after_plan else ""
    return f"auto-recovery is disabled: {disable_path} exists{when}"


def _planned_outcome(item: PlannedRepair, disable_path: str) -> RepairAction | None:
    """The outcome of an item the plan already decides without ZooKeeper; None for MARK."""
    if item.action is PlanAction.SKIP_ALREADY_MARKED:
        return _action(item, RepairOutcome.ALREADY_MARKED, REASON_MARKED_BEFORE)
    if item.action is PlanAction.SKIP_DISABLED:
        return _action(item, RepairOutcome.SKIPPED_DISABLED, _disabled_reason(disable_path))
    return None


def _create_mark(client: KazooClient, item: PlannedRepair, metadata_path: str) -> RepairAction:
    """Create one mark node, once the ledger's znode was read again and is still the version the scan checked
    (else SKIPPED_STALE: deleted or changed meanwhile, perhaps re-replicated); never overwrites an existing mark."""
    if item.data is None:
        raise RepairError(f"ledger {item.ledger_id}: a MARK item has no node bytes")
    try:
        stat = client.retry(client.exists, metadata_path)
        if stat is None:
            return _action(item, RepairOutcome.SKIPPED_STALE, "the ledger was deleted after the scan checked it")
        if item.version is not None and stat.version != item.version:
            why = (
                f"its metadata changed after the scan checked it (version {item.version}, now {stat.version}; "
                "perhaps re-replicated): scan it again"
            )
            return _action(item, RepairOutcome.SKIPPED_STALE, why)
        client.retry(client.create, item.path, item.data, makepath=True)
    except NodeExistsError:
        if _holds(client, item.path, item.data):
            return _action(item, RepairOutcome.MARKED)
        return _action(item, RepairOutcome.ALREADY_MARKED, REASON_MARKED_CONCURRENTLY)
    except KazooException as error:
        log.warning(
            "could not mark ledger %d under-replicated at %s: %s", item.ledger_id, item.path, describe_error(error)
        )
        return _action(item, RepairOutcome.FAILED, describe_error(error))
    return _action(item, RepairOutcome.MARKED)


def _holds(client: KazooClient, path: str, data: bytes) -> bool:
    """True if ``path`` holds exactly ``data`` now (False if it cannot be read)."""
    try:
        found, _ = client.retry(client.get, path)
    except KazooException:
        return False
    return bytes(found) == data


def describe_error(error: BaseException) -> str:
    """An error on one line for a record or a log: its type, and its message when it has one."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text and text != "((), {})" else type(error).__name__
