"""Compiled code for Spark's Python workers: PySpark's ``pyspark.zip`` with each module's bytecode beside its source.

Spark starts its Python workers with ``$SPARK_HOME/python/lib/pyspark.zip`` first on their ``PYTHONPATH`` (for a
pip-installed PySpark, the copy inside the package), so every worker imports PySpark from that archive, not from the
installed package. The archive holds sources only, and Python cannot write bytecode into a zip: each new worker
compiled every PySpark module it imports again (``pyspark.worker`` and the SQL, Arrow and streaming modules behind
it), about 0.6 s of CPU per worker here. Spark stops a worker idle for a minute, so a checker that idles between its
micro-batches, each Spark session of the tests and each scan paid it over and over.

:func:`add_bytecode` writes, beside every ``.py`` of the archive, its ``.pyc`` (unchecked hash-based, the form
Python's zip importer takes as it is): the same sources, compiled once. ``scripts/setup`` runs it after installing
the packages (``python -m scrutiny.streaming.worker_bytecode``); a PySpark installed again comes with a new archive
and is compiled again. The archive is replaced in one rename, so a worker starting meanwhile reads the old one or the
new one, never half of one.
"""

from __future__ import annotations

import _imp
import argparse
import importlib.util
import os
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path

#: The entry whose presence says the archive already carries its bytecode.
MARKER = "pyspark/__init__.pyc"


@dataclass(frozen=True, slots=True)
class Compiled:
    """What :func:`add_bytecode` did: modules compiled (0: the archive had its bytecode already)."""

    archive: Path
    modules: int


def pyspark_archive() -> Path:
    """The ``pyspark.zip`` that Spark puts on its workers' path for the installed PySpark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("PySpark is not installed")
    return Path(spec.origin).parent / "python" / "lib" / "pyspark.zip"


def has_bytecode(archive: Path) -> bool:
    """Whether ``archive`` holds compiled modules (:data:`MARKER`)."""
    with zipfile.ZipFile(archive) as zipped:
        return MARKER in zipped.NameToInfo


def add_bytecode(archive: Path) -> Compiled:
    """Rewrite ``archive`` with a ``.pyc`` beside each ``.py`` that has none; nothing to do when it has them."""
    if has_bytecode(archive):
        return Compiled(archive, 0)
    compiled = 0
    handle, temporary = tempfile.mkstemp(prefix=".pyspark-", suffix=".zip", dir=archive.parent)
    os.close(handle)
    try:
        with zipfile.ZipFile(archive) as source, zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
            names = set(source.namelist())
            for entry in source.infolist():
                data = source.read(entry)
                target.writestr(entry, data)
                name = entry.filename
                if not name.endswith(".py") or name + "c" in names:
                    continue
                target.writestr(_pyc_entry(entry, name + "c"), _bytecode(data, name))
                compiled += 1
        os.chmod(temporary, archive.stat().st_mode & 0o777)
        os.replace(temporary, archive)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return Compiled(archive, compiled)


def _pyc_entry(source: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    entry = zipfile.ZipInfo(name, date_time=source.date_time)
    entry.compress_type = zipfile.ZIP_DEFLATED
    entry.external_attr = source.external_attr
    return entry


def _bytecode(source: bytes, name: str) -> bytes:
    """``source`` compiled as a ``.pyc`` file's bytes, hash-based and unchecked (the zip importer trusts it)."""
    code = compile(source, name, "exec", dont_inherit=True)
    digest = _imp.source_hash(importlib.util._RAW_MAGIC_NUMBER, source)  # type: ignore[attr-defined]
    return bytes(_code_to_hash_pyc(code, digest, checked=False))


def main(argv: list[str] | None = None) -> int:
    """``python -m scrutiny.streaming.worker_bytecode [ARCHIVE]``: compile the workers' PySpark archive."""
    parser = argparse.ArgumentParser(prog="python -m scrutiny.streaming.worker_bytecode", description=__doc__)
    parser.add_argument("archive", nargs="?", type=Path, help="a pyspark.zip (default: the installed PySpark's)")
    args = parser.parse_args(argv)
    try:
        archive = args.archive or pyspark_archive()
        done = add_bytecode(archive)
    except (OSError, zipfile.BadZipFile, SyntaxError) as error:
        print(f"worker_bytecode: {error}", file=sys.stderr)
        return 1
    if done.modules:
        print(f"compiled {done.modules} modules of {done.archive}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
