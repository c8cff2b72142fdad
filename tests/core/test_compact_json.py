"""compact_json gives json.dumps's text without spaces."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.compact_json import compact_json

pytestmark = pytest.mark.unit

documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(documents)
def test_the_same_text_as_json_dumps_with_compact_separators(value: object) -> None:
    assert compact_json(value) == json.dumps(value, separators=(",", ":"))
