"""The checker settings a scenario assumes, and the variables ``scrutiny simulate`` prints to give them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from scrutiny.cli.main import main
from scrutiny.core.placement import PlacementPolicy
from scrutiny.paths import SCENARIOS_DIR
from scrutiny.services.scenario_settings import scenario_checker_settings, scenario_overrides
from scrutiny.settings.loader import load_settings
from scrutiny.simulator.scenario import load_scenario

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["demo.toml", "example.toml"])
def test_the_printed_variables_give_a_default_checker_the_scenarios_assumptions(name: str) -> None:
    scenario = load_scenario(SCENARIOS_DIR / name)
    base = load_settings(env={})
    overrides = scenario_overrides(base, scenario)
    assert overrides["SCRUTINY_PLACEMENT_POLICY"] == "rackaware"  # the default configuration says none
    given = load_settings(env=overrides)  # as a checker started with them reads its settings
    wanted = scenario_checker_settings(base, scenario)
    assert (given.placement, given.verdict) == (wanted.placement, wanted.verdict)
    assert scenario_overrides(given, scenario) == {}


def test_every_differing_key_is_printed_with_the_loaders_spelling() -> None:
    scenario = load_scenario(SCENARIOS_DIR / "example.toml")
    spec = replace(
        scenario.checker,
        placement=PlacementPolicy.ZONEAWARE,
        enforce_min_racks=True,
        min_zones_per_write_quorum=3,
        under_replication_grace_s=90.0,
    )
    overrides = scenario_overrides(load_settings(env={}), replace(scenario, checker=spec))
    assert overrides == {
        "SCRUTINY_PLACEMENT_POLICY": "zoneaware",
        "SCRUTINY_PLACEMENT_ENFORCE_MIN_RACKS_PER_WRITE_QUORUM": "true",
        "SCRUTINY_PLACEMENT_MIN_ZONES_PER_WRITE_QUORUM": "3",
        "SCRUTINY_VERDICT_UNDER_REPLICATION_GRACE_SECONDS": "90",
    }
    assert scenario_overrides(load_settings(env=overrides), replace(scenario, checker=spec)) == {}


def test_simulate_names_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(SCENARIOS_DIR / "demo.toml"), "--dry-run"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["checker_environment"] == {"SCRUTINY_PLACEMENT_POLICY": "rackaware"}


def test_the_autorecovery_assumptions_are_the_watchers_settings() -> None:
    scenario = load_scenario(SCENARIOS_DIR / "example.toml")
    base = load_settings(env={})
    healthy = scenario_checker_settings(base, scenario).watcher  # the scenario's defaults are the settings' defaults
    assert (
        healthy.autorecovery_disabled_critical_seconds,
        healthy.auditor_expected,
        healthy.no_auditor_grace_seconds,
    ) == (
        3600,
        True,
        300,
    )
    spec = replace(
        scenario.checker, autorecovery_disabled_critical_s=120.0, no_auditor_grace_s=44.6, auditor_expected=False
    )
    changed = replace(scenario, checker=spec)
    watcher = scenario_checker_settings(base, changed).watcher
    assert (
        watcher.autorecovery_disabled_critical_seconds,
        watcher.auditor_expected,
        watcher.no_auditor_grace_seconds,
    ) == (
        120,
        False,
        45,
    )
    overrides = scenario_overrides(base, changed)
    assert {k: v for k, v in overrides.items() if k.startswith("SCRUTINY_WATCHER_")} == {
        "SCRUTINY_WATCHER_AUTORECOVERY_DISABLED_CRITICAL_SECONDS": "120",
        "SCRUTINY_WATCHER_AUDITOR_EXPECTED": "false",
        "SCRUTINY_WATCHER_NO_AUDITOR_GRACE_SECONDS": "45",
    }
    assert scenario_overrides(load_settings(env=overrides), changed) == {}


def test_the_orphan_grace_is_the_checkers_setting() -> None:
    scenario = load_scenario(SCENARIOS_DIR / "example.toml")
    base = load_settings(env={})
    assert scenario_checker_settings(base, scenario).checker.orphan_grace_seconds == scenario.checker.orphan_grace_s
    changed = replace(scenario, checker=replace(scenario.checker, orphan_grace_s=90.0))
    assert scenario_checker_settings(base, changed).checker.orphan_grace_seconds == 90.0
    overrides = scenario_overrides(base, changed)
    assert {k: v for k, v in overrides.items() if k.startswith("SCRUTINY_CHECKER_")} == {
        "SCRUTINY_CHECKER_ORPHAN_GRACE_SECONDS": "90.0"
    }
    assert scenario_overrides(load_settings(env=overrides), changed) == {}
