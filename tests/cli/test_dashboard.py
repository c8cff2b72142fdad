"""``scrutiny dashboard``: the token it enforces and its exit codes.

It is served for real in tests/dashboard/test_dashboard_browser.py.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from scrutiny.cli.dashboard import TOKEN_ENV, resolve_token
from scrutiny.cli.main import main
from tests.support.dashboard_tables import known_tables


@pytest.fixture(scope="module")
def data_dir(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return known_tables(spark, tmp_path_factory)


def test_resolve_token() -> None:
    assert resolve_token("127.0.0.1", None, {}) == (None, False)
    assert resolve_token("127.0.0.1", "given", {TOKEN_ENV: "env"}) == ("given", False)
    assert resolve_token("0.0.0.0", None, {TOKEN_ENV: "env"}) == ("env", False)
    assert resolve_token("127.0.0.1", None, {TOKEN_ENV: "env"}) == ("env", False)
    token, generated = resolve_token("0.0.0.0", None, {TOKEN_ENV: " "})
    assert generated and token is not None and len(token) >= 40
    assert resolve_token("0.0.0.0", None, {})[0] != token


def test_command_exits_2_with_one_line_when_the_data_dir_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["dashboard", "--data-dir", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("scrutiny: error: data directory") and "does not exist" in err


def test_command_exits_2_when_the_data_dir_holds_no_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dashboard", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "holds none of the tables" in err


def test_command_exits_2_when_the_port_is_taken(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = main(["dashboard", "--data-dir", str(data_dir), "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in err


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--port", "70000"], "a port is 0..65535, got 70000"),
        (["--port", "x"], "expected a whole number, got 'x'"),
        (["--refresh-seconds", "0"], "must be positive, got 0"),
        (["--refresh-seconds", "-1"], "must be a finite number of seconds ≥ 0, got -1"),
        (["--refresh-seconds", "inf"], "must be a finite number of seconds ≥ 0, got inf"),
    ],
)
def test_command_refuses_bad_options(args: list[str], reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["dashboard", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "dashboard" in err
    assert f"argument {args[0]}: {reason}" in err


def test_a_token_comes_from_a_file_and_one_on_the_command_line_is_warned_about(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "token"
    empty.write_text("  \n")
    assert main(["dashboard", "--data-dir", str(data_dir), "--token-file", str(empty)]) == 2
    assert capsys.readouterr().err.strip() == f"scrutiny: error: the token file {empty} is empty"
    with socket.socket() as taken:  # the command stops at the bind, after reading its token
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        assert main(["dashboard", "--data-dir", str(data_dir), "--port", port, "--token", "s3cret"]) == 2
    warning, error = capsys.readouterr().err.strip().splitlines()
    assert "--token is visible to other users" in warning and "s3cret" not in warning + error
    with pytest.raises(SystemExit):
        main(["dashboard", "--token", "a", "--token-file", str(empty)])
    assert "not allowed with argument" in capsys.readouterr().err
