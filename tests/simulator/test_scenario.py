"""The simulator's scenario format: parsing, validation, what bookies hold, and changes over time."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from scrutiny.cli.main import main
from scrutiny.core.ledger_metadata import LedgerState
from scrutiny.core.placement import PlacementPolicy, PlacementResult
from scrutiny.core.sequence_groups import expand
from scrutiny.core.striping import expected_groups
from scrutiny.core.vocabulary import Category
from scrutiny.paths import PROJECT_ROOT
from scrutiny.simulator.generator import FaultMix, generate, parse_fault_mix
from scrutiny.simulator.model import (
    EVERYTHING,
    Action,
    BookieMode,
    CheckerSpec,
    FaultKind,
    Holding,
    LockSpec,
    ScenarioError,
    normalize_ranges,
    placement_outcome,
    subtract_ranges,
)
from scrutiny.simulator.scenario import load_scenario, parse_scenario
from scrutiny.simulator.state import ClusterState, ScheduledChange
from scrutiny.simulator.truth import TruthState, TruthViolation, truth_timeline

REPO = PROJECT_ROOT
SCENARIOS = REPO / "conf" / "scenarios"

BASE = """
[scenario]
name = "t"
seed = 3

[cluster]
bookies = 4
racks = ["/r1", "/r2", "/r3"]

[defaults]
ensemble_size = 3
write_quorum = 2
ack_quorum = 2
last_entry = 29
"""


def scenario(extra: str) -> ClusterState:
    return ClusterState.from_scenario(parse_scenario(BASE + extra))


def held(state: ClusterState, bookie: str, ledger: int) -> list[int]:
    return list(expand(state.held_groups(bookie, ledger) or ()))


def test_the_shipped_scenarios_parse() -> None:
    example = load_scenario(SCENARIOS / "example.toml")
    assert example.name == "example"
    assert len(example.bookies) == 6 and len(example.ledgers) == 13
    by_id = {b.bookie_id: b for b in example.bookies}
    assert by_id["bookie-1"].rack == "/rack-a" and by_id["bookie-4"].rack == "/rack-a"
    assert by_id["bookie-5"].mode is BookieMode.READONLY
    fault = by_id["bookie-4"].fault
    assert fault is not None and fault.kind is FaultKind.STATUS and fault.status_code == 501
    assert fault.ledgers == frozenset({6})
    ledgers = {spec.ledger_id: spec for spec in example.ledgers}
    assert ledgers[4].holding("bookie-2") == Holding(missing=((10, 19),))
    assert ledgers[5].holding("bookie-3").missing == EVERYTHING
    assert ledgers[9].mark is not None and ledgers[9].mark.ctime_s == -7200
    assert dict(ledgers[1].custom)["pulsar/managed-ledger"] == b"persistent://public/default/orders-1"
    assert [e.action for e in example.schedule][:2] == [Action.APPEND, Action.CHANGE_ENSEMBLE]
    demo = load_scenario(SCENARIOS / "demo.toml")
    assert len(demo.ledgers) > 1000 and len(demo.schedule) >= 15


def test_id_ranges_defaults_and_topic_template() -> None:
    state = scenario(
        """
