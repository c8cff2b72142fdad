from __future__ import annotations

from scrutiny.core.placement import (
    PlacementConfig,
    PlacementPolicy,
    PlacementResult,
    check_placement,
    write_sets,
)

RACK = PlacementConfig(policy=PlacementPolicy.RACKAWARE)
ZONE = PlacementConfig(policy=PlacementPolicy.ZONEAWARE)


def test_write_sets_wrap_around() -> None:
    assert write_sets(["a", "b", "c"], 2) == [["a", "b"], ["b", "c"], ["c", "a"]]


def test_rack_aware_needs_two_racks_per_write_set() -> None:
    racks = {"a": "/r1", "b": "/r2", "c": "/r1", "d": "/r2"}
    assert check_placement(["a", "b", "c", "d"], 2, racks, RACK).result is PlacementResult.MEETS_STRICT
    # write set (d, a) wraps around: /r2, /r1 fine; (b, d) with E=3? use a failing layout
    outcome = check_placement(["a", "c", "b"], 2, racks, RACK)
    assert outcome.result is PlacementResult.FAIL and "['a', 'c']" in outcome.reason


def test_rack_aware_with_wq_one_needs_one_rack() -> None:
    assert check_placement(["a", "b"], 1, {"a": "/r1", "b": "/r1"}, RACK).result is PlacementResult.MEETS_STRICT


def test_unknown_bookies_sit_on_the_default_rack() -> None:
    # both unknown: the default rack twice is one rack
    assert check_placement(["x", "y"], 2, {}, RACK).result is PlacementResult.FAIL
    assert check_placement(["x", "a"], 2, {"a": "/r1"}, RACK).result is PlacementResult.MEETS_STRICT
    enforce = PlacementConfig(policy=PlacementPolicy.RACKAWARE, enforce_min_racks=True)
    outcome = check_placement(["x", "a"], 2, {"a": "/r1"}, enforce)
    assert outcome.result is PlacementResult.FAIL and "default rack: x" in outcome.reason


def test_min_racks_parameter() -> None:
    racks = {"a": "/r1", "b": "/r2", "c": "/r2"}
    three = PlacementConfig(policy=PlacementPolicy.RACKAWARE, min_racks_per_write_quorum=3)
    assert check_placement(["a", "b", "c"], 3, racks, three).result is PlacementResult.FAIL
    assert check_placement(["a", "b", "c"], 3, racks, RACK).result is PlacementResult.MEETS_STRICT


def test_zone_aware_soft_and_fail() -> None:
    zones = {"a": "/z1/ud1", "b": "/z2/ud1", "c": "/z3/ud1", "d": "/z1/ud2"}
    assert check_placement(["a", "b", "c"], 3, zones, ZONE).result is PlacementResult.MEETS_STRICT
    soft = check_placement(["a", "b", "d"], 3, zones, ZONE)
    assert soft.result is PlacementResult.MEETS_SOFT
    assert check_placement(["a", "d"], 2, zones, ZONE).result is PlacementResult.FAIL
    unknown = check_placement(["a", "b", "q"], 3, zones, ZONE)
    assert unknown.result is PlacementResult.FAIL and "q" in unknown.reason


def test_zone_aware_default_rack_is_no_zone() -> None:
    # Pulsar gives bookies it knows nothing of "/default-rack": that is not a zone of its own.
    zones = {"a": "/z1/ud1", "b": "/z2/ud1", "c": "/default-rack", "d": "/default-zone/default-upgradedomain"}
    for stranger in ("c", "d"):
        outcome = check_placement(["a", "b", stranger], 3, zones, ZONE)
        assert outcome.result is PlacementResult.FAIL and stranger in outcome.reason


def test_no_policy_always_meets() -> None:
    assert check_placement(["a", "b"], 2, {}, PlacementConfig()).result is PlacementResult.MEETS_STRICT
