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
#: The protocol name of the endpoint an agent advertises in its bookie's ``BookieServiceInfo`` registration.
AGENT_ENDPOINT_PROTOCOL: Final = "scrutiny-agent"