[[ledgers]]
ids = [[1, 3], 7]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
pulsar_topic = "persistent://t/ns/x-{id}"
"""
    )
    assert sorted(state.ledgers) == [1, 2, 3, 7]
    spec = state.ledgers[7]
    assert (spec.ensemble_size, spec.write_quorum, spec.ack_quorum, spec.last_entry) == (3, 2, 2, 29)
    assert dict(spec.custom) == {
        "application": b"pulsar",
        "component": b"managed-ledger",
        "pulsar/managed-ledger": b"persistent://t/ns/x-7",
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[[ledgers]]\nid = 1\nensemble = ['bookie-1', 'bookie-2']\n", "ledgers[0].segments[0]: 2 bookies"),
        ("[[ledgers]]\nid = 1\nensemble = ['bookie-1', 'bookie-2', 'nobody']\n", "unknown bookie(s) nobody"),
        ("[[ledgers]]\nid = 1\nensemble = 'auto'\ncolour = 'red'\n", "unknown key(s) colour"),
        ("[[ledgers]]\nids = [1, 1]\nensemble = 'auto'\n", "ledger 1 is already defined"),
        ("[[ledgers]]\nid = 1\nsegments = [{first = 5, ensemble = 'auto'}]\n", "must start at entry 0"),
        (
            "[[ledgers]]\nid = 1\nsegments = [{first = 0, ensemble = 'auto'}, {first = 40, ensemble = 'auto'}]\n",
            "after last_entry + 1",
        ),
        ("[[ledgers]]\nid = 1\nensemble = 'auto'\nstate = 'OPEN'\ntruncated = 2\n", "only a closed ledger"),
        ("[[ledgers]]\nid = 1\nensemble = 'auto'\nwrite_quorum = 4\n", "ledgers[0].write_quorum: 4 is out of range"),
        ("[bookies.bookie-1]\nfault = { kind = 'status', status = 'ENOLEDGER' }\n", "not a BookKeeper error"),
        ("[bookies.bookie-9]\nmode = 'readonly'\n", "unknown bookie(s) bookie-9"),
        (
            "[[ledgers]]\nid = 1\nensemble = 'auto'\n[[schedule]]\nat = 1\naction = 'close'\nledger = 1\n",
            "schedule[0]: ledger 1 is already closed",
        ),
        (
            "[[ledgers]]\nid = 1\nensemble = 'auto'\n[[schedule]]\nat = 1\naction = 'delete'\nledger = 1\n"
            "[[schedule]]\nat = 2\naction = 'mark'\nledger = 1\n",
            "schedule[1]: ledger 1 does not exist",
        ),
        ("[[schedule]]\nat = 1\naction = 'explode'\n", "'explode' is not one of"),
        ("x = = 1\n", "not valid TOML"),
    ],
)
def test_bad_scenarios_are_refused_with_the_place(extra: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(BASE + extra)


def test_auto_ensembles_are_reproducible_and_meet_or_violate_placement() -> None:
    text = BASE + "[checker]\nplacement = 'rackaware'\n[[ledgers]]\nids = [[1, 40]]\nensemble = 'auto'\n"
    text += "[[ledgers]]\nids = [[41, 60]]\nensemble = 'auto'\nplacement = 'violate'\n"
    first, again = parse_scenario(text), parse_scenario(text)
    assert [s.segments for s in first.ledgers] == [s.segments for s in again.ledgers]
    other = parse_scenario(text.replace("seed = 3", "seed = 4"))
    assert [s.segments for s in first.ledgers] != [s.segments for s in other.ledgers]
    racks = first.racks()
    for spec in first.ledgers:
        outcome, _ = placement_outcome(spec.segments[0].ensemble, spec.write_quorum, racks, first.checker)
        assert (outcome is PlacementResult.FAIL) == (spec.ledger_id > 40)


def test_placement_rule() -> None:
    racks = {"a": "/r1", "b": "/r1", "c": "/r2", "z1": "/east/ud1", "z2": "/west/ud1", "z3": "/east/ud2"}
    rack_aware = CheckerSpec(placement=PlacementPolicy.RACKAWARE)
    assert placement_outcome(("a", "c", "b"), 2, racks, rack_aware)[0] is PlacementResult.FAIL  # b,a wrap
    assert placement_outcome(("a", "c"), 2, racks, rack_aware)[0] is PlacementResult.MEETS_STRICT
    strict_default = CheckerSpec(placement=PlacementPolicy.RACKAWARE, enforce_min_racks=True)
    assert placement_outcome(("a", "c", "x"), 1, racks, strict_default)[0] is PlacementResult.FAIL
    zones = CheckerSpec(placement=PlacementPolicy.ZONEAWARE)
    assert placement_outcome(("z1", "z2"), 2, racks, zones)[0] is PlacementResult.MEETS_STRICT
    assert placement_outcome(("z1", "z2", "a"), 3, racks, zones)[0] is PlacementResult.MEETS_STRICT
    assert placement_outcome(("z1", "z2", "z3"), 3, racks, zones)[0] is PlacementResult.MEETS_SOFT
    assert placement_outcome(("z1", "x"), 2, racks, zones)[0] is PlacementResult.FAIL


def test_ranges() -> None:
    assert normalize_ranges([(5, 9), (0, 2), (3, 3), (20, 19)]) == ((0, 3), (5, 9))
    assert subtract_ranges(((0, 100),), ((10, 19), (50, 200))) == ((0, 9), (20, 49))
    assert subtract_ranges(((0, 5),), ()) == ((0, 5),)


def test_what_each_bookie_holds() -> None:
    state = scenario(
        """
[[ledgers]]
id = 1
segments = [{ first = 0, ensemble = ["bookie-1", "bookie-2", "bookie-3"] },
            { first = 20, ensemble = ["bookie-1", "bookie-4", "bookie-3"] }]
holdings = [{ bookie = "bookie-2", missing = [[3, 8]] }, { bookie = "bookie-4", nothing = true },
            { bookie = "bookie-3", add = [[0, 1]] }]
