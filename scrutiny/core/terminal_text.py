"""Stored text shown on a terminal: control characters made visible, so that no escape sequence passes.

Custom metadata, Pulsar topic names and details come from whoever can write ZooKeeper; printed raw, an ESC
(``\\x1b``) could move the cursor, rewrite earlier lines or retitle the window. Every C0 and C1 control character and
DEL is shown as its Python escape (``\\x1b``, ``\\x9b``); a newline is kept only where the text is a whole report.
"""

from __future__ import annotations

import re

_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROLS_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with its control characters (newlines too, unless ``keep_newlines``) shown as escapes."""
    pattern = _CONTROLS_BUT_NEWLINE if keep_newlines else _CONTROLS
    return pattern.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
