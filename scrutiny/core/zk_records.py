"""The small records BookKeeper and Pulsar keep in ZooKeeper, parsed and formatted.

Covers the under-replication mark (protobuf text), the replication lock and auditor vote
(protobuf text), the ``LAYOUT`` node, a bookie's cookie (a version line, then protobuf text), a
bookie's ``BookieServiceInfoFormat`` registration (binary protobuf) and Pulsar's rack map (JSON in
``/bookies``). Pure functions: every parser
returns a value or raises :class:`~scrutiny.core.errors.FormatError`, never another exception.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypeVar

from google.protobuf import message as pb_message
from google.protobuf import text_format

from scrutiny.core.errors import FormatError
from scrutiny.core.protobuf_text import escape_problem
from scrutiny.core.zk_paths import LedgerManager
from scrutiny.proto import bookkeeper_formats_pb2 as pb

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

_Msg = TypeVar("_Msg", bound=pb_message.Message)


def _text_parse(data: bytes, msg: _Msg, what: str) -> _Msg:
    """Merge protobuf text ``data`` into ``msg`` the way BookKeeper's reader does.

    Like Java's ``TextFormat.merge``, a repeated singular field keeps its last value;
    unknown fields, bad syntax and non-UTF-8 bytes raise FormatError(``what``).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FormatError(what, "not valid UTF-8", offset=err.start) from None
    problem = escape_problem(text)
    if problem is not None:
        raise FormatError(what, f"not protobuf text this tool reads: {problem}")
    try:
        text_format.Merge(text, msg)
    except (text_format.ParseError, ValueError, RecursionError) as err:
        raise FormatError(what, f"not protobuf text: {err}") from None
    return msg


def _text_format(msg: pb_message.Message) -> bytes:
    """``msg`` as protobuf text, one ``field: value`` line each, non-ASCII escaped as octal.

    For ASCII values the bytes equal what BookKeeper's ``TextFormat.printToString`` writes.
    """
    return text_format.MessageToString(msg, as_utf8=False).encode("ascii")


# --------------------------------------------------------------------------- under-replication mark

_MARK: Final = "under-replication mark"


@dataclass(frozen=True)
class UnderReplicationMark:
    """An under-replication node's content.

    ``replicas`` are the bookie ids whose copies are missing (may be empty), in the order
    they were marked; ``ctime_ms`` is when the ledger was (last) marked, None if unknown.
    """

    replicas: tuple[str, ...]
    ctime_ms: int | None = None


def parse_underreplication_mark(data: bytes) -> UnderReplicationMark:
    """Decode a mark node's protobuf text (``replica: "<id>"`` lines, optional ``ctime: <ms>``).

    Empty data is a mark with no replicas and unknown ctime. Raises FormatError on bytes
    that are not UTF-8 text of ``UnderreplicatedLedgerFormat``.
    """
    msg = _text_parse(data, pb.UnderreplicatedLedgerFormat(), _MARK)
    ctime = msg.ctime if msg.HasField("ctime") else None
    return UnderReplicationMark(replicas=tuple(msg.replica), ctime_ms=ctime)


def format_underreplication_mark(mark: UnderReplicationMark) -> bytes:
    """The text BookKeeper writes: a ``replica: "x"\\n`` line per replica, then ``ctime: N\\n``.

    ``parse_underreplication_mark(format_underreplication_mark(m)) == m``. Raises
    FormatError if ``ctime_ms`` does not fit a signed 64-bit integer.
    """
    if mark.ctime_ms is not None and not _INT64_MIN <= mark.ctime_ms <= _INT64_MAX:
        raise FormatError(_MARK, f"ctime {mark.ctime_ms} does not fit int64")
    msg = pb.UnderreplicatedLedgerFormat(replica=mark.replicas)
    if mark.ctime_ms is not None:
        msg.ctime = mark.ctime_ms
    return _text_format(msg)


def merge_underreplication_mark(
    existing: UnderReplicationMark | None, missing: Sequence[str], now_ms: int
) -> UnderReplicationMark:
    """The mark after (re-)marking a ledger whose copies on ``missing`` are lost, at ``now_ms``.

    Keeps the existing replicas in order, appends each of ``missing`` not yet present (each
    bookie at most once) and sets the ctime to ``now_ms``, as BookKeeper does by default.
    """
    replicas = list(existing.replicas) if existing is not None else []
    for bookie_id in missing:
        if bookie_id not in replicas:
            replicas.append(bookie_id)
    return UnderReplicationMark(replicas=tuple(replicas), ctime_ms=now_ms)


