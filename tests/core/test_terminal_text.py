"""Stored text reaches a terminal with every control character shown as an escape, never as an escape sequence."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from scrutiny.cli.sql import render
from scrutiny.connectors.tables.sql import QueryResult
from scrutiny.core.terminal_text import terminal_safe

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def test_an_escape_sequence_in_a_topic_name_is_shown_not_obeyed() -> None:
    assert terminal_safe("persistent://t/n/\x1b[2Jtopic\x9b1m") == "persistent://t/n/\\x1b[2Jtopic\\x9b1m"
    assert terminal_safe("line one\nline two\x07", keep_newlines=True) == "line one\nline two\\x07"
    assert terminal_safe("a\nb") == "a\\x0ab"


@given(st.text())
def test_no_control_character_passes_and_other_text_is_kept(text: str) -> None:
    shown = terminal_safe(text)
    assert not _CONTROL.search(shown)
    if "\\" not in text:  # the escapes read back give the text itself
        assert re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), shown) == text
    kept = terminal_safe(text, keep_newlines=True)
    assert kept.count("\n") == text.count("\n") and not _CONTROL.search(kept.replace("\n", ""))


def test_the_sql_table_shows_stored_control_characters_as_escapes() -> None:
    result = QueryResult(("pulsar_topic",), ("VARCHAR",), [("evil\x1b]0;owned\x07",)])
    table = render(result, "table")
    assert "\x1b" not in table and "\x07" not in table and "evil\\x1b]0;owned\\x07" in table
    assert "\x1b" in render(result, "json").encode().decode("unicode_escape")  # JSON keeps the data, escaped
