"""Every command that reads the configuration meets a bad one with exit code 2 and one line on stderr, never a
traceback: a file that is not UTF-8, numbers that are not finite, out-of-range ports and partitions."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scrutiny.cli.main import main

COMMANDS = [["report"], ["sql", "SELECT 1"], ["scan", "--fast"], ["dashboard"], ["watch"], ["run"]]


@dataclass(frozen=True)
class Bad:
    """A bad configuration: the file's bytes (None: no file), environment variables, what the error line names."""

    what: str
    named: str
    content: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)


BAD = [
    Bad("a file that is not UTF-8", "not UTF-8", b'[checker]\ndata_dir = "\xff\xfe"\n'),
    Bad("inf in the file", "checker.trigger_seconds must be a finite", b"[checker]\ntrigger_seconds = inf\n"),
    Bad("nan in the file", "retry_initial_seconds must be a finite", b"[checker]\nretry_initial_seconds = nan\n"),
    Bad("inf in the environment", "must be a finite number", env={"SCRUTINY_CHECKER_TRIGGER_SECONDS": "inf"}),
    Bad("NaN in the environment", "must be a finite number", env={"SCRUTINY_CHECKER_FETCH_TIMEOUT_SECONDS": "NaN"}),
    Bad("negative partitions", "shuffle_partitions must be at least 1", b"[checker]\nshuffle_partitions = -2\n"),
    Bad("port 99999", "checker.metrics_port must be a port", b"[checker]\nmetrics_port = 99999\n"),
    Bad("port -1", "watcher.metrics_port must be a port", env={"SCRUTINY_WATCHER_METRICS_PORT": "-1"}),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("bad", BAD, ids=lambda b: b.what)
def test_a_bad_configuration_is_one_line_and_exit_code_2(
    command: list[str],
    bad: Bad,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [n for n in os.environ if n.startswith("SCRUTINY_")]:
        monkeypatch.delenv(name)
    for name, value in bad.env.items():
        monkeypatch.setenv(name, value)
    argv = list(command)
    if bad.content is not None:
        config = tmp_path / "scrutiny.toml"
        config.write_bytes(bad.content)
        argv += ["--config", str(config)]
    monkeypatch.chdir(tmp_path)  # nothing a command might write lands in the checkout
    assert main(argv) == 2, bad.what
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("scrutiny: error: ") and bad.named in err[0], err
