"""BookKeeper's ZooKeeper layout: where ledgers, bookies and under-replication marks live.

Pure string functions, no ZooKeeper access. Every function that builds a path also has (or
is covered by) a reverse function that accepts exactly the canonical paths it builds and
raises :class:`~scrutiny.core.errors.PathError` on anything else, so a path read from
ZooKeeper either maps to one ledger id or is reported as not a ledger node.

Roots: the ledgers root (default ``/ledgers``) is an absolute ZooKeeper path without a
trailing slash and without empty, ``.`` or ``..`` components. The ZooKeeper root ``/`` is
accepted and means "directly under the root": ledger 1 of a hierarchical manager is then
``/00/0000/L0001``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Final

from scrutiny.core.errors import PathError


class LedgerManager(StrEnum):
    """The ledger managers whose ZooKeeper layout Scrutiny understands.

    The values are the type names used in metadata service URIs (``zk+<value>://...``).
    """

    HIERARCHICAL = "hierarchical"
    LONG_HIERARCHICAL = "longhierarchical"
    FLAT = "flat"


#: The largest ledger id (Java ``Long.MAX_VALUE``); ledger ids are never negative.
MAX_LEDGER_ID: Final = 2**63 - 1

#: The hierarchical (hybrid) manager uses the short 2-4-4 form below this id, the long form from it on.
SHORT_FORM_LIMIT: Final = 2**31 - 1

DEFAULT_ROOT: Final = "/ledgers"

AVAILABLE: Final = "available"
READONLY: Final = "readonly"
COOKIES: Final = "cookies"
LAYOUT: Final = "LAYOUT"
INSTANCEID: Final = "INSTANCEID"
UNDERREPLICATION: Final = "underreplication"
UNDERREPLICATION_LEDGERS: Final = "ledgers"
UNDERREPLICATION_LOCKS: Final = "locks"
UNDERREPLICATION_DISABLE: Final = "disable"
LOST_BOOKIE_RECOVERY_DELAY: Final = "lostBookieRecoveryDelay"
AUDITOR_ELECTION: Final = "auditorelection"
#: Prefix of an auditor vote node (ephemeral sequential; the lowest sequence is the auditor).
AUDITOR_VOTE_PREFIX: Final = "V_"
#: Prefix of the leaf of an under-replication mark or lock node.
UNDERREPLICATED_PREFIX: Final = "urL"
LEDGER_PREFIX: Final = "L"

_DIGITS = frozenset("0123456789")
_HEX_LOWER = frozenset("0123456789abcdef")
_BOOKIE_ID = re.compile(r"[A-Za-z0-9:_.-]+")
_SHORT_SPLIT: Final = (2, 4, 4)
_LONG_SPLIT: Final = (3, 4, 4, 4, 4)


# --------------------------------------------------------------------------- roots and joins


def check_root(root: str) -> str:
    """Return ``root`` unchanged if it is a valid ledgers root; raise PathError otherwise."""
    if not root.startswith("/"):
        raise PathError(f"ledgers root {root!r} is not an absolute path")
    if root == "/":
        return root
    if root.endswith("/"):
        raise PathError(f"ledgers root {root!r} has a trailing slash")
    for part in root[1:].split("/"):
        if part in ("", ".", ".."):
            raise PathError(f"ledgers root {root!r} has an empty, '.' or '..' component")
    return root


def _join(root: str, *parts: str) -> str:
    """``root`` followed by ``parts``, each after one slash (the root ``/`` adds no extra slash)."""
    base = "" if check_root(root) == "/" else root
    return base + "".join("/" + part for part in parts)


def _below_root(path: str, root: str) -> list[str]:
    """The components of ``path`` below ``root``; PathError if ``path`` is not strictly under it."""
    prefix = "/" if check_root(root) == "/" else root + "/"
    if not path.startswith(prefix) or len(path) == len(prefix):
        raise PathError(f"path {path!r} is not under the ledgers root {root!r}")
    return path[len(prefix) :].split("/")


def _check_ledger_id(ledger_id: int) -> int:
    """Return ``ledger_id`` if it is an int in 0..MAX_LEDGER_ID; raise PathError otherwise."""
    if isinstance(ledger_id, bool) or not isinstance(ledger_id, int):
        raise PathError(f"ledger id {ledger_id!r} is not an integer")
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise PathError(f"ledger id {ledger_id} is outside 0..{MAX_LEDGER_ID}")
    return ledger_id


def _is_digits(text: str, width: int | None = None) -> bool:
    """True if ``text`` is non-empty ASCII decimal digits (exactly ``width`` of them when given)."""
    return bool(text) and set(text) <= _DIGITS and (width is None or len(text) == width)


def _as_manager(manager: str) -> LedgerManager:
    """``manager`` as a LedgerManager (its type name is accepted too); PathError if unknown."""
    try:
        return LedgerManager(manager)
    except ValueError:
        raise PathError(f"unknown ledger manager {manager!r}") from None


def _fits_ledger_id(digits: str) -> bool:
    """True if decimal ``digits`` are at most MAX_LEDGER_ID (checks the length before converting)."""
    return len(digits) <= 19 and int(digits) <= MAX_LEDGER_ID


def _check_bookie_id(bookie_id: str) -> str:
    """Return ``bookie_id`` if it can be a bookie id (and so a single path component)."""
    if not _BOOKIE_ID.fullmatch(bookie_id) or bookie_id in (READONLY, ".", ".."):
        raise PathError(f"{bookie_id!r} is not a valid bookie id")
    return bookie_id


# --------------------------------------------------------------------------- ledger nodes


def _split(digits: str, widths: tuple[int, ...]) -> list[str]:
    """Cut ``digits`` into consecutive pieces of the given widths; prefix the last with ``L``."""
    parts: list[str] = []
    start = 0
    for width in widths:
        parts.append(digits[start : start + width])
        start += width
    parts[-1] = LEDGER_PREFIX + parts[-1]
    return parts


def _ledger_parts(ledger_id: int, manager: LedgerManager) -> list[str]:
    """The path components below the root of ``ledger_id``'s node for ``manager``."""
    if manager is LedgerManager.FLAT:
        return [f"{LEDGER_PREFIX}{ledger_id:010d}"]
    if manager is LedgerManager.HIERARCHICAL and ledger_id < SHORT_FORM_LIMIT:
        return _split(f"{ledger_id:010d}", _SHORT_SPLIT)
    return _split(f"{ledger_id:019d}", _LONG_SPLIT)


def ledger_path(
    ledger_id: int, *, manager: LedgerManager = LedgerManager.HIERARCHICAL, root: str = DEFAULT_ROOT
) -> str:
    """The ZooKeeper path of ledger ``ledger_id``'s metadata node under ``manager``'s layout.

    Hierarchical: ids below 2147483647 as ``%010d`` split 2-4-4, larger ids as ``%019d``
    split 3-4-4-4-4; longhierarchical: always the long form; flat: ``<root>/L%010d``.
    Raises PathError if the id is outside 0..MAX_LEDGER_ID or the root is invalid.
    """
    return _join(root, *_ledger_parts(_check_ledger_id(ledger_id), _as_manager(manager)))


def ledger_id_from_path(
    path: str, *, manager: LedgerManager = LedgerManager.HIERARCHICAL, root: str = DEFAULT_ROOT
) -> int:
    """The ledger id whose node is ``path``; the exact inverse of :func:`ledger_path`.

    Raises PathError unless ``path`` is the canonical ledger node path of some id for this
    manager and root: wrong depth, non-digits, a missing ``L``, non-canonical zero padding or
    the wrong (short/long) form for the id all fail.
    """
    forms = _canonical_forms(manager, root)
    if forms is not None:  # a walk converts every ledger node's path: the common case in one regex match
        for form, accepts in forms:
            matched = form.fullmatch(path)
            if matched is not None:
                ledger_id = int("".join(matched.groups()))
                if accepts(ledger_id):
                    return ledger_id
                break
    return _checked_ledger_id_from_path(path, manager, root)


def _checked_ledger_id_from_path(path: str, manager: LedgerManager | str, root: str) -> int:
    """:func:`ledger_id_from_path` one check at a time, each with its own error."""
    manager = _as_manager(manager)
    parts = _below_root(path, root)
    ledger_id = _ledger_id_from_parts(parts, manager, path)
    if _ledger_parts(ledger_id, manager) != parts:
        raise PathError(f"path {path!r} is not the canonical {manager} path of ledger {ledger_id}")
    return ledger_id


_IdCheck = Callable[[int], bool]


@functools.lru_cache(maxsize=64)
def _canonical_forms(manager: LedgerManager | str, root: str) -> tuple[tuple[re.Pattern[str], _IdCheck], ...] | None:
    """Each canonical form of a ledger node's path under ``root`` for ``manager`` as a pattern capturing the id's
    digits, with the ids whose canonical path has that form; None (every path checked one check at a time) for the
    flat layout and for an invalid manager or root."""
    try:
        manager = _as_manager(manager)
        prefix = re.escape("/" if check_root(root) == "/" else root + "/")
    except PathError:
        return None
    if manager is LedgerManager.FLAT:
        return None
    short = re.compile(prefix + r"([0-9]{2})/([0-9]{4})/L([0-9]{4})")
    long = re.compile(prefix + r"([0-9]{3})/([0-9]{4})/([0-9]{4})/([0-9]{4})/L([0-9]{4})")
    if manager is LedgerManager.HIERARCHICAL:
        return (short, lambda i: i < SHORT_FORM_LIMIT), (long, lambda i: SHORT_FORM_LIMIT <= i <= MAX_LEDGER_ID)
    return ((long, lambda i: i <= MAX_LEDGER_ID),)


def _ledger_id_from_parts(parts: list[str], manager: LedgerManager, path: str) -> int:
    """Parse the components below the root into an id (shape checks only, not canonicality)."""
    if manager is LedgerManager.FLAT:
        allowed: tuple[tuple[int, ...], ...] = ((len(parts[-1]) - 1,),)
    elif manager is LedgerManager.HIERARCHICAL:
        allowed = (_SHORT_SPLIT, _LONG_SPLIT)
    else:
        allowed = (_LONG_SPLIT,)
    widths = next((w for w in allowed if len(w) == len(parts)), None)
    if widths is None:
        raise PathError(f"path {path!r} has the wrong depth for a {manager} ledger node")
    leaf = parts[-1]
    if not leaf.startswith(LEDGER_PREFIX):
        raise PathError(f"path {path!r}: ledger node name {leaf!r} does not start with 'L'")
    digits = [*parts[:-1], leaf[len(LEDGER_PREFIX) :]]
    for piece, width in zip(digits, widths, strict=True):
        if not _is_digits(piece, width):
            raise PathError(f"path {path!r}: component {piece!r} is not {width} decimal digits")
    text = "".join(digits)
    if not _fits_ledger_id(text):
        raise PathError(f"path {path!r}: ledger id {text} exceeds {MAX_LEDGER_ID}")
    return int(text)


def is_ledger_tree_child(name: str, *, manager: LedgerManager = LedgerManager.HIERARCHICAL) -> bool:
    """True if ``name``, a child of the ledgers root, holds ledger nodes under ``manager``.

    Hierarchical: 2- or 3-digit decimal directory names; longhierarchical: 3-digit names;
    flat: the ledger nodes themselves, ``L`` followed by the canonical ``%010d`` of a valid
    id (so 10 digits, or more without a leading zero for ids above 9999999999). Every other
    name (``available``, ``cookies``, ``LAYOUT``, ``idgen``, ``ID-...``, ...) is False.
    """
    manager = _as_manager(manager)
    if manager is LedgerManager.FLAT:
        digits = name[len(LEDGER_PREFIX) :]
        if not name.startswith(LEDGER_PREFIX) or not _is_digits(digits):
            return False
        return _fits_ledger_id(digits) and f"{int(digits):010d}" == digits
    widths = (2, 3) if manager is LedgerManager.HIERARCHICAL else (3,)
    return _is_digits(name) and len(name) in widths


# --------------------------------------------------------------------------- under-replication


def underreplication_root_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/underreplication``: the auto-recovery subtree."""
    return _join(root, UNDERREPLICATION)


def underreplication_ledgers_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/underreplication/ledgers``: the tree of under-replication marks."""
    return _join(root, UNDERREPLICATION, UNDERREPLICATION_LEDGERS)


def underreplication_locks_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/underreplication/locks``: replication workers' per-ledger locks."""
    return _join(root, UNDERREPLICATION, UNDERREPLICATION_LOCKS)


def underreplication_disable_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/underreplication/disable``: exists while auto-recovery is disabled."""
    return _join(root, UNDERREPLICATION, UNDERREPLICATION_DISABLE)


def lost_bookie_recovery_delay_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/underreplication/lostBookieRecoveryDelay``: decimal seconds."""
    return _join(root, UNDERREPLICATION, LOST_BOOKIE_RECOVERY_DELAY)


def auditor_election_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/underreplication/auditorelection``: parent of the auditor votes ``V_<seq>``."""
    return _join(root, UNDERREPLICATION, AUDITOR_ELECTION)


def _underreplicated_leaf(ledger_id: int) -> str:
    return f"{UNDERREPLICATED_PREFIX}{ledger_id:010d}"


def _hex_slices(ledger_id: int) -> list[str]:
    """The four 16-bit slices of ``ledger_id``, high to low, as 4 lowercase hex digits each."""
    return [f"{(ledger_id >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0)]


def underreplication_path(ledger_id: int, *, root: str = DEFAULT_ROOT) -> str:
    """``<root>/underreplication/ledgers/<h>/<h>/<h>/<h>/urL%010d``, the mark of ``ledger_id``.

    The ``<h>`` are the id's four 16-bit slices, high to low, ``%04x`` lowercase. Raises
    PathError if the id is outside 0..MAX_LEDGER_ID or the root is invalid.
    """
    ledger_id = _check_ledger_id(ledger_id)
    parts = [*_hex_slices(ledger_id), _underreplicated_leaf(ledger_id)]
    return _join(root, UNDERREPLICATION, UNDERREPLICATION_LEDGERS, *parts)


def _ledger_id_from_leaf(leaf: str, path: str) -> int:
    """Parse ``urL%010d`` exactly (canonical padding, id in range); PathError otherwise."""
    digits = leaf[len(UNDERREPLICATED_PREFIX) :]
    if not leaf.startswith(UNDERREPLICATED_PREFIX) or not _is_digits(digits):
        raise PathError(f"path {path!r}: {leaf!r} is not 'urL' followed by a ledger id")
    if not _fits_ledger_id(digits) or _underreplicated_leaf(int(digits)) != leaf:
        raise PathError(f"path {path!r}: {leaf!r} is not the canonical node name of a ledger id")
    return int(digits)


def ledger_id_from_underreplication_path(path: str, *, root: str = DEFAULT_ROOT) -> int:
    """The ledger id of the mark node ``path``; the exact inverse of :func:`underreplication_path`.

    Raises PathError unless ``path`` is exactly the canonical mark path of some ledger id
    (the hex slices must be four lowercase digits each and agree with the leaf's id).
    """
    parts = _below_root(path, root)
    if len(parts) != 7 or parts[:2] != [UNDERREPLICATION, UNDERREPLICATION_LEDGERS]:
        raise PathError(f"path {path!r} is not an under-replication mark under {root!r}")
    for piece in parts[2:6]:
        if len(piece) != 4 or not set(piece) <= _HEX_LOWER:
            raise PathError(f"path {path!r}: {piece!r} is not 4 lowercase hex digits")
    ledger_id = _ledger_id_from_leaf(parts[6], path)
    if parts[2:6] != _hex_slices(ledger_id):
        raise PathError(f"path {path!r}: the hex directories do not match ledger {ledger_id}")
    return ledger_id


def underreplication_lock_path(ledger_id: int, *, root: str = DEFAULT_ROOT) -> str:
    """``<root>/underreplication/locks/urL%010d``: the replication worker's lock on ``ledger_id``."""
    ledger_id = _check_ledger_id(ledger_id)
    return _join(root, UNDERREPLICATION, UNDERREPLICATION_LOCKS, _underreplicated_leaf(ledger_id))


def ledger_id_from_underreplication_lock_path(path: str, *, root: str = DEFAULT_ROOT) -> int:
    """The ledger id of the lock node ``path``; the exact inverse of :func:`underreplication_lock_path`."""
    parts = _below_root(path, root)
    if len(parts) != 3 or parts[:2] != [UNDERREPLICATION, UNDERREPLICATION_LOCKS]:
        raise PathError(f"path {path!r} is not an under-replication lock under {root!r}")
    return _ledger_id_from_leaf(parts[2], path)


def auditor_vote_sequence(name: str) -> int:
    """The sequence number of auditor vote node ``name`` (``V_<digits>``); PathError otherwise.

    The vote with the lowest sequence belongs to the current auditor.
    """
    digits = name[len(AUDITOR_VOTE_PREFIX) :]
    if not name.startswith(AUDITOR_VOTE_PREFIX) or not _is_digits(digits) or len(digits) > 19:
        raise PathError(f"{name!r} is not an auditor vote node name (V_<sequence>)")
    return int(digits)


# --------------------------------------------------------------------------- bookies and cluster nodes


def available_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/available``: parent of the writable bookies' registration nodes."""
    return _join(root, AVAILABLE)


def readonly_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/available/readonly``: parent of the read-only bookies' registration nodes."""
    return _join(root, AVAILABLE, READONLY)


def available_bookie_path(bookie_id: str, *, root: str = DEFAULT_ROOT) -> str:
    """``<root>/available/<bookieId>``; PathError if ``bookie_id`` is not a valid bookie id."""
    return _join(root, AVAILABLE, _check_bookie_id(bookie_id))


def readonly_bookie_path(bookie_id: str, *, root: str = DEFAULT_ROOT) -> str:
    """``<root>/available/readonly/<bookieId>``; PathError if ``bookie_id`` is not a valid bookie id."""
    return _join(root, AVAILABLE, READONLY, _check_bookie_id(bookie_id))


def cookies_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/cookies``: parent of the bookies' cookies."""
    return _join(root, COOKIES)


def cookie_path(bookie_id: str, *, root: str = DEFAULT_ROOT) -> str:
    """``<root>/cookies/<bookieId>``; PathError if ``bookie_id`` is not a valid bookie id."""
    return _join(root, COOKIES, _check_bookie_id(bookie_id))


def layout_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/LAYOUT``: the ledger manager layout (see ``zk_records.parse_layout``)."""
    return _join(root, LAYOUT)


def instance_id_path(*, root: str = DEFAULT_ROOT) -> str:
    """``<root>/INSTANCEID``: the cluster's UUID."""
    return _join(root, INSTANCEID)


# --------------------------------------------------------------------------- metadata service URI

_ZK_SCHEME: Final = "zk"
_MANAGER_BY_SCHEME_SUFFIX: Final = {m.value: m for m in LedgerManager}


def parse_metadata_uri(uri: str) -> tuple[list[str], str, LedgerManager]:
    """Split a BookKeeper metadata service URI into (ZooKeeper hosts, ledgers root, manager).

    ``zk+hierarchical://h1:2181;h2:2181/ledgers`` -> ``(["h1:2181", "h2:2181"], "/ledgers",
    HIERARCHICAL)``. The scheme is ``zk`` (hierarchical) or ``zk+<manager>`` with manager
    ``hierarchical``, ``longhierarchical`` or ``flat`` (case-insensitive). Hosts are separated
    by ``;`` or ``,`` and kept as written (``host`` or ``host:port``, IPv6 in brackets).
    Trailing slashes of the path are dropped (``/`` stays ``/``). Raises PathError, naming
    the problem, for any other scheme, an empty host, a bad port, a missing or invalid path,
    user info, a query or a fragment.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise PathError(f"metadata service URI {uri!r} has no '<scheme>://'")
    manager = _manager_from_scheme(scheme, uri)
    if any(ch in rest for ch in "?#@"):
        raise PathError(f"metadata service URI {uri!r} must not have user info, a query or a fragment")
    slash = rest.find("/")
    if slash < 0:
        raise PathError(f"metadata service URI {uri!r} has no ledgers root path (e.g. /ledgers)")
    hosts = [_check_host(host, uri) for host in re.split(r"[;,]", rest[:slash])]
    path = rest[slash:].rstrip("/") or "/"
    try:
        check_root(path)
    except PathError as err:
        raise PathError(f"metadata service URI {uri!r}: {err}") from None
    return hosts, path, manager


def _manager_from_scheme(scheme: str, uri: str) -> LedgerManager:
    """The ledger manager a ``zk`` / ``zk+<manager>`` scheme names; PathError otherwise."""
    base, plus, suffix = scheme.lower().partition("+")
    if base != _ZK_SCHEME:
        raise PathError(f"metadata service URI {uri!r}: scheme {scheme!r} is not 'zk' or 'zk+<manager>'")
    if not plus:
        return LedgerManager.HIERARCHICAL
    manager = _MANAGER_BY_SCHEME_SUFFIX.get(suffix)
    if manager is None:
        known = ", ".join(m.value for m in LedgerManager)
        raise PathError(f"metadata service URI {uri!r}: unsupported ledger manager {suffix!r} (known: {known})")
    return manager


_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(?P<port>[0-9]{1,5}))?")


def _check_host(host: str, uri: str) -> str:
    """Return ``host`` if it is ``host`` or ``host:port`` with a port in 1..65535; PathError otherwise."""
    match = _HOST_PORT.fullmatch(host)
    if match is None:
        raise PathError(f"metadata service URI {uri!r}: {host!r} is not a ZooKeeper host[:port]")
    port = match.group("port")
    if port is not None and not 1 <= int(port) <= 65535:
        raise PathError(f"metadata service URI {uri!r}: port {port} of {host!r} is outside 1..65535")
    return host
