"""JSON without spaces, as the job's rows and state carry it: :func:`compact_json`.

``json.dumps(value, separators=(",", ":"))`` builds a new encoder on every call (its arguments are not the default
ones), about as long as encoding a small document; the checker encodes several per ledger. One encoder, made once,
gives the same text.
"""

from __future__ import annotations

import json

_ENCODER = json.JSONEncoder(separators=(",", ":"))


def compact_json(value: object) -> str:
    """``value`` as JSON text without spaces: what ``json.dumps(value, separators=(",", ":"))`` returns."""
    return _ENCODER.encode(value)
