"""The code keeps the design of docs/architecture.md: its package table, its vocabulary, a pure core, no shadowing.

The table is read from the page itself, so the page and the code cannot drift apart: a new import across packages
must be allowed there first (and so be seen by whoever reads the design).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from scrutiny.core.vocabulary import FIXED_SEVERITY, Category
from scrutiny.paths import PROJECT_ROOT

REPO = PROJECT_ROOT
ARCHITECTURE = REPO / "docs" / "architecture.md"
#: Repository directory -> the package it is installed as.
INSTALLED_AS = {"scrutiny": "scrutiny", "connectors": "scrutiny.connectors", "streaming": "scrutiny.streaming"}
#: Outside libraries whose use the table restricts (light standard-library-like ones are free to use).
GOVERNED_LIBRARIES = frozenset(
    {
        "pyspark",
        "py4j",
        "dash",
        "flask",
        "duckdb",
        "grpc",
        "kazoo",
        "kafka",
        "confluent_kafka",
        "deltalake",
        "delta",
        "rocksdict",
        "pyarrow",
    }
    | {"pandas", "prometheus_client", "plotly"}
)
# The pure core does no I/O: no sockets, processes, files or clocks.
CORE_FORBIDDEN_MODULES = (
    "socket",
    "subprocess",
    "time",
    "datetime",
    "os",
    "pathlib",
    "kazoo",
    "kafka",
    "confluent_kafka",
    "grpc",
)
_ROW = re.compile(r"^\| `(?P<package>[a-z_.]+)` \| (?P<holds>[^|]+) \| (?P<imports>[^|]+) \| (?P<libraries>[^|]+) \|$")
_NAME = re.compile(r"`([a-z_.]+)`")


def package_table() -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Package -> (packages it may import, outside libraries it may import), in the page's order."""
    table: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for line in ARCHITECTURE.read_text().splitlines():
        row = _ROW.match(line)
        if row is None:
            continue
        imports = row["imports"].strip()
        allowed = set(table) if imports == "every package above" else set(_NAME.findall(imports))
        libraries = {name.strip() for name in row["libraries"].split(",")} - {"—"}
        table[row["package"]] = (frozenset(allowed), frozenset(libraries))
    return table


def source_files() -> Iterator[tuple[str, Path]]:
    """(module name, path) of every module of the product (generated protobuf code aside)."""
    for directory, package in INSTALLED_AS.items():
        for path in sorted((REPO / directory).rglob("*.py")):
            relative = path.relative_to(REPO / directory).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            yield ".".join([package, *parts]), path


def owner(module: str, packages: set[str]) -> str | None:
    """The most specific package of the table that ``module`` belongs to."""
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        candidate = ".".join(parts[:length])
        if candidate in packages:
            return candidate
    return None


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_table_is_read_and_names_every_layer() -> None:
    table = package_table()
    expected = {"scrutiny.core", "scrutiny.settings", "scrutiny.streaming.checker", "scrutiny.cli", "scrutiny.proto"}
    assert expected <= set(table)
    assert table["scrutiny.core"][0] == {"scrutiny.proto"}
    assert table["scrutiny.cli"][0] >= set(table) - {"scrutiny.cli"}


def test_every_module_belongs_to_a_package_of_the_table() -> None:
    packages = set(package_table())
    homeless = {module for module, _ in source_files() if owner(module, packages) is None}
    assert not homeless


def offending_imports(modules: Iterable[tuple[str, Path]]) -> list[str]:
    """Every import of ``modules`` that the table does not allow, one line each."""
    table = package_table()
    packages = set(table)
    offenders: set[str] = set()
    for module, path in modules:
        if module.startswith("scrutiny.proto"):
            continue
        home = owner(module, packages)
        assert home is not None, module
        allowed, libraries = table[home]
        for name in imported_modules(path):
            library = name.split(".")[0]
            if name.startswith("scrutiny"):
                target = owner(name, packages)
                if target is not None and target != home and target not in allowed:
                    offenders.add(f"{module} imports {target} ({home} may not)")
            elif library in GOVERNED_LIBRARIES and library not in libraries:
                offenders.add(f"{module} uses {library} ({home} may not)")
    return sorted(offenders)


def test_imports_across_packages_are_those_the_table_allows() -> None:
    assert offending_imports(source_files()) == []


def test_the_table_has_no_cycle() -> None:
    table = package_table()
    state: dict[str, int] = {}

    def visit(package: str, trail: tuple[str, ...]) -> None:
        if state.get(package) == 2:
            return
        assert state.get(package) != 1, f"cycle: {' -> '.join((*trail, package))}"
        state[package] = 1
        for target in table[package][0]:
            visit(target, (*trail, package))
        state[package] = 2

    for package in table:
        visit(package, ())


def test_connectors_import_no_other_connector_nor_anything_above_them() -> None:
    table = package_table()
    for package, (allowed, _) in table.items():
        if package.startswith("scrutiny.connectors."):
            assert allowed <= {"scrutiny.core", "scrutiny.proto", "scrutiny.paths"}, package


def test_the_vocabulary_of_the_page_is_the_codes() -> None:
    rows: dict[str, str] = {}
    section = ARCHITECTURE.read_text().split("## The findings", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    assert set(rows) == {c.value for c in Category}
    for category, severity in FIXED_SEVERITY.items():
        assert rows[category.value] == severity.value, category


def test_core_does_no_io() -> None:
    offenders = {
        f"{path.name}: {name}"
        for path in (REPO / "scrutiny" / "core").glob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in CORE_FORBIDDEN_MODULES
    }
    assert not offenders


def test_no_document_cites_a_design_outside_the_repository() -> None:
    texts = [*REPO.glob("*.md"), *(REPO / "docs").rglob("*.md"), *(REPO / "conf").rglob("*")]
    texts += [path for _, path in source_files()]
    citing = [str(p.relative_to(REPO)) for p in texts if p.is_file() and "DESIGN.md" in p.read_text(errors="ignore")]
    assert citing == []


def test_installed_layout_does_not_shadow_other_distributions(tmp_path: Path) -> None:
    """Installed, the layers are scrutiny.*; ``proto``, ``streaming`` and ``connectors`` stay free."""
    probe = (
        "import importlib.util, json, scrutiny.proto, scrutiny.streaming, scrutiny.connectors;"
        "print(json.dumps({n: getattr(importlib.util.find_spec(n), 'origin', None)"
        " for n in ('proto', 'streaming', 'connectors')} | {'scrutiny.proto': scrutiny.proto.__file__}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
    origins = json.loads(out.stdout)
    assert origins["scrutiny.proto"] == str(REPO / "proto" / "__init__.py")
    for name in ("proto", "streaming", "connectors"):
        assert origins[name] is None or not origins[name].startswith(str(REPO))


@pytest.mark.parametrize(
    "line",
    [
        "from scrutiny.streaming.session import build_spark_session",
        "from scrutiny.connectors.zookeeper.client import build_zookeeper_client",
        "import pyspark",
    ],
)
def test_the_import_check_catches_a_forbidden_import(line: str, tmp_path: Path) -> None:
    """The check itself can fail: a Kafka connector module importing Spark or another connector is reported."""
    module = tmp_path / "bad.py"
    module.write_text(f"{line}\n")
    assert len(offending_imports([("scrutiny.connectors.kafka.bad", module)])) == 1
