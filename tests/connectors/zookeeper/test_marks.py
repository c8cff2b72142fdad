"""The fix against a real ZooKeeper: marks BookKeeper can read, nothing else written, and the repair_actions log.

The marks (:mod:`scrutiny.connectors.zookeeper.marks`), the log (:mod:`scrutiny.connectors.tables.repair_log`) and
the fix that joins them (:mod:`scrutiny.streaming.scan.fix`) are tested together here, as the fix uses them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import ACL, Id, Permissions
from pyspark.sql import SparkSession

from scrutiny.connectors.tables.repair_log import read_repair_log, repair_log_rows
from scrutiny.connectors.tables.schemas import REPAIR_ACTIONS_SCHEMA
from scrutiny.connectors.zookeeper.marks import apply_repairs, read_recovery_state
from scrutiny.core.repair_plan import (
    PlanAction,
    RepairAction,
    RepairCandidate,
    RepairError,
    RepairOutcome,
    plan_repairs,
    render_plan,
    repair_candidates,
)
from scrutiny.core.zk_paths import ledger_path
from scrutiny.core.zk_records import UnderReplicationMark, format_underreplication_mark, parse_underreplication_mark
from scrutiny.streaming.scan.fix import epoch_ms, fix_under_replicated

pytestmark = pytest.mark.integration

ROOT = "/ledgers"
NOW = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
NOW_MS = 1_772_366_400_123
DISABLE = "/ledgers/underreplication/disable"
LONG_ID = 2**40 + 7
#: BookKeeper's paths, written out: the id's four 16-bit slices in lowercase hex, then urL%010d.
PATHS = {
    5: "/ledgers/underreplication/ledgers/0000/0000/0000/0005/urL0000000005",
    7: "/ledgers/underreplication/ledgers/0000/0000/0000/0007/urL0000000007",
    9: "/ledgers/underreplication/ledgers/0000/0000/0000/0009/urL0000000009",
    70000: "/ledgers/underreplication/ledgers/0000/0000/0001/1170/urL0000070000",
    LONG_ID: "/ledgers/underreplication/ledgers/0000/0100/0000/0007/urL1099511627783",
}
ROWS: list[tuple[int, str, str | None]] = [
    (5, "MISSING_REPLICA", "bk2:3181"),
    (5, "MISSING_REPLICA", "bk1:3181"),
    (5, "MISSING_REPLICA", "bk2:3181"),
    (7, "MISSING_REPLICA", "bk3:3181"),
    (70000, "MISSING_REPLICA", "bk1:3181"),
    (LONG_ID, "MISSING_REPLICA", "bk4:3181"),
    (11, "BOOKIE_UNRESPONSIVE", "bk1:3181"),
    (12, "PLACEMENT_FAIL", None),
    (13, "NO_REPLICA", None),
]
EXPECTED_REPLICAS = {5: ("bk1:3181", "bk2:3181"), 7: ("bk3:3181",), 70000: ("bk1:3181",), LONG_ID: ("bk4:3181",)}

Dump = dict[str, tuple[Any, ...]]


def dump(client: KazooClient, path: str = "/") -> Dump:
    """Every node under ``path``: data, versions, zxids and ACL (everything a write could change)."""
    out: Dump = {}
    data, stat = client.get(path)
    acl, _ = client.get_acls(path)
    out[path] = (bytes(data), stat.version, stat.cversion, stat.aversion, stat.mzxid, stat.pzxid, tuple(acl))
    for child in sorted(client.get_children(path)):
        out.update(dump(client, ("" if path == "/" else path) + "/" + child))
    return out


def checked_ledgers(client: KazooClient) -> None:
    """The ledgers of ROWS exist, as when the scan checked them (version 0)."""
    for ledger_id, _, _ in ROWS:
        path = ledger_path(ledger_id, root=ROOT)
        if client.exists(path) is None:
            client.create(path, b"metadata-%d" % ledger_id, makepath=True)


def seed_cluster(client: KazooClient) -> None:
    """A BookKeeper-like tree: ledgers, registrations, the under-replication subtree and one mark (ledger 7)."""
    client.create("/ledgers/00/0000/L0005", b"metadata-5", makepath=True)
    checked_ledgers(client)
    client.create("/ledgers/available/bk1:3181", b"", makepath=True)
    client.create("/ledgers/underreplication/locks", b"", makepath=True)
    client.create("/ledgers/underreplication/lostBookieRecoveryDelay", b"30")
    client.create(PATHS[7], b'replica: "bk9:3181"\nctime: 1\n', makepath=True)


def fix_plan(client: KazooClient, *, force: bool = False) -> Any:
    checked_ledgers(client)
    disabled, marked = read_recovery_state(client, ROOT)
    return plan_repairs(
        repair_candidates(ROWS), marked=marked, disabled=disabled, force=force, now_ms=NOW_MS, root=ROOT
    )


def test_the_fix_time_in_ms_is_the_marks_ctime() -> None:
    assert epoch_ms(NOW) == NOW_MS


def test_read_recovery_state_finds_only_canonical_marks(zk_client: KazooClient) -> None:
    assert read_recovery_state(zk_client, ROOT) == (False, set())
    for ledger_id in (5, 70000, LONG_ID):
        zk_client.create(PATHS[ledger_id], b"", makepath=True)
    base = "/ledgers/underreplication/ledgers"
    for junk in (
        f"{base}/urL0000000003",  # a leaf at the wrong depth
        f"{base}/0000/0000/0000/000A/urL0000000010",  # upper-case hex
        f"{base}/0000/0000/0000/0004/urL0000000005",  # slices that disagree with the leaf
        f"{base}/0000/0000/0000/0006/urL6",  # non-canonical padding
        f"{base}/0000/0000/0000/0006/foo/urL0000000006",  # too deep
    ):
        zk_client.create(junk, b"", makepath=True)
    zk_client.create("/ledgers/underreplication/locks/urL0000000008", b"", makepath=True)
    assert read_recovery_state(zk_client, ROOT) == (False, {5, 70000, LONG_ID})
    zk_client.create(DISABLE, b"")
    assert read_recovery_state(zk_client, ROOT) == (True, {5, 70000, LONG_ID})
    zk_client.create("/other/underreplication/ledgers/0000/0000/0000/0001/urL0000000001", b"", makepath=True)
    assert read_recovery_state(zk_client, "/other") == (False, {1})


def test_marks_are_bookkeepers_and_nothing_else_is_written(zk_client: KazooClient) -> None:
    seed_cluster(zk_client)
    existing_mark = zk_client.get(PATHS[7])
    before = dump(zk_client)
    plan = fix_plan(zk_client)
    assert [(i.ledger_id, i.action) for i in plan.items] == [
        (5, PlanAction.MARK),
        (7, PlanAction.SKIP_ALREADY_MARKED),
        (70000, PlanAction.MARK),
        (LONG_ID, PlanAction.MARK),
    ]
    actions = apply_repairs(zk_client, plan)
    assert [(a.ledger_id, a.action, a.path) for a in actions] == [
        (5, RepairOutcome.MARKED, PATHS[5]),
        (7, RepairOutcome.ALREADY_MARKED, PATHS[7]),
        (70000, RepairOutcome.MARKED, PATHS[70000]),
        (LONG_ID, RepairOutcome.MARKED, PATHS[LONG_ID]),
    ]
    for ledger_id in (5, 70000, LONG_ID):
        data, stat = zk_client.get(PATHS[ledger_id])
        mark = parse_underreplication_mark(data)
        assert (mark.replicas, mark.ctime_ms) == (EXPECTED_REPLICAS[ledger_id], NOW_MS)
        assert stat.version == 0
        assert stat.ephemeralOwner == 0  # persistent, like BookKeeper's
    # the existing mark: same bytes, same version
    data, stat = zk_client.get(PATHS[7])
    assert (data, stat.version, stat.mzxid) == (existing_mark[0], existing_mark[1].version, existing_mark[1].mzxid)
    # every node that existed keeps its data, data version and ACL; the new nodes are the marks and their parents
    after = dump(zk_client)
    for path, (data, version, _cversion, aversion, mzxid, _pzxid, acl) in before.items():
        assert after[path][0] == data and after[path][1] == version and after[path][3:5] == (aversion, mzxid)
        assert after[path][6] == acl
    new_marks = {PATHS[5], PATHS[70000], PATHS[LONG_ID]}
    ancestors = {m.rsplit("/", k)[0] for m in new_marks for k in range(1, 5)}
    assert set(after) - set(before) == new_marks | (ancestors - set(before))
    assert read_recovery_state(zk_client, ROOT) == (False, {5, 7, 70000, LONG_ID})


def test_a_mark_that_appears_after_the_plan_is_left_alone(zk_client: KazooClient) -> None:
    plan = fix_plan(zk_client)
    raced = format_underreplication_mark(UnderReplicationMark(("bk9:3181",), 42))
    zk_client.create(PATHS[70000], raced, makepath=True)
    zk_client.set(PATHS[70000], raced)  # version 1, to see that nothing sets it again
    actions = {a.ledger_id: a for a in apply_repairs(zk_client, plan)}
    assert actions[70000].action is RepairOutcome.ALREADY_MARKED
    assert actions[70000].reason is not None and "between the plan and the write" in actions[70000].reason
    data, stat = zk_client.get(PATHS[70000])
    assert (data, stat.version) == (raced, 1)
    assert {lid: a.action for lid, a in actions.items()} == {
        5: RepairOutcome.MARKED,
        7: RepairOutcome.MARKED,
        70000: RepairOutcome.ALREADY_MARKED,
        LONG_ID: RepairOutcome.MARKED,
    }


def test_disabled_auto_recovery_blocks_everything_unless_forced(zk_client: KazooClient) -> None:
    seed_cluster(zk_client)
    zk_client.create(DISABLE, b"")
    before = dump(zk_client)
    plan = fix_plan(zk_client)
    assert [i.action for i in plan.items] == [
        PlanAction.SKIP_DISABLED,
        PlanAction.SKIP_ALREADY_MARKED,
        PlanAction.SKIP_DISABLED,
        PlanAction.SKIP_DISABLED,
    ]
    actions = apply_repairs(zk_client, plan)
    assert [a.action for a in actions] == [
        RepairOutcome.SKIPPED_DISABLED,
        RepairOutcome.ALREADY_MARKED,
        RepairOutcome.SKIPPED_DISABLED,
        RepairOutcome.SKIPPED_DISABLED,
    ]
    assert actions[0].reason is not None and DISABLE in actions[0].reason
    assert dump(zk_client) == before
    forced = apply_repairs(zk_client, fix_plan(zk_client, force=True))
    assert [a.action for a in forced] == [
        RepairOutcome.MARKED,
        RepairOutcome.ALREADY_MARKED,
        RepairOutcome.MARKED,
        RepairOutcome.MARKED,
    ]
    assert zk_client.exists(PATHS[5]) is not None
    assert zk_client.get(DISABLE)[0] == b""  # the disable node itself is untouched


def test_auto_recovery_disabled_after_the_plan_still_blocks(zk_client: KazooClient) -> None:
    plan = fix_plan(zk_client)
    assert plan.count(PlanAction.MARK) == 4
    zk_client.create(DISABLE, b"", makepath=True)
    before = dump(zk_client)
    actions = apply_repairs(zk_client, plan)
    assert {a.action for a in actions} == {RepairOutcome.SKIPPED_DISABLED}
    assert all(a.reason is not None and "after the plan" in a.reason for a in actions)
    assert dump(zk_client) == before


def test_an_error_on_one_ledger_is_recorded_and_the_others_continue(zk_client: KazooClient) -> None:
    # ledger 7's hex directory may be read but not written into: creating its mark fails with NoAuth
    read_only = [ACL(Permissions.READ | Permissions.DELETE, Id("world", "anyone"))]
    directory = PATHS[7].rsplit("/", 1)[0]
    zk_client.ensure_path(directory.rsplit("/", 1)[0])
    zk_client.create(directory, b"", acl=read_only)
    actions = apply_repairs(zk_client, fix_plan(zk_client))
    outcomes = {a.ledger_id: (a.action, a.reason) for a in actions}
    assert outcomes[7] == (RepairOutcome.FAILED, "NoAuthError")
    assert [outcomes[lid][0] for lid in (5, 70000, LONG_ID)] == [RepairOutcome.MARKED] * 3
    assert zk_client.exists(PATHS[7]) is None
    assert zk_client.exists(PATHS[LONG_ID]) is not None


def test_marks_and_new_parents_get_the_clients_acl(zk_client: KazooClient) -> None:
    zk_client.create("/ledgers/underreplication", b"", makepath=True)  # exists before: keeps its open ACL
    checked_ledgers(zk_client)
    own = [ACL(Permissions.READ | Permissions.WRITE | Permissions.CREATE | Permissions.DELETE, Id("world", "anyone"))]
    zk_client.default_acl = own
    candidates = [RepairCandidate(5, ("bk1:3181",))]
    plan = plan_repairs(candidates, marked=set(), disabled=False, force=False, now_ms=NOW_MS, root=ROOT)
    assert [a.action for a in apply_repairs(zk_client, plan)] == [RepairOutcome.MARKED]
    for path in (PATHS[5], *(PATHS[5].rsplit("/", k)[0] for k in range(1, 6))):
        assert zk_client.get_acls(path)[0] == own, path
    assert zk_client.get_acls("/ledgers/underreplication")[0][0].perms == Permissions.ALL


def test_a_dry_run_writes_nothing(spark: SparkSession, zk_client: KazooClient, tmp_path: Path) -> None:
    seed_cluster(zk_client)
    before = dump(zk_client)
    result = fix_under_replicated(
        spark, zk_client, repair_candidates(ROWS), root=ROOT, data_dir=tmp_path, run_id="dry", now=NOW, dry_run=True
    )
    assert dump(zk_client) == before
    assert list(tmp_path.iterdir()) == []
    assert (result.dry_run, result.actions, result.logged) == (True, (), 0)
    assert render_plan(result.plan).splitlines() == [
        f"MARK                ledger=5 missing=bk1:3181,bk2:3181 path={PATHS[5]}",
        f"SKIP_ALREADY_MARKED ledger=7 missing=bk3:3181 path={PATHS[7]}",
        f"MARK                ledger=70000 missing=bk1:3181 path={PATHS[70000]}",
        f"MARK                ledger={LONG_ID} missing=bk4:3181 path={PATHS[LONG_ID]}",
        "plan: ledgers=4 mark=3 skip_already_marked=1 skip_disabled=0 auto_recovery=enabled force=no",
    ]


def log_rows(data_dir: Path) -> list[tuple[Any, ...]]:
    table = read_repair_log(data_dir)
    assert table.schema == REPAIR_ACTIONS_SCHEMA
    return sorted(
        (r["run_id"], r["ledger_id"], r["action"], tuple(r["missing_bookies"]), r["path"], r["reason"], r["at"])
        for r in table.to_pylist()
    )


def expected_rows(run_id: str, actions: list[RepairAction] | tuple[RepairAction, ...]) -> list[tuple[Any, ...]]:
    return sorted((run_id, a.ledger_id, a.action.value, a.missing_bookies, a.path, a.reason, NOW) for a in actions)


def test_the_fix_records_exactly_its_actions(spark: SparkSession, zk_client: KazooClient, tmp_path: Path) -> None:
    seed_cluster(zk_client)
    first = fix_under_replicated(
        spark, zk_client, repair_candidates(ROWS), root=ROOT, data_dir=tmp_path, run_id="run-1", now=NOW, dry_run=False
    )
    assert first.logged == 4
    assert [a.action for a in first.actions] == [
        RepairOutcome.MARKED,
        RepairOutcome.ALREADY_MARKED,
        RepairOutcome.MARKED,
        RepairOutcome.MARKED,
    ]
    assert log_rows(tmp_path) == expected_rows("run-1", first.actions)
    marked_bytes = zk_client.get(PATHS[5])[0]
    # a second run finds every ledger marked and changes nothing in ZooKeeper
    before = dump(zk_client)
    second = fix_under_replicated(
        spark, zk_client, repair_candidates(ROWS), root=ROOT, data_dir=tmp_path, run_id="run-2", now=NOW, dry_run=False
    )
    assert {a.action for a in second.actions} == {RepairOutcome.ALREADY_MARKED}
    assert dump(zk_client) == before
    assert zk_client.get(PATHS[5])[0] == marked_bytes
    assert log_rows(tmp_path) == sorted(expected_rows("run-1", first.actions) + expected_rows("run-2", second.actions))


def test_repair_log_rows_carry_each_action_and_refuse_a_naive_time() -> None:
    assert repair_log_rows([], run_id="r", at=NOW).num_rows == 0
    actions = [
        RepairAction(5, RepairOutcome.MARKED, ("bk1:3181", "bk2:3181"), PATHS[5]),
        RepairAction(9, RepairOutcome.FAILED, ("bk3:3181",), PATHS[9], "NoAuthError"),
    ]
    rows = repair_log_rows(actions, run_id="r", at=NOW)
    assert rows.schema == REPAIR_ACTIONS_SCHEMA
    assert sorted(
        (r["run_id"], r["ledger_id"], r["action"], tuple(r["missing_bookies"]), r["path"], r["reason"], r["at"])
        for r in rows.to_pylist()
    ) == expected_rows("r", actions)
    with pytest.raises(RepairError, match="timezone-aware"):
        repair_log_rows(actions, run_id="r", at=NOW.replace(tzinfo=None))


def test_a_ledger_deleted_or_changed_since_the_scan_is_not_marked(zk_client: KazooClient) -> None:
    """Re-read before writing: a scan that ran for an hour must not mark a ledger re-replicated or deleted since."""
    checked_ledgers(zk_client)
    zk_client.set(ledger_path(70000, root=ROOT), b"re-replicated")  # version 1 now
    zk_client.delete(ledger_path(LONG_ID, root=ROOT))
    versions = {ledger_id: 0 for ledger_id, _, _ in ROWS}
    disabled, marked = read_recovery_state(zk_client, ROOT)
    candidates = repair_candidates(ROWS, versions)
    plan = plan_repairs(candidates, marked=marked, disabled=disabled, force=False, now_ms=NOW_MS, root=ROOT)
    actions = {a.ledger_id: a for a in apply_repairs(zk_client, plan)}
    assert actions[5].action is RepairOutcome.MARKED
    assert actions[70000].action is RepairOutcome.SKIPPED_STALE
    assert actions[70000].reason is not None and "version 0, now 1" in actions[70000].reason
    assert actions[LONG_ID].action is RepairOutcome.SKIPPED_STALE
    assert actions[LONG_ID].reason == "the ledger was deleted after the scan checked it"
    assert zk_client.exists(PATHS[70000]) is None and zk_client.exists(PATHS[LONG_ID]) is None
    assert read_recovery_state(zk_client, ROOT) == (False, {5, 7})