truncated = 2
"""
    )
    stripe = {
        (bookie, ledger_range): list(expand(expected_groups(index, 3, 2, *ledger_range)))
        for bookie, index, ledger_range in (
            ("bookie-1", 0, (0, 19)),
            ("bookie-1", 0, (20, 31)),
            ("bookie-2", 1, (0, 19)),
            ("bookie-3", 2, (0, 19)),
            ("bookie-3", 2, (20, 31)),
        )
    }
    assert held(state, "bookie-1", 1) == stripe["bookie-1", (0, 19)] + stripe["bookie-1", (20, 31)]
    assert held(state, "bookie-2", 1) == [e for e in stripe["bookie-2", (0, 19)] if not 3 <= e <= 8]
    assert held(state, "bookie-4", 1) == []
    assert state.held_groups("bookie-4", 1) is None
    assert held(state, "bookie-3", 1) == sorted({0, 1, *stripe["bookie-3", (0, 19)], *stripe["bookie-3", (20, 31)]})
    assert max(held(state, "bookie-1", 1)) == 30  # entry 30, beyond the end (29), is on its stripe
    groups = state.held_groups("bookie-1", 1)
    assert groups is not None and all(a.last < b.first_start for a, b in itertools.pairwise(groups))


def test_schedule_changes_the_state() -> None:
    parsed = parse_scenario(
        BASE
        + """
[[ledgers]]
id = 1
state = "OPEN"
last_entry = 9
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
holdings = [{ bookie = "bookie-2", missing = [[0, "end"]] }]

[[ledgers]]
id = 2
ensemble = ["bookie-1", "bookie-2", "bookie-3"]

