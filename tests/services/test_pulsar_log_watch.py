"""The Pulsar broker's start sees a port taken under it in its log: the log watch reads only what the log gains."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrutiny.services.pulsar import _BIND_FAILED, _LogWatch

pytestmark = pytest.mark.unit


def test_the_watch_finds_the_phrase_only_in_what_the_log_gained(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"an earlier start: Failed to bind to /127.0.0.1:1\n")
    watch = _LogWatch(log)
    assert not watch.saw(_BIND_FAILED)  # what the log held before the watch began is not this start's
    with log.open("ab") as handle:
        handle.write(b"starting the broker\njava.io.IOException: Failed to b")
    assert not watch.saw(_BIND_FAILED)
    with log.open("ab") as handle:
        handle.write(b"ind to /127.0.0.1:46395\n")  # the phrase split across two reads
    assert watch.saw(_BIND_FAILED)


def test_a_missing_log_is_nothing_seen(tmp_path: Path) -> None:
    watch = _LogWatch(tmp_path / "server.log")
    assert not watch.saw(_BIND_FAILED)
    (tmp_path / "server.log").write_bytes(b"FAILED TO BIND TO /127.0.0.1:9\n")
    assert watch.saw(_BIND_FAILED)
