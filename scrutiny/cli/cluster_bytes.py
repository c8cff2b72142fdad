"""The raw bytes ``inspect`` and ``verdict`` read, taken from a live cluster instead of a file.

* :func:`read_ledger_znode`: a ledger's metadata znode from the configuration's ZooKeeper (ledgers root and ledger
  manager as the checker resolves them), byte for byte;
* :func:`fetch_bookie_listing`: one bookie's answer for one ledger, asked exactly as the checker asks it (v3 or the
  agent, by the ``[bookies]`` settings and the bookie's registration), and the listing re-encoded in the format
  ``inspect listing`` and ``verdict --listing`` read.

Imported only by the commands that use it (ZooKeeper and gRPC clients are not loaded for the others).
"""

from __future__ import annotations

from dataclasses import dataclass

from scrutiny.cli.common import InputError
from scrutiny.connectors.bookies.fetch import ListingFetcher, fetch_config_from_settings, plan_route
from scrutiny.connectors.zookeeper.client import close_zookeeper_client, start_zookeeper_client, zookeeper_target
from scrutiny.connectors.zookeeper.tree import read_optional
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.verdict import AnswerKind, BookieAnswer
from scrutiny.core.zk_paths import available_bookie_path, ledger_path, readonly_bookie_path
from scrutiny.settings.loader import Settings

#: How long the commands wait for ZooKeeper to connect.
CONNECT_TIMEOUT_S = 15.0


def read_ledger_znode(settings: Settings, ledger_id: int) -> bytes:
    """The bytes of ledger ``ledger_id``'s metadata znode; InputError when there is no such ledger."""
    target = zookeeper_target(settings.zookeeper)
    path = ledger_path(ledger_id, manager=target.manager, root=target.ledgers_root)
    client = start_zookeeper_client(settings.zookeeper, timeout_s=CONNECT_TIMEOUT_S, hosts=target.hosts)
    try:
        data = read_optional(client, path)
    finally:
        close_zookeeper_client(client)
    if data is None:
        raise InputError(f"no ledger {ledger_id} at {target.describe()}: {path} does not exist")
    return data


@dataclass(frozen=True, slots=True)
class FetchedListing:
    """A bookie's answer for one ledger: how it was asked, and the listing bytes when it holds entries."""

    bookie: str
    protocol: str
    address: str | None
    answer: BookieAnswer

    @property
    def listing_bytes(self) -> bytes | None:
        """The answer's groups encoded as ``AvailabilityOfEntriesOfLedger`` bytes; None unless a listing."""
        return encode_listing(self.answer.groups) if self.answer.kind is AnswerKind.LISTING else None


def fetch_bookie_listing(settings: Settings, ledger_id: int, bookie_id: str) -> FetchedListing:
    """Ask ``bookie_id`` for its entries of ``ledger_id`` as the checker does (one request, the configured timeout)."""
    target = zookeeper_target(settings.zookeeper)
    client = start_zookeeper_client(settings.zookeeper, timeout_s=CONNECT_TIMEOUT_S, hosts=target.hosts)
    try:
        root = target.ledgers_root
        registration = read_optional(client, available_bookie_path(bookie_id, root=root))
        if registration is None:
            registration = read_optional(client, readonly_bookie_path(bookie_id, root=root))
    finally:
        close_zookeeper_client(client)
    config = fetch_config_from_settings(settings.bookies)
    route = plan_route(bookie_id, registration, config)
    with ListingFetcher(config) as fetcher:
        result = fetcher.fetch({ledger_id: [bookie_id]}, {bookie_id: registration})
    return FetchedListing(bookie_id, route.protocol, route.target, result.answers[ledger_id][bookie_id])