[[schedule]]
at = 1
action = "append"
ledger = 1
last_entry = 19
[[schedule]]
at = 2
action = "change_ensemble"
ledger = 1
first = 20
ensemble = ["bookie-4", "bookie-2", "bookie-3"]
[[schedule]]
at = 2.5
action = "append"
ledger = 1
last_entry = 29
[[schedule]]
at = 3
action = "close"
ledger = 1
last_entry = 25
[[schedule]]
at = 4
action = "change_ensemble"
ledger = 2
first = 0
ensemble = ["bookie-4", "bookie-2", "bookie-3"]
copied = false
[[schedule]]
at = 5
action = "kill"
bookie = "bookie-3"
[[schedule]]
at = 6
action = "readonly"
bookie = "bookie-3"
[[schedule]]
at = 7
action = "revive"
bookie = "bookie-3"
[[schedule]]
at = 8
action = "mark"
ledger = 2
replicas = ["bookie-4"]
age_s = 10
[[schedule]]
at = 9
action = "wipe"
bookie = "bookie-1"
[[schedule]]
at = 10
action = "repair"
ledger = 2
bookie = "bookie-4"
[[schedule]]
at = 11
action = "delete"
ledger = 2
"""
    )
    state = ClusterState.from_scenario(parsed)
    events = iter(parsed.schedule)

    def step() -> ScheduledChange:
        return state.apply(next(events))

    step()  # append 10..19, written after bookie-2 lost everything: it holds its part of them
    assert held(state, "bookie-2", 1)[:1] == [10]
    assert 9 not in held(state, "bookie-2", 1)
    step()  # ensemble change at 20
    step()  # append 20..29
    assert step().metadata == {1}  # close at 25 although 29 entries were written
    spec = state.ledgers[1]
    assert spec.state is LedgerState.CLOSED and spec.last_entry == 25 and spec.truncated == 4
    assert [s.first for s in spec.segments] == [0, 20]
    assert {27, 29} <= set(held(state, "bookie-4", 1))  # index 0 from entry 20: 27 and 29 are beyond the end
    step()  # bookie-4 replaces bookie-1 in ledger 2, not copied
    assert state.ledgers[2].holding("bookie-4").missing == ((0, 29),)
    assert held(state, "bookie-4", 2) == []
    assert step().stopped == {"bookie-3"}
    assert step().registration == set()  # read-only while stopped: takes effect on revival
    assert state.bookies["bookie-3"].mode is BookieMode.STOPPED
    assert step().started == {"bookie-3"}
    assert state.bookies["bookie-3"].mode.value == "readonly"
    assert step().marks == {2}
    mark = state.ledgers[2].mark
    assert mark is not None and mark.replicas == ("bookie-4",) and mark.ctime_s == 8 - 10 and mark.seen_s == 8
    assert step().wiped == {"bookie-1"}
    assert held(state, "bookie-1", 1) == []
    step()  # repair bookie-4's copy of ledger 2
    assert state.ledgers[2].holding("bookie-4").default
    assert held(state, "bookie-4", 2) == list(expand(expected_groups(0, 3, 2, 0, 29)))
    assert step().deleted == {2}
    assert 2 not in state.ledgers and state.ledgers_of("bookie-4") == {1}


def test_generator_is_reproducible_and_follows_the_mix() -> None:
    mix = parse_fault_mix("missing=0.01,corrupt=0.005,eio=1,stopped=1")
    text, plan = generate(2000, mix, 5)
    assert generate(2000, mix, 5)[0] == text
    assert generate(2000, mix, 6)[0] != text
    assert {k: len(v) for k, v in plan.ledgers.items()} == {"missing": 20, "corrupt": 10}
    assert len(plan.bookies["eio"]) == 1 and len(plan.bookies["stopped"]) == 1
    parsed = parse_scenario(text)
    assert len(parsed.ledgers) == 2000
    corrupt = [s.ledger_id for s in parsed.ledgers if s.corrupt is not None]
    assert corrupt == plan.ledgers["corrupt"]
    stopped = [b.bookie_id for b in parsed.bookies if b.mode is BookieMode.STOPPED]
    assert stopped == plan.bookies["stopped"]
    assert parse_fault_mix("realistic,eio=2").eio == 2
    assert parse_fault_mix("none") == FaultMix()
    for bad in ("missing=2", "bogus=1", "nothing=x", "missing=0.6,nothing=0.6", "nopreset"):
        with pytest.raises(ScenarioError):
            parse_fault_mix(bad)


def test_cli_generates_and_dry_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gen.toml"
    assert main(["simulate", "--generate", "500", "--faults", "ledgers", "--seed", "2", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ledgers"] == 500 and out.exists()
    truth = tmp_path / "truth.json"
    assert main(["simulate", str(out), "--dry-run", "--truth-out", str(truth)]) == 0
    document = json.loads(truth.read_text())
    assert document["format"] == "scrutiny-simulator-truth" and document["scenario"]["ledgers"] == 500
    assert main(["simulate", str(tmp_path / "missing.toml"), "--dry-run"]) == 2
    assert "cannot read scenario" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[[ledgers]]\nids = [[1, 100000000000]]\nensemble = 'auto'\n", "a scenario defines at most 1,000,000 ledgers"),
        (
            "[[schedule]]\nat = 1\naction = 'limbo'\nbookie = 'bookie-1'\nledgers = [[0, 9223372036854775806]]\n",
            "schedule[0].ledgers: 9,223,372,036,854,775,807 ledger ids: a scenario's limbo and fault lists",
        ),
        (
            "[bookies.bookie-1]\nlimbo = [[1, 600000]]\n[bookies.bookie-2]\nlimbo = [[1, 600000]]\n",
            "bookies.bookie-2.limbo: 600,000 ledger ids (1,200,000 with those before)",
        ),
        (
            "[bookies.bookie-1]\nfault = { kind = 'unresponsive', ledgers = [[1, 2000000]] }\n",
            "bookies.bookie-1.fault.ledgers: 2,000,000 ledger ids",
        ),
        ("[[ledgers]]\nid = 1\nensemble = 'auto'\nunder_replicated = { age_s = inf }\n", "is not a finite number"),
        ("[[ledgers]]\nid = 1\nensemble = 'auto'\nunder_replicated = { age_s = 1e10 }\n", "315,360,000 seconds"),
        ("[checker]\nrequest_timeout_s = nan\n", "checker.request_timeout_s: nan is not a finite number"),
        ("[checker]\nbookie_lost_after_s = 1e300\n", "checker.bookie_lost_after_s: 1e+300 is more than"),
        ("[bookies.bookie-1]\nfault = { kind = 'slow', delay_s = inf }\n", "fault.delay_s: inf is not a finite"),
        ("[[ledgers]]\nid = 1\nensemble = 'auto'\n[[schedule]]\nat = nan\naction = 'delete'\nledger = 1\n", "at: nan"),
        (
            "[[ledgers]]\nid = 1\nensemble = 'auto'\n[[schedule]]\nat = 1e9\naction = 'delete'\nledger = 1\n",
            "ten years",
        ),
        (
            "[[ledgers]]\nid = 1\nensemble = 'auto'\nlast_entry = 9007199254740992\nentry_size = 1024\n",
            "a closed ledger's length (last_entry + 1) × entry_size = 9,223,372,036,854,776,832 bytes does not fit",
        ),
        (
            "[[ledgers]]\nid = 1\nensemble = 'auto'\nstate = 'OPEN'\nlast_entry = 4\n"
            "[[schedule]]\nat = 1\naction = 'close'\nledger = 1\nlast_entry = 4611686018427387903\n",
            "schedule[0]: a closed ledger's length",
        ),
        ("[[ledgers]]\nid = 1\nensemble = 'auto'\nentry_size = 1099511627777\n", "entry_size: 1099511627777 is out"),
    ],
)
def test_the_format_limits_refuse_what_would_not_fit(extra: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(BASE + extra)


def test_the_ledgers_of_a_table_are_counted_before_they_are_made() -> None:
    many = "[cluster]\nbookies = 1000\n[[ledgers]]\nids = [[1, 100000]]\nensemble_size = 1000\nwrite_quorum = 2\n"
    with pytest.raises(ScenarioError, match=re.escape("100,000,000 ensemble members and holding ranges: a scenario")):
        parse_scenario(many + "last_entry = 9\nensemble = 'auto'\n")
    custom = "x" * 100_000
    with pytest.raises(ScenarioError, match="bytes of custom metadata: a scenario's ledgers hold at most 268,435,456"):
        parse_scenario(BASE + f"[[ledgers]]\nids = [[1, 5000]]\nensemble = 'auto'\ncustom = {{ k = '{custom}' }}\n")
    too_many = "[cluster]\nbookies = [" + ", ".join(f"'b{i}'" for i in range(10_001)) + "]\n"
    with pytest.raises(
        ScenarioError, match=re.escape("cluster.bookies: 10,001 bookies: a scenario has at most 10,000")
    ):
        parse_scenario(too_many)
    assert len(parse_scenario(BASE + "[[ledgers]]\nids = [[1, 1000]]\nensemble = 'auto'\n").ledgers) == 1000


def test_the_generator_keeps_to_the_format_limits() -> None:
    for ledgers, bookies, seed in ((1_000_001, 9, 1), (10, 10_001, 1), (10, 9, -1), (10, 9, 2**63)):
        with pytest.raises(ScenarioError):
            generate(ledgers, FaultMix(), seed, bookies=bookies)
    for bad in ("missing=nan", "missing=inf", "eio=nan"):
        with pytest.raises(ScenarioError):
            parse_fault_mix(bad)


# --------------------------------------------------------------------------- BookKeeper's auto-recovery


def test_autorecovery_is_healthy_by_default() -> None:
    for parsed in (
        parse_scenario(BASE),
        load_scenario(SCENARIOS / "example.toml"),
        load_scenario(SCENARIOS / "demo.toml"),
    ):
        assert (parsed.cluster.autorecovery_disabled, parsed.cluster.auditor) == (False, True)
        state = ClusterState.from_scenario(parsed)
        assert (state.disabled_since_s, state.no_auditor_since_s) == (None, None)
    checker = parse_scenario(BASE).checker
    assert (checker.autorecovery_disabled_critical_s, checker.no_auditor_grace_s, checker.auditor_expected) == (
        3600.0,
        300.0,
        True,
    )
    assert checker == CheckerSpec()
    generated = parse_scenario(generate(50, parse_fault_mix("realistic"), 1)[0])
    assert (generated.cluster.autorecovery_disabled, generated.cluster.auditor, generated.checker.auditor_expected) == (
        False,
        True,
        True,
    )


def test_autorecovery_keys_and_changes() -> None:
    parsed = parse_scenario(
        BASE.replace("bookies = 4\n", "bookies = 4\nautorecovery_disabled = true\nauditor = false\n")
        + """
