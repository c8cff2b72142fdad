"""A value that must never be printed: passwords, credentials, tokens."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Secret:
    """A password or credential: compare and pass it around, print it never."""

    value: str = ""

    def __repr__(self) -> str:
        return "Secret('***')" if self.value else "Secret('')"

    __str__ = __repr__

    def reveal(self) -> str:
        """The secret itself, for the one call that needs it."""
        return self.value
