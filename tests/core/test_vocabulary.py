"""The closed vocabulary is one contract: every category has its severity rule, its place in the JSON schema of a
violation and its row in the design's table of findings."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scrutiny.core.vocabulary import FIXED_SEVERITY, Category

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
#: The categories whose severity depends on the evidence.
VARIABLE = {Category.MISSING_REPLICA, Category.ENTRIES_BEYOND_LAST_ENTRY, Category.AUTORECOVERY_DISABLED}


def test_every_category_has_a_severity_rule() -> None:
    assert set(FIXED_SEVERITY) | VARIABLE == set(Category)
    assert not set(FIXED_SEVERITY) & VARIABLE


def test_the_json_schema_lists_every_category() -> None:
    schema = json.loads((ROOT / "conf" / "schemas" / "violation.schema.json").read_text())
    assert schema["properties"]["category"]["enum"] == [c.value for c in Category]


def test_the_design_names_every_category_with_its_severity() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \|.*\| ([^|]+) \|$", text, flags=re.MULTILINE))
    for category, severity in FIXED_SEVERITY.items():
        assert rows.get(category.value) == severity.value, category
    assert {Category(name) for name in rows} == set(Category)