[checker]
autorecovery_disabled_critical_s = 120
no_auditor_grace_s = 45.5
auditor_expected = false

[[schedule]]
at = 3
action = "enable_autorecovery"
[[schedule]]
at = 4
action = "start_auditor"
[[schedule]]
at = 6
action = "disable_autorecovery"
[[schedule]]
at = 8
action = "stop_auditor"
"""
    )
    assert (parsed.cluster.autorecovery_disabled, parsed.cluster.auditor) == (True, False)
    assert (parsed.checker.autorecovery_disabled_critical_s, parsed.checker.no_auditor_grace_s) == (120.0, 45.5)
    assert parsed.checker.auditor_expected is False
    assert parsed.checker.as_json_dict()["no_auditor_grace_s"] == 45.5
    assert [e.action for e in parsed.schedule] == [
        Action.ENABLE_AUTORECOVERY,
        Action.START_AUDITOR,
        Action.DISABLE_AUTORECOVERY,
        Action.STOP_AUDITOR,
    ]
    assert [e.describe() for e in parsed.schedule][:2] == ["enable_autorecovery", "start_auditor"]
    state = ClusterState.from_scenario(parsed)
    assert (state.disabled_since_s, state.no_auditor_since_s) == (0.0, 0.0)  # both from the start
    assert state.auditor_voter == "bookie-1"
    changes = [state.apply(event) for event in parsed.schedule[:2]]
    assert [(c.autorecovery, c.auditor) for c in changes] == [(True, False), (False, True)]
    assert changes[0] == ScheduledChange(autorecovery=True)  # nothing else touched
    assert (state.disabled_since_s, state.no_auditor_since_s) == (None, None)
    state.apply(parsed.schedule[2])
    state.apply(parsed.schedule[3])
    assert (state.disabled_since_s, state.no_auditor_since_s) == (6.0, 8.0)


def schedule_of(*actions: str) -> str:
    return "".join(f"[[schedule]]\nat = {at}\naction = '{action}'\n" for at, action in enumerate(actions, 1))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (schedule_of("disable_autorecovery", "disable_autorecovery"), "schedule[1]: auto-recovery is already disabled"),
        (schedule_of("enable_autorecovery"), "schedule[0]: auto-recovery is not disabled"),
        (schedule_of("disable_autorecovery", "enable_autorecovery", "enable_autorecovery"), "schedule[2]: auto-rec"),
        (schedule_of("stop_auditor", "stop_auditor"), "schedule[1]: no auditor is running (none since 1.0 s)"),
        (schedule_of("start_auditor"), "schedule[0]: an auditor is already running"),
        ("[[schedule]]\nat = 1\naction = 'stop_auditor'\nbookie = 'bookie-1'\n", "schedule[0]: unknown key(s) bookie"),
        ("[[schedule]]\nat = 1\naction = 'disable_autorecovery'\nledger = 1\n", "schedule[0]: unknown key(s) ledger"),
        ("[[schedule]]\naction = 'start_auditor'\n", "schedule[0]: required: at"),
        ("[[schedule]]\nat = 1\naction = 'disable'\n", "'disable' is not one of"),
        ("[checker]\nno_auditor_grace_s = -1\n", "checker.no_auditor_grace_s: -1 is below 0.0"),
        (
            "[checker]\nautorecovery_disabled_critical_s = 'long'\n",
            "checker.autorecovery_disabled_critical_s: expected a",
        ),
        (
            "[checker]\nautorecovery_disabled_critical_s = inf\n",
            "autorecovery_disabled_critical_s: inf is not a finite",
        ),
        ("[checker]\nauditor_expected = 1\n", "checker.auditor_expected: expected true or false, got 1"),
        ("[checker]\nauditor = true\n", "checker: unknown key(s) auditor"),
    ],
)
def test_bad_autorecovery_changes_and_keys_are_refused_with_the_place(extra: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(BASE + extra)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("autorecovery_disabled = 'yes'", "cluster.autorecovery_disabled: expected true or false, got 'yes'"),
        ("auditor = 0", "cluster.auditor: expected true or false, got 0"),
        ("auditors = true", "cluster: unknown key(s) auditors"),
    ],
)
def test_bad_autorecovery_cluster_keys_are_refused_with_the_place(key: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(BASE.replace("bookies = 4\n", f"bookies = 4\n{key}\n"))


def test_an_absent_auditor_cannot_stop_from_the_start() -> None:
    with pytest.raises(ScenarioError, match=re.escape("schedule[0]: no auditor is running (none since 0.0 s)")):
        parse_scenario(BASE.replace("bookies = 4\n", "bookies = 4\nauditor = false\n") + schedule_of("stop_auditor"))
    with pytest.raises(ScenarioError, match=re.escape("already disabled (since 0.0 s)")):
        parse_scenario(
            BASE.replace("bookies = 4\n", "bookies = 4\nautorecovery_disabled = true\n")
            + schedule_of("disable_autorecovery")
        )


# --------------------------------------------------------------------------- replication workers' locks

LOCKED = """
[[ledgers]]
id = 1
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
under_replicated = { replicas = ["bookie-2"], age_s = 100, locked_by = "bookie-4" }
[[ledgers]]
id = 2
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
under_replicated = { replicas = [1], locked_by = 2 }
[[ledgers]]
ids = [3, 4]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
under_replicated = true
[[ledgers]]
id = 5
ensemble = ["bookie-1", "bookie-2", "bookie-3"]
"""


def lock_of(state: ClusterState, ledger_id: int) -> tuple[str, float] | None:
    lock = state.locks.get(ledger_id)
    return None if lock is None else (lock.bookie_id, lock.since_s)


def test_a_mark_is_locked_by_a_bookie_or_an_ensemble_position_from_the_start() -> None:
    state = scenario(LOCKED)
    assert {lid: lock_of(state, lid) for lid in state.locks} == {1: ("bookie-4", 0.0), 2: ("bookie-3", 0.0)}
    mark = state.ledgers[1].mark
    assert mark is not None and mark.ctime_s == -100 and mark.replicas == ("bookie-2",)
    assert state.ledgers[1].lock == LockSpec("bookie-4", 0.0)
    assert state.ledgers[3].lock is None and state.ledgers[5].lock is None


def test_lock_unlock_and_what_releases_a_lock() -> None:
    parsed = parse_scenario(
        BASE
        + LOCKED
        + """
