"""The layers of DESIGN.md: core imports neither connectors nor streaming; connectors never streaming."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scrutiny.paths import PROJECT_ROOT

REPO = PROJECT_ROOT
LAYERS = {
    "core": (REPO / "scrutiny" / "core", ("scrutiny.connectors", "scrutiny.streaming")),
    "connectors": (REPO / "connectors", ("scrutiny.streaming",)),
}
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
    "grpc",
    "pyspark",
)


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layers_do_not_import_upwards(layer: str) -> None:
    directory, forbidden = LAYERS[layer]
    offenders = {
        f"{path.name}: {name}"
        for path in directory.glob("*.py")
        for name in imported_modules(path)
        if name.startswith(forbidden)
    }
    assert not offenders


def test_core_does_no_io() -> None:
    offenders = {
        f"{path.name}: {name}"
        for path in (REPO / "scrutiny" / "core").glob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in CORE_FORBIDDEN_MODULES
    }
    assert not offenders


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
