"""The compiled modules added to the archive Spark's Python workers import PySpark from."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scrutiny.streaming.worker_bytecode import MARKER, add_bytecode, has_bytecode, main, pyspark_archive

SOURCES = {
    "pyspark/__init__.py": "VALUE = 41\n",
    "pyspark/inner.py": "from pyspark import VALUE\nANSWER = VALUE + 1\n",
    "pyspark/data.txt": "not code\n",
}


def _archive(path: Path, entries: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, text in entries.items():
            zipped.writestr(name, text)
    return path


def _import_from(archive: Path, statement: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(archive), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", statement], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_every_module_gets_its_bytecode_and_the_workers_import_it(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "pyspark.zip", SOURCES)
    assert not has_bytecode(archive)

    done = add_bytecode(archive)

    assert done.modules == 2
    with zipfile.ZipFile(archive) as zipped:
        names = set(zipped.namelist())
        assert names == {*SOURCES, "pyspark/__init__.pyc", "pyspark/inner.pyc"}
        assert all(zipped.read(name).decode() == text for name, text in SOURCES.items())
    assert has_bytecode(archive)
    printed = _import_from(archive, "import pyspark.inner as m; print(m.ANSWER, m.__file__)")
    answer, origin = printed.split()
    assert answer == "42"
    assert origin.endswith("pyspark.zip/pyspark/inner.pyc")  # the compiled module, not the source


def test_an_archive_with_its_bytecode_is_left_as_it_is(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "pyspark.zip", SOURCES)
    add_bytecode(archive)
    before = archive.read_bytes()

    assert add_bytecode(archive).modules == 0
    assert archive.read_bytes() == before


def test_a_module_that_does_not_compile_leaves_the_archive_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = _archive(tmp_path / "pyspark.zip", {**SOURCES, "pyspark/broken.py": "def (:\n"})
    before = archive.read_bytes()

    assert main([str(archive)]) == 1

    assert "worker_bytecode:" in capsys.readouterr().err
    assert archive.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["pyspark.zip"]  # no temporary file left


def test_the_installed_pyspark_archive_carries_its_bytecode() -> None:
    archive = pyspark_archive()
    assert archive.is_file()
    with zipfile.ZipFile(archive) as zipped:
        assert MARKER in zipped.NameToInfo
        assert "pyspark/worker.pyc" in zipped.NameToInfo