[[schedule]]
at = 1
action = "unlock"
ledger = 1
[[schedule]]
at = 2
action = "lock"
ledger = 1
bookie = "bookie-1"
[[schedule]]
at = 3
action = "mark"
ledger = 1
replicas = ["bookie-3"]
[[schedule]]
at = 4
action = "mark"
ledger = 5
locked_by = "bookie-2"
[[schedule]]
at = 5
action = "mark"
ledger = 3
replicas = ["bookie-1"]
locked_by = "bookie-3"
[[schedule]]
at = 6
action = "lock"
ledger = 4
bookie = "bookie-4"
[[schedule]]
at = 7
action = "unmark"
ledger = 1
[[schedule]]
at = 8
action = "repair"
ledger = 2
[[schedule]]
at = 9
action = "delete"
ledger = 3
[[schedule]]
at = 10
action = "create"
ledger = { id = 6, ensemble = "auto", under_replicated = { age_s = 5, locked_by = 0 } }
[[schedule]]
at = 11
action = "unmark"
ledger = 5
"""
    )
    state = ClusterState.from_scenario(parsed)
    events = iter(parsed.schedule)

    def step() -> ScheduledChange:
        return state.apply(next(events))

    assert step().locks == {1}  # unlock: the mark stays
    assert lock_of(state, 1) is None and state.ledgers[1].mark is not None
    assert step().locks == {1} and lock_of(state, 1) == ("bookie-1", 2.0)
    change = step()  # re-marked: the worker keeps its lock
    assert (change.marks, change.locks) == ({1}, set())
    mark = state.ledgers[1].mark
    assert mark is not None and mark.replicas == ("bookie-2", "bookie-3") and lock_of(state, 1) == ("bookie-1", 2.0)
    change = step()  # marked and locked at once
    assert (change.marks, change.locks) == ({5}, {5}) and lock_of(state, 5) == ("bookie-2", 4.0)
    change = step()  # an unlocked mark re-marked with a lock
    assert (change.marks, change.locks) == ({3}, {3}) and lock_of(state, 3) == ("bookie-3", 5.0)
    assert step().locks == {4} and lock_of(state, 4) == ("bookie-4", 6.0)
    change = step()  # unmark: the mark and its lock go
    assert (change.marks, change.locks) == ({1}, {1}) and lock_of(state, 1) is None
    change = step()  # repair: the worker is done and releases its lock; the mark stays
    assert change.locks == {2} and lock_of(state, 2) is None and state.ledgers[2].mark is not None
    change = step()  # delete: the lock goes with the ledger
    assert (change.deleted, change.locks) == ({3}, {3}) and 3 not in state.locks
    change = step()  # create: the lock is taken when the ledger appears
    assert change.locks == {6}
    created = state.ledgers[6]
    assert created.lock == LockSpec(created.segments[-1].ensemble[0], 10.0)
    assert created.mark is not None and created.mark.ctime_s == 5.0
    step()
    assert sorted(state.locks) == [4, 6]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "[[schedule]]\nat = 1\naction = 'lock'\nledger = 5\nbookie = 'bookie-1'\n",
            "schedule[0]: ledger 5 is not marked under-replicated: no worker can take it",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'lock'\nledger = 1\nbookie = 'bookie-1'\n",
            "schedule[0]: ledger 1 is already locked by bookie-4 (since 0.0 s)",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'mark'\nledger = 2\nlocked_by = 'bookie-1'\n",
            "schedule[0]: ledger 2 is already locked by bookie-3 (since 0.0 s)",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'unlock'\nledger = 3\n",
            "schedule[0]: ledger 3 is not locked by a replication",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'unlock'\nledger = 5\n",
            "schedule[0]: ledger 5 is not locked by a replication",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'unmark'\nledger = 1\n"
            "[[schedule]]\nat = 2\naction = 'unlock'\nledger = 1\n",
            "schedule[1]: ledger 1 is not locked",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'repair'\nledger = 2\n"
            "[[schedule]]\nat = 2\naction = 'unlock'\nledger = 2\n",
            "schedule[1]: ledger 2 is not locked",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'delete'\nledger = 1\n[[schedule]]\nat = 2\naction = 'lock'\nledger = 1\n"
            "bookie = 'bookie-1'\n",
            "schedule[1]: ledger 1 does not exist at 2.0 s",
        ),
        ("[[schedule]]\nat = 1\naction = 'lock'\nledger = 3\n", "schedule[0]: lock needs bookie"),
        ("[[schedule]]\nat = 1\naction = 'lock'\nbookie = 'bookie-1'\n", "schedule[0]: lock needs ledger"),
        ("[[schedule]]\nat = 1\naction = 'unlock'\n", "schedule[0]: unlock needs ledger"),
        (
            "[[schedule]]\nat = 1\naction = 'lock'\nledger = 3\nbookie = 'nobody'\n",
            "schedule[0].bookie: unknown bookie 'nobody'",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'unlock'\nledger = 1\nbookie = 'bookie-4'\n",
            "schedule[0]: unknown key(s) bookie",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'mark'\nledger = 5\nlocked_by = 'nobody'\n",
            "schedule[0].locked_by: unknown bookie 'nobody'",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'mark'\nledger = 5\nlocked_by = 0\n",
            "schedule[0].locked_by: expected a string, got 0",
        ),
        (
            "[[schedule]]\nat = 1\naction = 'unmark'\nledger = 1\nlocked_by = 'bookie-1'\n",
            "schedule[0]: unknown key(s) locked_by",
        ),
        (
            "[[ledgers]]\nid = 9\nensemble = 'auto'\nunder_replicated = { locked_by = 'nobody' }\n",
            "ledgers[4]: under_replicated.locked_by names unknown bookie nobody",
        ),
        (
            "[[ledgers]]\nid = 9\nensemble = 'auto'\nunder_replicated = { locked_by = 3 }\n",
            "ledgers[4].under_replicated.locked_by: 3 is out of range [0, 2]",
        ),
        (
            "[[ledgers]]\nid = 9\nensemble = 'auto'\nunder_replicated = { locked_by = true }\n",
            "ledgers[4].under_replicated.locked_by: expected a string, got True",
        ),
        (
            "[[ledgers]]\nid = 9\nensemble = 'auto'\nunder_replicated = { locked_by = 'a/b' }\n",
            "ledgers[4].under_replicated.locked_by: invalid bookie id 'a/b'",
        ),
        (
            "[[ledgers]]\nid = 9\nensemble = 'auto'\nunder_replicated = { lock = 'bookie-1' }\n",
            "ledgers[4].under_replicated: unknown key(s) lock",
        ),
    ],
)
def test_bad_locks_are_refused_with_the_place(extra: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_scenario(BASE + LOCKED + extra)


def test_a_lock_changes_no_finding_of_the_ground_truth() -> None:
    changes = """
