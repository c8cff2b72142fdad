"""The side-by-side benchmark's judging of findings: what counts as finding the fault, when, and what is a false
alarm (no servers: a fixed observer stands in for the contender)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, cast

import pytest

from bench.auditor_bench import LOSSES, Fault, Run

Findings = dict[tuple[int, str], tuple[float, str]]


class Fixed:
    def __init__(self, found: Findings) -> None:
        self.found = found

    def findings(self) -> Findings:
        return self.found


def watched(found: Findings, fault: Fault, started: float, *, window: float = 3.0) -> Any:
    args = argparse.Namespace(window=window, tail=0.0)
    run = Run("wipe", "auditor-short", cast(Any, None), args, Path("/nonexistent"))
    return run._watch(fault, Fixed(found), started)


def test_only_findings_about_the_fault_count_and_the_rest_are_false_alarms() -> None:
    started = time.time() - 10
    at = started + 1
    fault = Fault({1, 2}, {"b1"}, at, LOSSES)
    found: Findings = {
        (1, "b1"): (at + 2, "MISSING_REPLICA"),
        (2, ""): (at + 3, "BELOW_ACK_QUORUM"),
        (2, "b1"): (at + 0.5, "BOOKIE_NOT_REGISTERED"),  # about the fault's bookie, not a loss: neither
        (3, "b1"): (at + 1, "MISSING_REPLICA"),  # a ledger the fault did not touch
        (1, "b2"): (at + 1, "MISSING_REPLICA"),  # another bookie
        (4, "b9"): (started - 5, "MISSING_REPLICA"),  # before the contender was watched: ignored
    }
    outcome = watched(found, fault, started)
    assert (outcome.first_s, outcome.all_s) == (pytest.approx(2.0), pytest.approx(3.0))
    assert outcome.how == {"MISSING_REPLICA", "BELOW_ACK_QUORUM"}
    assert outcome.false_alarms == {(3, "b1"), (1, "b2")}


def test_a_mark_counts_whatever_the_fault_and_nothing_before_it_is_in_place() -> None:
    started = time.time() - 10
    fault = Fault({7}, {"b1", "b2"}, started + 4, frozenset({"ENTRIES_BEYOND_LAST_ENTRY"}))
    early = watched({(7, ""): (started + 1, "under-replication mark")}, fault, started, window=1.0)
    assert early.first_s is None and early.false_alarms == set()  # made while the fault was being set up
    marked = watched({(7, ""): (started + 6, "under-replication mark")}, fault, started)
    assert (marked.first_s, marked.all_s) == (pytest.approx(2.0), pytest.approx(2.0))
    assert marked.how == {"under-replication mark"}
    cluster = watched({(-1, ""): (started + 5, "replicas check counters")}, Fault({7, 8}, {"b1"}, started), started)
    assert cluster.all_s == pytest.approx(5.0)  # the cluster-wide report covers every ledger
