"""The checker settings a simulated scenario's ground truth assumes, and how to give them to a checker.

A scenario says which placement policy its clients used and how long an under-replication mark may stay; its ground
truth counts the findings of a checker configured that way. The embedded default applies them to its own checker;
``scrutiny simulate`` prints them (as ``SCRUTINY_*`` variables) for a checker or scan run beside it.
"""

from __future__ import annotations

from dataclasses import fields, replace

from scrutiny.settings.loader import ENV_PREFIX, Settings
from scrutiny.simulator.model import Scenario

#: The sections a scenario's assumptions touch.
ASSUMED_SECTIONS = ("placement", "verdict", "watcher", "checker")


def scenario_checker_settings(base: Settings, scenario: Scenario) -> Settings:
    """``base`` with the settings the scenario's ground truth assumes (placement policy, mark grace, when a stopped
    bookie is lost and how long its ledgers may stay unmarked, when disabled auto-recovery is critical, whether an
    auditor is expected and how long it may be missing, how long a bookie may hold a ledger without metadata)."""
    spec = scenario.checker
    placement = replace(
        base.placement,
        policy=spec.placement.value,
        min_racks_per_write_quorum=spec.min_racks_per_write_quorum,
        enforce_min_racks_per_write_quorum=spec.enforce_min_racks,
        min_zones_per_write_quorum=spec.min_zones_per_write_quorum,
        desired_zones_per_write_quorum=spec.desired_zones_per_write_quorum,
        default_rack=spec.default_rack,
    )
    watcher = replace(
        base.watcher,
        lost_bookie_recovery_delay_seconds=0,
        bookie_lost_grace_seconds=round(spec.bookie_lost_after_s),
        autorecovery_disabled_critical_seconds=round(spec.autorecovery_disabled_critical_s),
        auditor_expected=spec.auditor_expected,
        no_auditor_grace_seconds=round(spec.no_auditor_grace_s),
    )
    return replace(
        base,
        placement=placement,
        verdict=replace(base.verdict, under_replication_grace_seconds=int(spec.under_replication_grace_s)),
        watcher=watcher,
        checker=replace(
            base.checker,
            under_replication_mark_grace_seconds=spec.under_replication_mark_grace_s,
            recovery_stalled_grace_seconds=spec.recovery_stalled_grace_s,
            orphan_grace_seconds=spec.orphan_grace_s,
        ),
    )


def simulated_write_cache(base: Settings, scenario: Scenario) -> Settings:
    """``base`` with the verdict's write-cache rule set to the simulated bookies' flush interval.

    Not an assumption of the ground truth (the rule only delays findings until the bookies' indexes can show them;
    what is found in the end is the same): it lets a checker beside a simulated cluster judge at once when the
    simulated bookies have no write cache, and exactly as late as needed when they have one.
    """
    flush = scenario.cluster.write_cache_flush_s
    margin = base.verdict.write_cache_margin_seconds if flush else 0.0
    verdict = replace(base.verdict, write_cache_flush_seconds=flush, write_cache_margin_seconds=margin)
    return replace(base, verdict=verdict)


def scenario_overrides(base: Settings, scenario: Scenario) -> dict[str, str]:
    """The environment variables that give a checker configured with ``base`` the scenario's assumptions.

    Empty when they agree. ``scrutiny simulate`` prints them, so that a checker or scan run beside a simulated cluster
    judges it by the rules its ground truth was written for.
    """
    wanted = scenario_checker_settings(base, scenario)
    overrides: dict[str, str] = {}
    for section in ASSUMED_SECTIONS:
        have, want = getattr(base, section), getattr(wanted, section)
        for key in (f.name for f in fields(want)):
            value = getattr(want, key)
            if getattr(have, key) != value:
                text = str(value).lower() if isinstance(value, bool) else str(value)
                overrides[f"{ENV_PREFIX}{section.upper()}_{key.upper()}"] = text
    return overrides
