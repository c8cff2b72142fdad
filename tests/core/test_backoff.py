"""The one backoff rule: growth, cap, jitter band, refusal of nonsense; checked against a plain reference."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.backoff import Backoff
from scrutiny.core.errors import ConfigError


def reference_delay(backoff: Backoff, retry: int, u: float) -> float:
    """Retry by retry: multiply until the cap, then spread and cap again."""
    base = backoff.initial_s
    for _ in range(retry):
        base = min(backoff.maximum_s, base * backoff.multiplier)
    spread = min(backoff.maximum_s, base) * (1 - backoff.jitter + 2 * backoff.jitter * u)
    return min(backoff.maximum_s, spread)


backoffs = st.builds(
    lambda initial, extra, multiplier, jitter: Backoff(initial, initial + extra, multiplier, jitter),
    st.floats(0.001, 5.0),
    st.floats(0.0, 100.0),
    st.floats(1.0, 4.0),
    st.floats(0.0, 0.99),
)


@given(backoff=backoffs, retry=st.integers(0, 40), u=st.floats(0.0, 0.999999))
def test_delay_matches_the_reference(backoff: Backoff, retry: int, u: float) -> None:
    expected = reference_delay(backoff, retry, u)
    assert backoff.delay(retry, u) == pytest.approx(expected, rel=1e-9)
    assert 0 <= backoff.delay(retry, u) <= backoff.maximum_s


def test_growth_and_cap_without_jitter() -> None:
    backoff = Backoff(initial_s=0.1, maximum_s=1.0, multiplier=2.0)
    assert [round(backoff.delay(n), 9) for n in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert backoff.delay(10**6) == 1.0  # no overflow however many retries


def test_jitter_spans_its_band() -> None:
    backoff = Backoff(initial_s=1.0, maximum_s=10.0, jitter=0.2)
    assert backoff.delay(0, 0.0) == pytest.approx(0.8) and backoff.delay(0, 0.999999) == pytest.approx(1.2, rel=1e-5)
    assert backoff.delay(0, 0.5) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "arguments",
    [
        {"initial_s": -1.0},
        {"initial_s": 2.0, "maximum_s": 1.0},
        {"multiplier": 0.5},
        {"jitter": -0.1},
        {"jitter": 1.0},
    ],
)
def test_nonsense_is_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Backoff(**arguments)
