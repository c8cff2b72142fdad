"""The placement check: do a segment's write sets meet the rack-aware or zone-aware policy?

Mirrors what BookKeeper's Auditor checks (``auditorPeriodicPlacementPolicyCheckInterval``):

* rack-aware: every write set (``WQ`` consecutive ensemble members, wrapping around) spans at
  least ``min(WQ, min_racks_per_write_quorum)`` racks, else FAIL; with
  ``enforce_min_racks`` a member on the default rack also fails the segment.
* zone-aware: the zone is the first component of a bookie's network location
  (``/zone/upgrade-domain``). A write set spanning fewer than ``min_zones_per_write_quorum``
  zones fails; fewer than ``desired_zones_per_write_quorum`` meets the policy only softly.
  A member whose zone is unknown (no location, the default zone, or the default rack Pulsar
  gives bookies it knows nothing of) fails the segment (BookKeeper never places data there).

Racks come from a mapping that keeps the racks of read-only and stopped bookies: a bookie
that is merely not registered right now is not on the default rack (BookKeeper's Auditor
forgets them and fails healthy ensembles; this check does not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from scrutiny.core.zk_records import DEFAULT_RACK

DEFAULT_ZONE_LOCATION = "/default-zone/default-upgradedomain"


class PlacementPolicy(StrEnum):
    """Which placement policy the cluster's clients use."""

    NONE = "none"
    RACKAWARE = "rackaware"
    ZONEAWARE = "zoneaware"


class PlacementResult(StrEnum):
    """BookKeeper's names for how well a segment meets the policy."""

    FAIL = "FAIL"
    MEETS_SOFT = "MEETS_SOFT"
    MEETS_STRICT = "MEETS_STRICT"


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    """The policy and its parameters, with BookKeeper's defaults."""

    policy: PlacementPolicy = PlacementPolicy.NONE
    min_racks_per_write_quorum: int = 2
    enforce_min_racks: bool = False
    min_zones_per_write_quorum: int = 2
    desired_zones_per_write_quorum: int = 3
    default_rack: str = DEFAULT_RACK


@dataclass(frozen=True, slots=True)
class PlacementOutcome:
    """The result for one segment and, unless MEETS_STRICT, why."""

    result: PlacementResult
    reason: str = ""


def check_placement(
    ensemble: Sequence[str], write_quorum: int, racks: Mapping[str, str], config: PlacementConfig
) -> PlacementOutcome:
    """How the segment with this ensemble meets the configured policy. Pure; O(E × WQ)."""
    if config.policy is PlacementPolicy.RACKAWARE:
        return _rack_aware(ensemble, write_quorum, racks, config)
    if config.policy is PlacementPolicy.ZONEAWARE:
        return _zone_aware(ensemble, write_quorum, racks, config)
    return PlacementOutcome(PlacementResult.MEETS_STRICT)


def write_sets(ensemble: Sequence[str], write_quorum: int) -> list[list[str]]:
    """Every write set of the ensemble: WQ consecutive members starting at each index, wrapping."""
    size = len(ensemble)
    return [[ensemble[(start + w) % size] for w in range(min(write_quorum, size))] for start in range(size)]


def _rack_aware(
    ensemble: Sequence[str], write_quorum: int, racks: Mapping[str, str], config: PlacementConfig
) -> PlacementOutcome:
    def rack(bookie: str) -> str:
        return racks.get(bookie, config.default_rack)

    if config.enforce_min_racks:
        on_default = [b for b in ensemble if rack(b) == config.default_rack]
        if on_default:
            return PlacementOutcome(PlacementResult.FAIL, f"on the default rack: {', '.join(on_default)}")
    needed = min(write_quorum, config.min_racks_per_write_quorum)
    for members in write_sets(ensemble, write_quorum):
        spanned = {rack(b) for b in members}
        if len(spanned) < needed:
            return PlacementOutcome(
                PlacementResult.FAIL,
                f"write set {members} spans {len(spanned)} rack(s) {sorted(spanned)}, needs {needed}",
            )
    return PlacementOutcome(PlacementResult.MEETS_STRICT)


def _zone_aware(
    ensemble: Sequence[str], write_quorum: int, racks: Mapping[str, str], config: PlacementConfig
) -> PlacementOutcome:
    def zone(bookie: str) -> str | None:
        location = racks.get(bookie)
        if location is None or location in (DEFAULT_ZONE_LOCATION, config.default_rack):
            return None
        parts = [p for p in location.split("/") if p]
        return parts[0] if parts else None

    unknown = [b for b in ensemble if zone(b) is None]
    if unknown:
        return PlacementOutcome(PlacementResult.FAIL, f"no known zone: {', '.join(unknown)}")
    minimum = min(write_quorum, config.min_zones_per_write_quorum)
    desired = min(write_quorum, config.desired_zones_per_write_quorum)
    soft: PlacementOutcome | None = None
    for members in write_sets(ensemble, write_quorum):
        spanned = {zone(b) for b in members}
        if len(spanned) < minimum:
            return PlacementOutcome(
                PlacementResult.FAIL, f"write set {members} spans {len(spanned)} zone(s), needs {minimum}"
            )
        if len(spanned) < desired and soft is None:
            soft = PlacementOutcome(
                PlacementResult.MEETS_SOFT,
                f"write set {members} spans {len(spanned)} zone(s), {desired} desired",
            )
    return soft or PlacementOutcome(PlacementResult.MEETS_STRICT)