# --------------------------------------------------------------------------- lock data and auditor vote


def _bookie_id_record(data: bytes, msg: pb.LockDataFormat | pb.AuditorVoteFormat, what: str) -> str | None:
    msg = _text_parse(data, msg, what)
    return msg.bookieId if msg.HasField("bookieId") else None


def parse_lock_data(data: bytes) -> str | None:
    """The bookie id in a replication lock node (text ``bookieId: "..."``), None if absent.

    Raises FormatError on bytes that are not UTF-8 text of ``LockDataFormat``.
    """
    return _bookie_id_record(data, pb.LockDataFormat(), "under-replication lock")


def parse_auditor_vote(data: bytes) -> str | None:
    """The bookie id in an auditor vote node (text ``bookieId: "..."``), None if absent.

    Raises FormatError on bytes that are not UTF-8 text of ``AuditorVoteFormat``.
    """
    return _bookie_id_record(data, pb.AuditorVoteFormat(), "auditor vote")


def format_lock_data(bookie_id: str) -> bytes:
    """A lock node's content as BookKeeper writes it: ``bookieId: "<id>"\\n``."""
    return _text_format(pb.LockDataFormat(bookieId=bookie_id))


def format_auditor_vote(bookie_id: str) -> bytes:
    """An auditor vote's content as BookKeeper writes it: ``bookieId: "<id>"\\n``."""
    return _text_format(pb.AuditorVoteFormat(bookieId=bookie_id))


# --------------------------------------------------------------------------- LAYOUT

_LAYOUT: Final = "ledger layout"

#: v2 layouts name a factory class; matched on the simple class name, so shaded names work.
_MANAGER_BY_CLASS: Final = {
    "HierarchicalLedgerManagerFactory": LedgerManager.HIERARCHICAL,
    # The legacy factory writes the same 2-4-4 paths the hybrid one reads for its (int) ids.
    "LegacyHierarchicalLedgerManagerFactory": LedgerManager.HIERARCHICAL,
    "LongHierarchicalLedgerManagerFactory": LedgerManager.LONG_HIERARCHICAL,
    "FlatLedgerManagerFactory": LedgerManager.FLAT,
}
#: v1 layouts name a manager type instead.
_MANAGER_BY_V1_TYPE: Final = {"flat": LedgerManager.FLAT, "hierarchical": LedgerManager.HIERARCHICAL}
_V1_DEFAULT_MANAGER_VERSION: Final = 1
_LAYOUT_CLASS = re.compile(r"[^\s:]+")


@dataclass(frozen=True)
class Layout:
    """The ``<root>/LAYOUT`` node: layout format version (1 or 2), manager class/type and version."""

    layout_version: int
    manager_class: str
    manager_version: int

    @property
    def manager(self) -> LedgerManager:
        """The ledger manager this layout names; FormatError if Scrutiny does not know it.

        Layout v1 names a type (``flat``, ``hierarchical``); v2 a factory class, matched on
        its simple name (``org.apache.pulsar.shade.org.apache.bookkeeper.meta.
        HierarchicalLedgerManagerFactory`` is hierarchical).
        """
        if self.layout_version == 1:
            manager = _MANAGER_BY_V1_TYPE.get(self.manager_class)
        else:
            manager = _MANAGER_BY_CLASS.get(self.manager_class.rsplit(".", 1)[-1])
        if manager is None:
            raise FormatError(_LAYOUT, f"unknown ledger manager {self.manager_class!r}")
        return manager