[[schedule]]
at = 1
action = "mark"
ledger = 5
{locked_by}
[[schedule]]
at = 4
action = "repair"
ledger = 2
"""
    locks = """
[[schedule]]
at = 2
action = "unlock"
ledger = 1
[[schedule]]
at = 3
action = "lock"
ledger = 4
bookie = "bookie-2"
"""
    grace = "[checker]\nunder_replication_grace_s = 50\n"
    locked = parse_scenario(BASE + LOCKED + changes.format(locked_by="locked_by = 'bookie-1'") + locks + grace)
    unlocked = LOCKED.replace(', locked_by = "bookie-4"', "").replace(", locked_by = 2", "")
    plain = parse_scenario(BASE + unlocked + changes.format(locked_by="") + grace)
    assert ClusterState.from_scenario(plain).locks == {}
    timelines = [truth_timeline(locked), truth_timeline(plain)]

    def in_force(timeline: list[TruthState], at_s: float) -> set[TruthViolation]:
        return set(next(s for s in reversed(timeline) if s.at_s <= at_s).violations)

    moments = sorted({s.at_s for timeline in timelines for s in timeline})
    assert len(moments) > 3
    for at_s in moments:
        assert in_force(timelines[0], at_s) == in_force(timelines[1], at_s), at_s
    assert any(v.category is Category.UNDER_REPLICATION_STUCK for v in in_force(timelines[0], 0.0))
