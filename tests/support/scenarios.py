"""Small simulated scenarios for end-to-end tests: the common header written once."""

from __future__ import annotations


def small_scenario(name: str, *, seed: int, bookies: int, body: str) -> str:
    """Scenario TOML: ``bookies`` bookies, ledgers E=3/WQ=2/AQ=2 of 30 entries by default, then ``body``
    (bookie faults, ledgers, schedule)."""
    header = f"""
[scenario]
name = "{name}"
seed = {seed}

[cluster]
bookies = {bookies}

[defaults]
ensemble_size = 3
write_quorum = 2
ack_quorum = 2
last_entry = 29
"""
    return header + body


#: Two groups of ledgers on four bookies: 1-4 on bookies 1, 2, 3 and 70-71 on bookies 1, 3, 4 (a scenario's body).
TWO_GROUPS = """
[[ledgers]]
ids = [[1, 4]]
ensemble = ["bookie-1", "bookie-2", "bookie-3"]

[[ledgers]]
ids = [[70, 71]]
ensemble = ["bookie-1", "bookie-3", "bookie-4"]
"""
#: The ledger ids of :data:`TWO_GROUPS`.
TWO_GROUPS_LEDGERS = frozenset({1, 2, 3, 4, 70, 71})
