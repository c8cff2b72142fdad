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
