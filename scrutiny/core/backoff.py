"""Exponential backoff as data: the one rule every retry, reconnect and re-check of the project waits by.

Retry number ``n`` (0, 1, ...) waits ``min(maximum_s, initial_s * multiplier**n)``, scaled by a factor in
``[1 - jitter, 1 + jitter]`` chosen by ``unit_random`` (a number in ``[0, 1)`` the caller draws, so this stays
pure and tests are exact), and never more than ``maximum_s``. With ``jitter`` 0 the wait is the same every time.
"""

from __future__ import annotations

from dataclasses import dataclass

from scrutiny.core.errors import ConfigError

#: Exponents above this reach the maximum for any sensible initial delay; capping it keeps the arithmetic finite.
_MAX_EXPONENT = 64


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays that grow by ``multiplier`` from ``initial_s`` up to ``maximum_s`` seconds, spread by ``jitter``."""

    initial_s: float = 0.1
    maximum_s: float = 10.0
    multiplier: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.initial_s <= self.maximum_s:
            raise ConfigError(f"backoff delays must satisfy 0 <= initial <= maximum, not {self}")
        if self.multiplier < 1 or not 0 <= self.jitter < 1:
            raise ConfigError(f"backoff multiplier must be >= 1 and jitter in [0, 1), not {self}")

    def delay(self, retry: int, unit_random: float = 0.5) -> float:
        """Seconds to wait before retry number ``retry`` (0-based); ``unit_random`` in ``[0, 1)`` sets the jitter."""
        base = min(self.maximum_s, self.initial_s * self.multiplier ** min(max(retry, 0), _MAX_EXPONENT))
        return min(self.maximum_s, base * (1.0 - self.jitter + 2.0 * self.jitter * unit_random))