def parse_layout(data: bytes) -> Layout:
    """Decode ``LAYOUT``: UTF-8 ``"<1|2>\\n<class or type>:<version>"``, trailing newlines allowed.

    A v1 layout may omit ``:<version>`` (then the version is 1). Raises FormatError on any
    other shape: another layout version, a missing or extra line, a bad manager version.
    The manager class is not checked here; :attr:`Layout.manager` checks it.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise FormatError(_LAYOUT, "not valid UTF-8", offset=err.start) from None
    lines = text.rstrip("\n").split("\n")
    if lines[0] not in ("1", "2"):
        raise FormatError(_LAYOUT, f"layout version {lines[0]!r} is not 1 or 2")
    if len(lines) != 2:
        raise FormatError(_LAYOUT, f"expected 2 lines (version, manager), got {len(lines)}")
    layout_version = int(lines[0])
    name, colon, version = lines[1].partition(":")
    if not _LAYOUT_CLASS.fullmatch(name):
        raise FormatError(_LAYOUT, f"invalid ledger manager name {name!r}")
    if not colon and layout_version == 1:
        return Layout(layout_version, name, _V1_DEFAULT_MANAGER_VERSION)
    if not (version.isascii() and version.isdigit()) or len(version) > 10:
        raise FormatError(_LAYOUT, f"ledger manager version {version!r} is not a decimal number")
    return Layout(layout_version, name, int(version))


def format_layout(layout: Layout) -> bytes:
    """``LAYOUT`` as BookKeeper writes it: ``"<layout version>\\n<class>:<version>"``, no trailing newline.

    Raises FormatError if the fields could not be parsed back by :func:`parse_layout`.
    """
    if layout.layout_version not in (1, 2):
        raise FormatError(_LAYOUT, f"layout version {layout.layout_version} is not 1 or 2")
    if not _LAYOUT_CLASS.fullmatch(layout.manager_class):
        raise FormatError(_LAYOUT, f"invalid ledger manager name {layout.manager_class!r}")
    if not 0 <= layout.manager_version <= 9_999_999_999:
        raise FormatError(_LAYOUT, f"ledger manager version {layout.manager_version} is out of range")
    return f"{layout.layout_version}\n{layout.manager_class}:{layout.manager_version}".encode()


# --------------------------------------------------------------------------- cookie

_COOKIE: Final = "cookie"
#: The cookie layout BookKeeper 4.x writes; 4 is read too (same text body). Older layouts were plain text.
COOKIE_VERSION: Final = 5
_COOKIE_VERSIONS: Final = (4, 5)


@dataclass(frozen=True, slots=True)
class Cookie:
    """A bookie's cookie (``<root>/cookies/<id>``): the bookie it names and what it was formatted with.

    ``journal_dir`` is BookKeeper's string as stored (its journal directories); ``ledger_dirs`` and ``index_dirs``
    are decoded from BookKeeper's ``"<count>\t<dir>\t<dir>..."`` form (``index_dirs`` None: not stored).
    A cookie that changes (another ``instance_id``, other directories) means the bookie was formatted again.
    """

    bookie_host: str
    journal_dir: str
    ledger_dirs: tuple[str, ...]
    instance_id: str | None = None
    index_dirs: tuple[str, ...] | None = None
    version: int = COOKIE_VERSION


def parse_cookie(data: bytes) -> Cookie:
    """Decode a cookie: a layout version line (4 or 5), then ``CookieFormat`` as protobuf text.

    Raises FormatError on another version, bad text, a missing required field (``bookieHost``, ``journalDir``,
    ``ledgerDirs``) or a directory list whose count does not match its entries.
    """
    head, newline, body = data.partition(b"\n")
    if not newline or not head.strip().isdigit() or int(head) not in _COOKIE_VERSIONS:
        raise FormatError(_COOKIE, f"first line {head[:20]!r} is not a cookie layout version (4 or 5)")
    msg = _text_parse(body, pb.CookieFormat(), _COOKIE)
    missing = [name for name in ("bookieHost", "journalDir", "ledgerDirs") if not msg.HasField(name)]
    if missing:
        raise FormatError(_COOKIE, f"required field {missing[0]} is missing")
    return Cookie(
        bookie_host=msg.bookieHost,
        journal_dir=msg.journalDir,
        ledger_dirs=_cookie_dirs(msg.ledgerDirs, "ledgerDirs"),
        instance_id=msg.instanceId if msg.HasField("instanceId") else None,
        index_dirs=_cookie_dirs(msg.indexDirs, "indexDirs") if msg.HasField("indexDirs") else None,
        version=int(head),
    )


def format_cookie(cookie: Cookie) -> bytes:
    """The cookie as BookKeeper writes it; ``parse_cookie(format_cookie(c)) == c``."""
    msg = pb.CookieFormat(
        bookieHost=cookie.bookie_host,
        journalDir=cookie.journal_dir,
        ledgerDirs="\t".join((str(len(cookie.ledger_dirs)), *cookie.ledger_dirs)),
    )
    if cookie.instance_id is not None:
        msg.instanceId = cookie.instance_id
    if cookie.index_dirs is not None:
        msg.indexDirs = "\t".join((str(len(cookie.index_dirs)), *cookie.index_dirs))
    return f"{cookie.version}\n".encode() + _text_format(msg)


def _cookie_dirs(text: str, field_name: str) -> tuple[str, ...]:
    count, *dirs = text.split("\t")
    if not count.isdigit() or int(count) != len(dirs):
        raise FormatError(_COOKIE, f"{field_name} {text[:60]!r} is not '<count>\\t<dir>...' with that many dirs")
    return tuple(dirs)


# --------------------------------------------------------------------------- bookie service info

_SERVICE_INFO: Final = "bookie service info"
BOOKIE_RPC_PROTOCOL: Final = "bookie-rpc"
_ENDPOINT_REQUIRED: Final = ("id", "port", "host", "protocol")


@dataclass(frozen=True)
class Endpoint:
    """One endpoint a bookie advertises (``bookie-rpc``, ``http``, ...)."""

    id: str
    host: str
    port: int
    protocol: str
    auth: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()


@dataclass(frozen=True)
class BookieServiceInfo:
    """A bookie's registration data: its endpoints (in order) and properties.

    ``properties`` is a tuple of (key, value) pairs, normalised to key order at construction
    so equal maps compare equal; use :meth:`properties_dict` for a dict.
    """

    endpoints: tuple[Endpoint, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", tuple(sorted(self.properties)))

    def properties_dict(self) -> dict[str, str]:
        """The properties as a new dict."""
        return dict(self.properties)

    def rpc_address(self) -> tuple[str, int] | None:
        """(host, port) of the first ``bookie-rpc`` endpoint, None if none has a usable address."""
        for endpoint in self.endpoints:
            if endpoint.protocol == BOOKIE_RPC_PROTOCOL and endpoint.host and 0 < endpoint.port <= 65535:
                return endpoint.host, endpoint.port
        return None


def _all_str(values: Iterable[object]) -> bool:
    """True if every value is a str (protobuf's Python runtime yields bytes for invalid UTF-8)."""
    return all(isinstance(value, str) for value in values)


def _endpoint_from_proto(msg: pb.BookieServiceInfoFormat.Endpoint) -> Endpoint:
    strings = [msg.id, msg.host, msg.protocol, *msg.auth, *msg.extensions]
    if not _all_str(strings):
        raise FormatError(_SERVICE_INFO, "an endpoint string is not valid UTF-8")
    return Endpoint(
        id=msg.id,
        host=msg.host,
        port=msg.port,
        protocol=msg.protocol,
        auth=tuple(msg.auth),
        extensions=tuple(msg.extensions),
    )


def parse_bookie_service_info(data: bytes) -> BookieServiceInfo | None:
    """Decode a bookie registration node's binary ``BookieServiceInfoFormat``.

    Empty data means a legacy bookie (its id is its host:port) and gives None. Raises
    FormatError on bytes that do not decode, lack an endpoint's required fields or hold
    strings that are not UTF-8.
    """
    if not data:
        return None
    msg = pb.BookieServiceInfoFormat()
    try:
        msg.ParseFromString(data)
    except (pb_message.DecodeError, ValueError, RecursionError) as err:
        raise FormatError(_SERVICE_INFO, f"not a BookieServiceInfoFormat message: {err}") from None
    missing = [
        f"endpoints[{index}].{name}"
        for index, endpoint in enumerate(msg.endpoints)
        for name in _ENDPOINT_REQUIRED
        if not endpoint.HasField(name)
    ]
    if missing:
        raise FormatError(_SERVICE_INFO, f"missing required fields: {', '.join(missing)}")
    endpoints = tuple(_endpoint_from_proto(e) for e in msg.endpoints)
    return BookieServiceInfo(endpoints=endpoints, properties=_properties_from_proto(msg))


def _properties_from_proto(msg: pb.BookieServiceInfoFormat) -> tuple[tuple[str, str], ...]:
    try:
        properties = tuple(msg.properties.items())
    except UnicodeDecodeError:
        properties = ()
    else:
        if _all_str(text for pair in properties for text in pair):
            return properties
    raise FormatError(_SERVICE_INFO, "a property is not valid UTF-8")


def format_bookie_service_info(info: BookieServiceInfo) -> bytes:
    """``info`` as binary ``BookieServiceInfoFormat`` (deterministic property order).

    ``parse_bookie_service_info(format_bookie_service_info(i)) == i``. Raises FormatError
    if a port does not fit int32.
    """
    msg = pb.BookieServiceInfoFormat(properties=dict(info.properties))
    for endpoint in info.endpoints:
        if not -(2**31) <= endpoint.port < 2**31:
            raise FormatError(_SERVICE_INFO, f"port {endpoint.port} does not fit int32")
        msg.endpoints.add(
            id=endpoint.id,
            host=endpoint.host,
            port=endpoint.port,
            protocol=endpoint.protocol,
            auth=endpoint.auth,
            extensions=endpoint.extensions,
        )
    return msg.SerializeToString(deterministic=True)


_BOOKIE_ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")


def bookie_address_from_id(bookie_id: str) -> tuple[str, int] | None:
    """(host, port) if ``bookie_id`` is a legacy ``host:port`` id with a port in 1..65535, else None."""
    match = _BOOKIE_ADDRESS.fullmatch(bookie_id)
    if match is None:
        return None
    port = int(match.group("port"))
    return (match.group("host"), port) if 0 < port <= 65535 else None


# --------------------------------------------------------------------------- racks (Pulsar /bookies)

_RACKS: Final = "Pulsar rack map"
DEFAULT_RACK: Final = "/default-rack"
DEFAULT_REGION_RACK: Final = "/default-region/default-rack"


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class RackMap:
    """Bookie id -> rack (each starting with ``/``), and bookie id -> hostname where given.

    The mappings are read-only copies. Instances compare by content; the mappings take no
    part in the hash (all RackMaps hash alike), so a RackMap is a poor set member or dict key.
    """

    racks: Mapping[str, str] = field(default_factory=dict, hash=False)
    hostnames: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "racks", _frozen(self.racks))
        object.__setattr__(self, "hostnames", _frozen(self.hostnames))

    def rack_of(self, bookie_id: str, default: str = DEFAULT_RACK) -> str:
        """The rack of ``bookie_id``, or ``default`` for a bookie the map does not list."""
        return self.racks.get(bookie_id, default)


