"""Where to reach a bookie: its id resolved to the (host, port) of its v3 protocol endpoint.

Pure functions over data the caller already holds (configuration overrides and the bookies'
registration records read from ZooKeeper elsewhere); nothing here does I/O. The order, from
first to last resort:

1. an override from the configuration (``bookie id -> "host:port"``), for clusters whose
   advertised addresses are not reachable from where Scrutiny runs;
2. the ``bookie-rpc`` endpoint of the bookie's registration (``BookieServiceInfoFormat``);
3. the id itself when it is a legacy ``host:port`` id;

and otherwise :class:`BookieAddressError`, which names the bookie and says why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from scrutiny.core.errors import FormatError, ScrutinyError
from scrutiny.core.zk_records import BookieServiceInfo, bookie_address_from_id, parse_bookie_service_info

Address = tuple[str, int]

_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>[0-9]{1,5})")


class BookieAddressError(ScrutinyError, ValueError):
    """A bookie id (or a configured address) that cannot be turned into a (host, port).

    ``bookie_id`` is the bookie concerned (None for a bare address that does not parse).
    """

    def __init__(self, message: str, *, bookie_id: str | None = None) -> None:
        self.bookie_id = bookie_id
        super().__init__(message)


def parse_address(text: str, *, bookie_id: str | None = None) -> Address:
    """``"host:port"`` (or ``"[v6addr]:port"``) as (host, port), port in 1..65535.

    Raises :class:`BookieAddressError` for anything else.
    """
    match = _HOST_PORT.fullmatch(text.strip())
    port = int(match.group("port")) if match is not None else 0
    if match is None or not 0 < port <= 65535:
        whose = f" for bookie {bookie_id!r}" if bookie_id is not None else ""
        raise BookieAddressError(
            f"address {text!r}{whose} is not host:port with a port in 1..65535", bookie_id=bookie_id
        )
    return (match.group("v6") or match.group("host"), port)


def resolve_bookie_address(
    bookie_id: str,
    *,
    overrides: Mapping[str, Address | str] | None = None,
    registration: BookieServiceInfo | bytes | None = None,
) -> Address:
    """The (host, port) to send v3 requests for ``bookie_id`` to.

    ``overrides`` maps bookie ids to an address (a tuple or ``"host:port"``; a malformed
    override is an error, never skipped). ``registration`` is the bookie's registration:
    parsed, or the raw bytes of its ``available/<id>`` node (empty = legacy bookie).
    Registration bytes that do not decode, or a registration without a usable ``bookie-rpc``
    endpoint, fall through to the id. Raises :class:`BookieAddressError` when nothing gives
    an address.
    """
    if overrides is not None and bookie_id in overrides:
        override = overrides[bookie_id]
        return parse_address(override, bookie_id=bookie_id) if isinstance(override, str) else override
    info, registration_problem = _registration_info(registration)
    if info is not None:
        address = info.rpc_address()
        if address is not None:
            return address
        registration_problem = "its registration has no bookie-rpc endpoint with a host and port"
    address = bookie_address_from_id(bookie_id)
    if address is not None:
        return address
    reasons = ["it has no address override", registration_problem or "no registration is known for it"]
    raise BookieAddressError(
        f"cannot resolve bookie id {bookie_id!r} to an address: {'; '.join(reasons)}; and the id is not host:port",
        bookie_id=bookie_id,
    )


def _registration_info(registration: BookieServiceInfo | bytes | None) -> tuple[BookieServiceInfo | None, str]:
    """The parsed registration (or None) and, when it is unusable, why."""
    if registration is None:
        return None, ""
    if isinstance(registration, BookieServiceInfo):
        return registration, ""
    try:
        info = parse_bookie_service_info(registration)
    except FormatError as err:
        return None, f"its registration does not decode ({err})"
    return info, "" if info is not None else "its registration is empty (legacy bookie)"


@dataclass(frozen=True)
class BookieAddressBook:
    """Overrides and known registrations, usable as a resolver (``book.resolve(bookie_id)``).

    Immutable: build a new book (:meth:`with_registrations`) when registrations change. The
    mappings are copied at construction.
    """

    overrides: Mapping[str, Address | str] = field(default_factory=dict, hash=False)
    registrations: Mapping[str, BookieServiceInfo | bytes | None] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for bookie_id, override in self.overrides.items():
            if isinstance(override, str):
                parse_address(override, bookie_id=bookie_id)  # fail at configuration time, not per request
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))
        object.__setattr__(self, "registrations", MappingProxyType(dict(self.registrations)))

    def resolve(self, bookie_id: str) -> Address:
        """See :func:`resolve_bookie_address`; raises :class:`BookieAddressError`."""
        return resolve_bookie_address(
            bookie_id, overrides=self.overrides, registration=self.registrations.get(bookie_id)
        )

    def with_registrations(self, registrations: Mapping[str, BookieServiceInfo | bytes | None]) -> BookieAddressBook:
        """The same overrides with these registrations instead of the current ones."""
        return BookieAddressBook(overrides=self.overrides, registrations=registrations)
