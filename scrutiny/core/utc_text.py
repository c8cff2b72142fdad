"""Epoch milliseconds as the UTC time a person reads (``2026-11-24T09:06:58Z``), without the clock or ``datetime``.

The core does no I/O and reads no clock, so it formats by arithmetic: days since 1970-01-01 to a proleptic
Gregorian date in 400-year eras (146,097 days each), counting years from March so that the leap day comes last.
"""

from __future__ import annotations

from typing import Final

_MS_PER_DAY: Final = 86_400_000
_DAYS_PER_ERA: Final = 146_097
_DAYS_0000_03_01_TO_EPOCH: Final = 719_468


def civil_date(days: int) -> tuple[int, int, int]:
    """(year, month, day) of the date ``days`` after 1970-01-01 (negative: before it)."""
    shifted = days + _DAYS_0000_03_01_TO_EPOCH  # days since 0000-03-01
    era = shifted // _DAYS_PER_ERA
    day_of_era = shifted - era * _DAYS_PER_ERA  # 0 .. 146096
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)  # from March 1st
    month_from_march = (5 * day_of_year + 2) // 153  # 0 = March .. 11 = February
    day = day_of_year - (153 * month_from_march + 2) // 5 + 1
    month = month_from_march + 3 if month_from_march < 10 else month_from_march - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def format_utc_ms(epoch_ms: int) -> str:
    """``epoch_ms`` as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC (milliseconds dropped; years 1..9999)."""
    days, in_day = divmod(epoch_ms, _MS_PER_DAY)
    year, month, day = civil_date(days)
    seconds = in_day // 1000
    return f"{year:04d}-{month:02d}-{day:02d}T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


def format_duration_ms(duration_ms: int) -> str:
    """A short human duration: ``42 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``."""
    seconds = max(0, duration_ms) // 1000
    if seconds < 120:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"
