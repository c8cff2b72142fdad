"""The one exception hierarchy of Scrutiny.

Every error Scrutiny raises on bad input derives from :class:`ScrutinyError`; callers that
must never crash (the streaming job, the CLI) catch that root and turn it into a recorded
violation or a one-line message. Subclasses carry the fields a caller needs.
"""

from __future__ import annotations


class ScrutinyError(Exception):
    """Root of every error Scrutiny raises deliberately."""


class FormatError(ScrutinyError, ValueError):
    """Bytes or text that do not decode as the format they claim to be.

    ``what`` names the format (``"ledger metadata"``, ``"entry listing"``, ...) and
    ``reason`` says what is wrong, in words an operator can act on. ``offset`` is the byte
    offset of the problem when it is known.
    """

    def __init__(self, what: str, reason: str, *, offset: int | None = None) -> None:
        self.what = what
        self.reason = reason
        self.offset = offset
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"invalid {what}{where}: {reason}")


class MetadataFormatError(FormatError):
    """Ledger metadata bytes that do not decode (wrong header, unknown version, bad fields)."""

    def __init__(self, reason: str, *, offset: int | None = None, format_version: int | None = None) -> None:
        self.format_version = format_version
        super().__init__("ledger metadata", reason, offset=offset)


class ListingFormatError(FormatError):
    """Entry-listing (AvailabilityOfEntriesOfLedger) bytes that are truncated or inconsistent."""

    def __init__(self, reason: str, *, offset: int | None = None) -> None:
        super().__init__("entry listing", reason, offset=offset)


class PathError(ScrutinyError, ValueError):
    """A ZooKeeper path or ledger id that the ledger manager's layout cannot map."""


class ConfigError(ScrutinyError, ValueError):
    """Configuration that is missing, malformed or out of range; says which key."""