def _normalise_rack(rack: str) -> str:
    """Pulsar's rule: a rack without a leading ``/`` gets one."""
    return rack if rack.startswith("/") else "/" + rack


def _require_object(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise FormatError(_RACKS, f"{where} is a {type(value).__name__}, not a JSON object")
    return value


def parse_pulsar_racks(data: bytes) -> RackMap:
    """Decode Pulsar's ``/bookies`` JSON ``{"<group>": {"<bookieId>": {"rack": ..., "hostname": ...}}}``.

    Racks get a leading ``/`` if they lack one; ``hostname`` is optional (string or null);
    other keys are ignored. A bookie listed in several groups takes the rack of the last
    group in key order (Pulsar keeps groups sorted). Empty data is an empty map. Raises
    FormatError, naming the offending key, on invalid UTF-8/JSON or a wrong shape.
    """
    if not data:
        return RackMap()
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise FormatError(_RACKS, "not valid UTF-8", offset=err.start) from None
    except (ValueError, RecursionError) as err:
        raise FormatError(_RACKS, f"not valid JSON: {err}") from None
    racks: dict[str, str] = {}
    hostnames: dict[str, str] = {}
    groups = _require_object(document, "the document")
    for group in sorted(groups):
        for bookie_id, info in _require_object(groups[group], f"group {group!r}").items():
            rack, hostname = _parse_bookie_info(info, f"group {group!r} bookie {bookie_id!r}")
            racks[bookie_id] = rack
            if hostname is not None:
                hostnames[bookie_id] = hostname
            else:
                hostnames.pop(bookie_id, None)
    return RackMap(racks=racks, hostnames=hostnames)


def _parse_bookie_info(info: object, where: str) -> tuple[str, str | None]:
    """(normalised rack, hostname or None) of one bookie's entry; FormatError naming ``where``."""
    fields = _require_object(info, where)
    rack = fields.get("rack")
    if not isinstance(rack, str):
        raise FormatError(_RACKS, f"{where}: key 'rack' is missing or not a string")
    hostname = fields.get("hostname")
    if hostname is not None and not isinstance(hostname, str):
        raise FormatError(_RACKS, f"{where}: key 'hostname' is not a string")
    return _normalise_rack(rack), hostname


def format_pulsar_racks(
    groups: Mapping[str, Mapping[str, str]], *, hostnames: Mapping[str, str] | None = None
) -> bytes:
    """Pulsar's ``/bookies`` JSON for ``group -> bookie id -> rack`` (keys sorted, UTF-8).

    ``hostnames`` (bookie id -> hostname) adds a ``hostname`` to the bookies it lists.
    Racks are written as given; :func:`parse_pulsar_racks` adds a missing leading ``/``.
    """
    hosts = hostnames or {}
    document = {
        group: {
            bookie_id: {"rack": rack, **({"hostname": hosts[bookie_id]} if bookie_id in hosts else {})}
            for bookie_id, rack in bookies.items()
        }
        for group, bookies in groups.items()
    }
    return json.dumps(document, sort_keys=True, ensure_ascii=False).encode("utf-8")
