"""The bookie agent's service as its client, its server and the simulated bookies share it (no I/O).

The messages are in ``proto/bookie_agent.proto``; this module holds the facts both ends must agree on: the gRPC
service name, the size limits a server enforces by default (a client sizes its calls to fit them), and the name of
the endpoint an agent advertises in its bookie's registration.
"""

from __future__ import annotations

from typing import Final

from scrutiny.proto import bookie_agent_pb2 as pb

#: The full gRPC service name, from the generated descriptor (``scrutiny.agent.v1.BookieAgent``).
SERVICE_NAME: Final[str] = pb.DESCRIPTOR.services_by_name["BookieAgent"].full_name
#: Ledgers one GetListings call may ask for.
DEFAULT_MAX_LEDGERS_PER_CALL: Final = 10_000
#: The largest request and response message, in bytes.
DEFAULT_MAX_REQUEST_BYTES: Final = 1 << 20
DEFAULT_MAX_RESPONSE_BYTES: Final = 64 << 20
#: Ledgers in one ListLedgers page when the request leaves it to the agent (``max_ledgers`` 0). A page holds at most
#: the agent's per-call limit of ledgers (:data:`DEFAULT_MAX_LEDGERS_PER_CALL` by default), fewer when its response
#: size limit needs it (:func:`ledgers_per_page_cap`).
DEFAULT_LEDGERS_PER_PAGE: Final = 10_000
#: The most bytes one ``HeldLedger`` takes in a ``LedgersPage``: its tag and length (2), the id (1 + 9: ids are
#: non-negative), two booleans (2 + 2) and two entry ids (1 + 10 each: -1 takes ten bytes as a varint).
MAX_HELD_LEDGER_BYTES: Final = 38
#: Bytes of a ``LedgersPage`` beside its ledgers (the bookie id, ``end``, ``as_of_ms``), with room to spare.
PAGE_OVERHEAD_BYTES: Final = 4096


def ledgers_per_page_cap(max_ledgers_per_call: int, max_response_bytes: int) -> int:
    """The most ledgers an agent puts in one ListLedgers page: its per-call limit, or fewer when a page of that many
    could exceed its largest response (at least 1)."""
    by_size = (max_response_bytes - PAGE_OVERHEAD_BYTES) // MAX_HELD_LEDGER_BYTES
    return max(1, min(max_ledgers_per_call, by_size))


#: The protocol name of the endpoint an agent advertises in its bookie's ``BookieServiceInfo`` registration.
AGENT_ENDPOINT_PROTOCOL: Final = "scrutiny-agent"
