"""Epoch milliseconds as UTC text, against Python's own calendar (the reference)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.utc_text import civil_date, format_utc_ms

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIRST_MS = int((datetime(1, 1, 1, tzinfo=UTC) - EPOCH) / timedelta(milliseconds=1))
LAST_MS = int((datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - EPOCH) / timedelta(milliseconds=1))


def reference(epoch_ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=epoch_ms)).strftime("%Y-%m-%dT%H:%M:%SZ").rjust(20, "0")


@given(st.integers(FIRST_MS, LAST_MS))
def test_utc_text_matches_pythons_calendar(epoch_ms: int) -> None:
    assert format_utc_ms(epoch_ms) == reference(epoch_ms)


@given(st.integers(-719_162, 2_932_896))  # 0001-01-01 .. 9999-12-31
def test_civil_date_matches_pythons_calendar(days: int) -> None:
    date = (EPOCH + timedelta(days=days)).date()
    assert civil_date(days) == (date.year, date.month, date.day)


def test_known_moments() -> None:
    assert format_utc_ms(0) == "1970-01-01T00:00:00Z"
    assert format_utc_ms(1795566418191) == "2026-11-25T00:26:58Z"
    assert format_utc_ms(951782400000) == "2000-02-29T00:00:00Z"  # a leap day of a century divisible by 400
    assert format_utc_ms(-1) == "1969-12-31T23:59:59Z"
