"""A guard for protobuf text read from ZooKeeper, ahead of protobuf's own parser.

The protobuf runtime unescapes a string with a regular expression that backtracks over every run of
backslashes: its time grows with the square of the longest run (20,000 backslashes take over a second,
a 1 MB znode would take hours). BookKeeper's records never hold more than a few escapes in a row (an
escaped backslash is two), so text with a longer run is refused before it is parsed: the parse then stays
linear in the text.
"""

from __future__ import annotations

import re
from typing import Final

#: The longest run of backslashes accepted in protobuf text (each run costs the square of its length).
MAX_BACKSLASH_RUN: Final = 64
_LONG_RUN: Final = re.compile(rf"\\{{{MAX_BACKSLASH_RUN + 1}}}")


def escape_problem(text: str) -> str | None:
    """Why ``text`` must not reach protobuf's text parser (None: it may)."""
    found = _LONG_RUN.search(text)
    if found is None:
        return None
    return f"more than {MAX_BACKSLASH_RUN} backslashes in a row at character {found.start()}"
