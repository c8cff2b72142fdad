"""Tests for scrutiny.core.zk_records: the small ZooKeeper records, pinned to the facts file."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import pytest
from google.protobuf import message as pb_message
from google.protobuf import text_format
from hypothesis import given, settings
from hypothesis import strategies as st

from scrutiny.core.errors import FormatError
from scrutiny.core.zk_paths import LedgerManager
from scrutiny.core.zk_records import (
    DEFAULT_RACK,
    DEFAULT_REGION_RACK,
    BookieServiceInfo,
    Cookie,
    Endpoint,
    Layout,
    RackMap,
    UnderReplicationMark,
    bookie_address_from_id,
    format_auditor_vote,
    format_bookie_service_info,
    format_cookie,
    format_layout,
    format_lock_data,
    format_pulsar_racks,
    format_underreplication_mark,
    merge_underreplication_mark,
    parse_auditor_vote,
    parse_bookie_service_info,
    parse_cookie,
    parse_layout,
    parse_lock_data,
    parse_pulsar_racks,
    parse_underreplication_mark,
)
from scrutiny.proto import bookkeeper_formats_pb2 as pb
from tests.support.strategies import Changed, assert_fair_shares, one_byte_change, one_text_change

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
# Any text protobuf can hold: no lone surrogates.
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
BOOKIE_ID = st.from_regex(r"[A-Za-z0-9:_.-]{1,30}", fullmatch=True)

# --------------------------------------------------------------------------- under-replication mark


def test_mark_with_two_replicas_and_ctime_pinned() -> None:
    mark = UnderReplicationMark(replicas=("bk1:3181", "bk2:3181"), ctime_ms=1700000000123)
    data = b'replica: "bk1:3181"\nreplica: "bk2:3181"\nctime: 1700000000123\n'
    assert format_underreplication_mark(mark) == data
    assert parse_underreplication_mark(data) == mark


def test_mark_without_ctime_pinned() -> None:
    mark = UnderReplicationMark(replicas=("bk1:3181",), ctime_ms=None)
    assert format_underreplication_mark(mark) == b'replica: "bk1:3181"\n'
    assert parse_underreplication_mark(b'replica: "bk1:3181"\n') == mark


def test_mark_with_no_replicas() -> None:
    assert format_underreplication_mark(UnderReplicationMark((), 5)) == b"ctime: 5\n"
    assert parse_underreplication_mark(b"ctime: 5\n") == UnderReplicationMark((), 5)
    assert format_underreplication_mark(UnderReplicationMark((), None)) == b""
    assert parse_underreplication_mark(b"") == UnderReplicationMark((), None)


def test_mark_parser_accepts_text_format_variants() -> None:
    data = b"ctime: 7 replica: 'a:1'\n  replica:\"b:2\"   # comment\n"
    assert parse_underreplication_mark(data) == UnderReplicationMark(("a:1", "b:2"), 7)
    # Like Java's TextFormat.merge, a repeated singular field keeps its last value.
    assert parse_underreplication_mark(b"ctime: 1\nctime: 2\n").ctime_ms == 2


@pytest.mark.parametrize(
    "data",
    [
        b"replica: bk1\n",  # unquoted string
        b'replica "bk1"\nctime: x\n',
        b"ctime: 1.5\n",
        b"ctime: 99999999999999999999\n",  # beyond int64
        b'bookieId: "bk1"\n',  # unknown field
        b'replica: "bk1\n',  # unterminated
        b"\xff\xfe",  # not UTF-8
        b'replica: "\\377"\n',  # escape that is not UTF-8
        b"{",
    ],
)
def test_bad_mark_rejected(data: bytes) -> None:
    with pytest.raises(FormatError) as info:
        parse_underreplication_mark(data)
    assert info.value.what == "under-replication mark"


def test_mark_ctime_out_of_range_not_formatted() -> None:
    with pytest.raises(FormatError):
        format_underreplication_mark(UnderReplicationMark((), 2**63))


def test_merge_new_mark() -> None:
    merged = merge_underreplication_mark(None, ["b:1", "a:1", "b:1"], 100)
    assert merged == UnderReplicationMark(("b:1", "a:1"), 100)


def test_merge_appends_missing_and_resets_ctime() -> None:
    existing = UnderReplicationMark(("a:1", "b:1"), 5)
    merged = merge_underreplication_mark(existing, ["c:1", "a:1"], 99)
    assert merged == UnderReplicationMark(("a:1", "b:1", "c:1"), 99)
    assert merge_underreplication_mark(UnderReplicationMark(("a:1",), None), [], 7) == (
        UnderReplicationMark(("a:1",), 7)
    )


@given(replicas=st.lists(TEXT, max_size=5), ctime=st.none() | INT64)
def test_mark_round_trip(replicas: list[str], ctime: int | None) -> None:
    mark = UnderReplicationMark(tuple(replicas), ctime)
    data = format_underreplication_mark(mark)
    assert parse_underreplication_mark(data) == mark
    # Matches the protobuf message BookKeeper would build.
    msg = pb.UnderreplicatedLedgerFormat(replica=replicas)
    if ctime is not None:
        msg.ctime = ctime
    assert pb.UnderreplicatedLedgerFormat.FromString(msg.SerializeToString()).replica == replicas


@given(existing=st.none() | st.lists(BOOKIE_ID, max_size=4), missing=st.lists(BOOKIE_ID, max_size=4))
def test_merge_properties(existing: list[str] | None, missing: list[str]) -> None:
    before = None if existing is None else UnderReplicationMark(tuple(dict.fromkeys(existing)), 1)
    merged = merge_underreplication_mark(before, missing, 42)
    assert merged.ctime_ms == 42
    assert len(set(merged.replicas)) == len(merged.replicas)
    assert set(merged.replicas) == set(existing or []) | set(missing)
    if before is not None:
        assert merged.replicas[: len(before.replicas)] == before.replicas


# --------------------------------------------------------------------------- lock data, auditor vote


def test_lock_data_and_auditor_vote() -> None:
    assert format_lock_data("bk1:3181") == b'bookieId: "bk1:3181"\n'
    assert parse_lock_data(b'bookieId: "bk1:3181"\n') == "bk1:3181"
    assert parse_lock_data(b"") is None
    assert format_auditor_vote("bk2:3181") == b'bookieId: "bk2:3181"\n'
    assert parse_auditor_vote(b'bookieId: "bk2:3181"') == "bk2:3181"
    assert parse_auditor_vote(b"") is None
    with pytest.raises(FormatError, match="lock"):
        parse_lock_data(b'replica: "x"')
    with pytest.raises(FormatError, match="auditor vote"):
        parse_auditor_vote(b"bookieId: 3")


@given(bookie_id=TEXT)
def test_lock_and_vote_round_trip(bookie_id: str) -> None:
    assert parse_lock_data(format_lock_data(bookie_id)) == bookie_id
    assert parse_auditor_vote(format_auditor_vote(bookie_id)) == bookie_id


# --------------------------------------------------------------------------- LAYOUT


@pytest.mark.parametrize(
    ("data", "layout", "manager"),
    [
        (
            b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1",
            Layout(2, "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory", 1),
            LedgerManager.HIERARCHICAL,
        ),
        (
            b"2\norg.apache.pulsar.shade.org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1",
            Layout(2, "org.apache.pulsar.shade.org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory", 1),
            LedgerManager.HIERARCHICAL,
        ),
        (
            b"2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1\n",
            Layout(2, "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory", 1),
            LedgerManager.LONG_HIERARCHICAL,
        ),
        (
            b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1",
            Layout(2, "org.apache.bookkeeper.meta.FlatLedgerManagerFactory", 1),
            LedgerManager.FLAT,
        ),
        (
            b"2\norg.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory:1",
            Layout(2, "org.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory", 1),
            LedgerManager.HIERARCHICAL,
        ),
        (b"1\nflat:1", Layout(1, "flat", 1), LedgerManager.FLAT),
        (b"1\nhierarchical:2", Layout(1, "hierarchical", 2), LedgerManager.HIERARCHICAL),
        (b"1\nhierarchical", Layout(1, "hierarchical", 1), LedgerManager.HIERARCHICAL),
        (b"1\nflat\n", Layout(1, "flat", 1), LedgerManager.FLAT),
    ],
)
def test_layout_examples(data: bytes, layout: Layout, manager: LedgerManager) -> None:
    parsed = parse_layout(data)
    assert parsed == layout
    assert parsed.manager is manager
    assert parse_layout(format_layout(parsed)) == parsed


def test_layout_format_pinned() -> None:
    layout = Layout(2, "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory", 1)
    assert format_layout(layout) == b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"


@pytest.mark.parametrize(
    "layout",
    [
        Layout(2, "org.example.MSLedgerManagerFactory", 1),
        Layout(2, "flat", 1),  # v2 names a class, not a type
        Layout(1, "org.apache.bookkeeper.meta.FlatLedgerManagerFactory", 1),  # v1 names a type
        Layout(1, "longhierarchical", 1),  # v1 predates it
    ],
)
def test_unknown_manager_rejected(layout: Layout) -> None:
    with pytest.raises(FormatError, match="unknown ledger manager"):
        _ = layout.manager


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"2",
        b"2\n",
        b"3\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1",
        b"0\nflat:1",
        b" 2\nflat:1",
        b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory",  # v2 needs a version
        b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:",
        b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:x",
        b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:-1",
        b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1:2",
        b"2\n:1",
        b"2\nflat:1\nextra",
        b"2\n\nflat:1",
        b"\xff\n",
    ],
)
def test_bad_layout_rejected(data: bytes) -> None:
    with pytest.raises(FormatError) as info:
        parse_layout(data)
    assert info.value.what == "ledger layout"


@pytest.mark.parametrize(
    "layout", [Layout(3, "x", 1), Layout(2, "a:b", 1), Layout(2, "a\nb", 1), Layout(2, "", 1), Layout(2, "x", -1)]
)
def test_unformattable_layout_rejected(layout: Layout) -> None:
    with pytest.raises(FormatError):
        format_layout(layout)


@given(
    version=st.sampled_from([1, 2]),
    name=st.from_regex(r"[A-Za-z0-9_.$]{1,40}", fullmatch=True),
    manager_version=st.integers(0, 2**31 - 1),
)
def test_layout_round_trip(version: int, name: str, manager_version: int) -> None:
    layout = Layout(version, name, manager_version)
    assert parse_layout(format_layout(layout)) == layout


# --------------------------------------------------------------------------- bookie service info


def _info() -> BookieServiceInfo:
    return BookieServiceInfo(
        endpoints=(
            Endpoint(id="httpserver", host="10.0.0.1", port=8000, protocol="http", extensions=("x",)),
            Endpoint(id="bookie", host="10.0.0.1", port=3181, protocol="bookie-rpc", auth=("tls",)),
        ),
        properties=(("autorecovery.enabled", "true"), ("a", "b")),
    )


def test_bookie_service_info_round_trip_and_rpc_address() -> None:
    info = _info()
    data = format_bookie_service_info(info)
    assert parse_bookie_service_info(data) == info
    assert info.rpc_address() == ("10.0.0.1", 3181)
    assert info.properties == (("a", "b"), ("autorecovery.enabled", "true"))
    assert info.properties_dict() == {"a": "b", "autorecovery.enabled": "true"}
    # The bytes are the BookieServiceInfoFormat message BookKeeper writes.
    msg = pb.BookieServiceInfoFormat.FromString(data)
    assert [e.protocol for e in msg.endpoints] == ["http", "bookie-rpc"]
    assert msg.endpoints[1].port == 3181
    assert dict(msg.properties) == {"a": "b", "autorecovery.enabled": "true"}


def test_bookie_service_info_from_protobuf_bytes() -> None:
    msg = pb.BookieServiceInfoFormat()
    msg.endpoints.add(id="b", host="bk-0.bk", port=3181, protocol="bookie-rpc")
    msg.properties["k"] = "v"
    info = parse_bookie_service_info(msg.SerializeToString())
    assert info == BookieServiceInfo((Endpoint("b", "bk-0.bk", 3181, "bookie-rpc"),), (("k", "v"),))
    assert info.rpc_address() == ("bk-0.bk", 3181)


def test_legacy_bookie_has_no_service_info() -> None:
    assert parse_bookie_service_info(b"") is None


def test_rpc_address_absent_or_unusable() -> None:
    assert BookieServiceInfo().rpc_address() is None
    assert BookieServiceInfo((Endpoint("h", "h", 80, "http"),)).rpc_address() is None
    assert BookieServiceInfo((Endpoint("b", "", 3181, "bookie-rpc"),)).rpc_address() is None
    assert BookieServiceInfo((Endpoint("b", "h", 0, "bookie-rpc"),)).rpc_address() is None
    assert BookieServiceInfo((Endpoint("b", "h", 70000, "bookie-rpc"),)).rpc_address() is None


@pytest.mark.parametrize(
    "data",
    [
        b"\xff",
        b"\x32\x05ab",  # truncated endpoint
        b"\x32\x00",  # endpoint missing required fields
        b"\x32\x03\x0a\x01a",  # endpoint with only an id
        b"\x32\x0e\x0a\x01a\x10\x01\x1a\x01h\x22\x01p\x2a\x01\xff",  # auth not UTF-8
        b"\x3a\x04\x0a\x02\xc3\x28",  # property key not UTF-8
    ],
)
def test_bad_bookie_service_info_rejected(data: bytes) -> None:
    with pytest.raises(FormatError) as info:
        parse_bookie_service_info(data)
    assert info.value.what == "bookie service info"


def test_port_beyond_int32_not_formatted() -> None:
    with pytest.raises(FormatError):
        format_bookie_service_info(BookieServiceInfo((Endpoint("b", "h", 2**31, "bookie-rpc"),)))


endpoints = st.builds(
    Endpoint,
    id=TEXT,
    host=TEXT,
    port=st.integers(-(2**31), 2**31 - 1),
    protocol=TEXT,
    auth=st.lists(TEXT, max_size=3).map(tuple),
    extensions=st.lists(TEXT, max_size=3).map(tuple),
)


@given(
    eps=st.lists(endpoints, min_size=1, max_size=4),
    props=st.dictionaries(TEXT, TEXT, max_size=4),
)
def test_bookie_service_info_round_trip(eps: list[Endpoint], props: dict[str, str]) -> None:
    info = BookieServiceInfo(tuple(eps), tuple(props.items()))
    assert parse_bookie_service_info(format_bookie_service_info(info)) == info


def test_empty_service_info_formats_to_empty_bytes() -> None:
    # An empty message serialises to no bytes, which reads back as a legacy bookie.
    assert format_bookie_service_info(BookieServiceInfo()) == b""


@pytest.mark.parametrize(
    ("bookie_id", "address"),
    [
        ("bk1:3181", ("bk1", 3181)),
        ("10.0.0.1:3181", ("10.0.0.1", 3181)),
        ("bookie-0.bookie.ns.svc.cluster.local:3181", ("bookie-0.bookie.ns.svc.cluster.local", 3181)),
        ("bookie-1", None),
        ("bk1:", None),
        (":3181", None),
        ("bk1:0", None),
        ("bk1:65536", None),
        ("bk1:3181:1", None),
        ("bk1:31x1", None),
        ("bk1:\u0661", None),
        ("", None),
    ],
)
def test_bookie_address_from_id(bookie_id: str, address: tuple[str, int] | None) -> None:
    assert bookie_address_from_id(bookie_id) == address


# --------------------------------------------------------------------------- racks


RACKS_JSON = b"""{
  "default": {
    "bk1:3181": {"rack": "/rack0", "hostname": "bk1.example"},
    "bk2:3181": {"rack": "rack1"},
    "bk3:3181": {"rack": "/region-a/rack2", "hostname": null, "extra": 1}
  }
}"""


def test_parse_pulsar_racks() -> None:
    racks = parse_pulsar_racks(RACKS_JSON)
    assert dict(racks.racks) == {"bk1:3181": "/rack0", "bk2:3181": "/rack1", "bk3:3181": "/region-a/rack2"}
    assert dict(racks.hostnames) == {"bk1:3181": "bk1.example"}
    assert racks.rack_of("bk2:3181") == "/rack1"
    assert racks.rack_of("unknown:3181") == DEFAULT_RACK == "/default-rack"
    assert racks.rack_of("unknown:3181", DEFAULT_REGION_RACK) == "/default-region/default-rack"


def test_empty_racks() -> None:
    assert parse_pulsar_racks(b"") == RackMap()
    assert parse_pulsar_racks(b"{}") == RackMap()
    assert parse_pulsar_racks(b'{"g": {}}') == RackMap()
    assert RackMap().rack_of("x") == DEFAULT_RACK


def test_racks_are_read_only() -> None:
    racks = parse_pulsar_racks(RACKS_JSON)
    with pytest.raises(TypeError):
        racks.racks["x"] = "/y"  # type: ignore[index]
    source = {"a": "/r"}
    copy = RackMap(racks=source)
    source["a"] = "/changed"
    assert copy.rack_of("a") == "/r"


def test_bookie_in_two_groups_takes_last_group_in_key_order() -> None:
    data = b'{"zz": {"b:1": {"rack": "/z"}}, "aa": {"b:1": {"rack": "/a", "hostname": "h"}}}'
    racks = parse_pulsar_racks(data)
    assert racks.rack_of("b:1") == "/z"
    assert dict(racks.hostnames) == {}


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b"{", "JSON"),
        (b"\xff", "UTF-8"),
        (b"[]", "document"),
        (b"null", "document"),
        (b'{"g": []}', "group 'g'"),
        (b'{"g": {"b:1": "/rack"}}', "bookie 'b:1'"),
        (b'{"g": {"b:1": {}}}', "'rack'"),
        (b'{"g": {"b:1": {"rack": 1}}}', "'rack'"),
        (b'{"g": {"b:1": {"rack": null}}}', "'rack'"),
        (b'{"g": {"b:1": {"rack": "/r", "hostname": 5}}}', "'hostname'"),
        (b"[" * 100000, "JSON"),
    ],
)
def test_bad_racks_rejected(data: bytes, where: str) -> None:
    with pytest.raises(FormatError, match=where) as info:
        parse_pulsar_racks(data)
    assert info.value.what == "Pulsar rack map"


def test_format_pulsar_racks() -> None:
    data = format_pulsar_racks({"default": {"bk1:3181": "/rack0", "bk2:3181": "rack1"}}, hostnames={"bk1:3181": "h1"})
    assert json.loads(data) == {
        "default": {"bk1:3181": {"rack": "/rack0", "hostname": "h1"}, "bk2:3181": {"rack": "rack1"}}
    }
    racks = parse_pulsar_racks(data)
    assert dict(racks.racks) == {"bk1:3181": "/rack0", "bk2:3181": "/rack1"}
    assert dict(racks.hostnames) == {"bk1:3181": "h1"}


@given(groups=st.dictionaries(TEXT, st.dictionaries(BOOKIE_ID, TEXT.map(lambda r: "/" + r), max_size=4), max_size=3))
def test_racks_round_trip(groups: dict[str, dict[str, str]]) -> None:
    racks = parse_pulsar_racks(format_pulsar_racks(groups))
    expected: dict[str, str] = {}
    for group in sorted(groups):
        expected.update(groups[group])
    assert dict(racks.racks) == expected


# --------------------------------------------------------------------------- fuzz: value or FormatError
#
# Each record format is fuzzed with valid records (built here, or by the matching formatter) that carry ONE change,
# so that a good share still parses and a good share is refused. What the parser returns is compared with what the
# bytes say, read here independently (the protobuf runtime for protobuf records, the documented rules for LAYOUT
# and the rack map): it must parse exactly what the reference accepts, to exactly the reference's value, and the
# value must hold its format's invariants and survive a round trip. Each fuzz test counts both outcomes and fails
# when either falls below its share: inputs that never parse would otherwise pass while checking nothing.

FUZZ = settings(max_examples=300, deadline=None, database=None)
#: The protobuf runtime warns about fuzzed escapes in text ("\\777", "\\d"); the test is about what it then returns.
QUIET_PROTOBUF = pytest.mark.filterwarnings("ignore:invalid .*escape sequence:DeprecationWarning")


class Refused:
    """What the reference reading says of bytes that are not a record of the format."""

    def __repr__(self) -> str:
        return "REFUSED"


REFUSED = Refused()
_Message = TypeVar("_Message", bound=pb_message.Message)


def _text_message(data: bytes, msg: _Message) -> _Message | None:
    """``msg`` merged from protobuf text ``data`` by the protobuf runtime (as Java's TextFormat.merge), or None."""
    try:
        text_format.Merge(data.decode("utf-8"), msg)
    except Exception:  # whatever the runtime refuses is not a record
        return None
    return msg


def _mark_read(data: bytes) -> object:
    """Every ``replica`` of the text in order, the last ``ctime`` if any (None when absent)."""
    msg = _text_message(data, pb.UnderreplicatedLedgerFormat())
    if msg is None:
        return REFUSED
    return UnderReplicationMark(tuple(msg.replica), msg.ctime if msg.HasField("ctime") else None)


def _bookie_id_read(message: Callable[[], pb.LockDataFormat | pb.AuditorVoteFormat]) -> Callable[[bytes], object]:
    def read(data: bytes) -> object:
        msg = _text_message(data, message())
        if msg is None:
            return REFUSED
        return msg.bookieId if msg.HasField("bookieId") else None

    return read


def _layout_read(data: bytes) -> object:
    """LAYOUT as documented: UTF-8 ``<1|2>\\n<name>:<decimal version>`` (v1 may omit ``:<version>``, then 1), with
    trailing newlines; the name is a class (v2) or type (v1) name: not empty, no whitespace, no colon."""
    try:
        lines = data.decode("utf-8").rstrip("\n").split("\n")
    except UnicodeDecodeError:
        return REFUSED
    if len(lines) != 2 or lines[0] not in ("1", "2"):
        return REFUSED
    name, colon, version = lines[1].partition(":")
    if not name or any(char.isspace() or char == ":" for char in name):
        return REFUSED
    if not colon:
        return Layout(1, name, 1) if lines[0] == "1" else REFUSED
    if not (1 <= len(version) <= 10 and all(char in "0123456789" for char in version)):
        return REFUSED
    return Layout(int(lines[0]), name, int(version))


def _service_info_read(data: bytes) -> object:
    """The protobuf runtime's reading, refused when an endpoint lacks one of its required fields (id, port, host,
    protocol) or a string is not UTF-8 (the runtime then hands over bytes); no bytes at all: a legacy bookie."""
    if not data:
        return None
    msg = pb.BookieServiceInfoFormat()
    try:
        msg.ParseFromString(data)
        properties = tuple(msg.properties.items())
    except Exception:  # whatever the runtime refuses is not a record
        return REFUSED
    endpoints = []
    for e in msg.endpoints:
        if not (e.HasField("id") and e.HasField("port") and e.HasField("host") and e.HasField("protocol")):
            return REFUSED
        endpoints.append(Endpoint(e.id, e.host, e.port, e.protocol, tuple(e.auth), tuple(e.extensions)))
    texts = [text for p in properties for text in p]
    texts += [text for e in endpoints for text in (e.id, e.host, e.protocol, *e.auth, *e.extensions)]
    if not all(isinstance(text, str) for text in texts):
        return REFUSED
    return BookieServiceInfo(tuple(endpoints), properties)


def normalised_rack(rack: str) -> str:
    """Pulsar's rule: a rack without a leading ``/`` gets one."""
    return rack if rack.startswith("/") else "/" + rack


def _racks_read(data: bytes) -> object:
    """Pulsar's ``/bookies`` JSON: groups (in key order) of bookies, each with a string ``rack`` (normalised) and an
    optional string-or-null ``hostname``; a bookie in several groups takes the last group's entry."""
    if not data:
        return RackMap()
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return REFUSED
    racks: dict[str, str] = {}
    hostnames: dict[str, str] = {}
    if not isinstance(document, dict):
        return REFUSED
    for group in sorted(document):
        if not isinstance(document[group], dict):
            return REFUSED
        for bookie, info in document[group].items():
            if not isinstance(info, dict) or not isinstance(info.get("rack"), str):
                return REFUSED
            hostname = info.get("hostname")
            if hostname is not None and not isinstance(hostname, str):
                return REFUSED
            racks[bookie] = normalised_rack(info["rack"])
            if hostname is None:
                hostnames.pop(bookie, None)
            else:
                hostnames[bookie] = hostname
    return RackMap(racks=racks, hostnames=hostnames)


def _mark_holds(value: object) -> None:
    assert isinstance(value, UnderReplicationMark)
    assert all(isinstance(replica, str) for replica in value.replicas)
    assert value.ctime_ms is None or -(2**63) <= value.ctime_ms < 2**63
    assert parse_underreplication_mark(format_underreplication_mark(value)) == value


def _bookie_id_holds(parse: Callable[[bytes], object], form: Callable[[str], bytes]) -> Callable[[object], None]:
    def check(value: object) -> None:
        assert value is None or (isinstance(value, str) and parse(form(value)) == value)

    return check


def _layout_holds(value: object) -> None:
    assert isinstance(value, Layout) and value.layout_version in (1, 2) and value.manager_version >= 0
    assert value.manager_class and not any(c.isspace() or c == ":" for c in value.manager_class), value
    assert parse_layout(format_layout(value)) == value


def _service_info_holds(value: object) -> None:
    if value is None:  # empty data: a legacy registration
        return
    assert isinstance(value, BookieServiceInfo)
    assert all(isinstance(e.host, str) and -(2**31) <= e.port < 2**31 for e in value.endpoints)
    again = parse_bookie_service_info(format_bookie_service_info(value))
    # Bytes holding only fields the message does not know give an empty registration, which is written as no bytes:
    # the legacy form (None). Every registration with content comes back unchanged.
    assert again == value or (value == BookieServiceInfo() and again is None)


def _racks_hold(value: object) -> None:
    assert isinstance(value, RackMap)
    assert all(rack.startswith("/") for rack in value.racks.values()), dict(value.racks)
    assert set(value.hostnames) <= set(value.racks)
    again = parse_pulsar_racks(format_pulsar_racks({"group": dict(value.racks)}, hostnames=dict(value.hostnames)))
    assert again == value and dict(again.hostnames) == dict(value.hostnames)


class Built(NamedTuple):
    """A valid record and its bytes."""

    value: object
    data: bytes


REPLICA_IDS = ["bk1:3181", "bk2:3181", "10.0.0.3:3181", "bookie-4.ns:3181", "b\u00e9:1", 'q"uote', "back\\slash"]


@st.composite
def built_marks(draw: st.DrawFn) -> Built:
    """Marks with distinct replicas (usually several, so that their order shows), with or without a ctime."""
    replicas = draw(st.permutations(REPLICA_IDS))[: draw(st.sampled_from([2, 3, 0, 1, 4]))]
    mark = UnderReplicationMark(tuple(replicas), draw(st.sampled_from([1_700_000_000_123, None, 0, 2**63 - 1])))
    return Built(mark, format_underreplication_mark(mark))


REAL_BOOKIE_IDS = ["bookie-0.bookie.pulsar.svc.cluster.local:3181", "10.0.0.12:3181", "bk-2:3181"]


@st.composite
def built_bookie_ids(draw: st.DrawFn, form: Callable[[str], bytes]) -> Built:
    """A lock or vote naming a bookie (a realistic id, whose text is most of the record, or any id), or none."""
    kind = draw(st.sampled_from(["real", "none", "any", "real"]))
    if kind == "none":
        return Built(None, b"")
    bookie_id = draw(st.sampled_from(REAL_BOOKIE_IDS) if kind == "real" else BOOKIE_ID)
    return Built(bookie_id, form(bookie_id))


LAYOUT_NAMES = {
    2: (
        "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory",
        "org.apache.pulsar.shade.org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory",
        "FlatLedgerManagerFactory",
    ),
    1: ("flat", "hierarchical"),
}


@st.composite
def built_layouts(draw: st.DrawFn) -> Built:
    """LAYOUT as BookKeeper writes it, or with trailing newlines, or (v1) without a manager version."""
    version = draw(st.sampled_from([2, 1]))
    layout = Layout(version, draw(st.sampled_from(LAYOUT_NAMES[version])), draw(st.sampled_from([1, 0, 2, 10**10 - 1])))
    text = f"{version}\n{layout.manager_class}"
    text += "" if version == 1 and layout.manager_version == 1 and draw(st.booleans()) else f":{layout.manager_version}"
    return Built(layout, (text + draw(st.sampled_from(["", "", "\n", "\n\n"]))).encode())


ENDPOINTS = st.builds(
    Endpoint,
    id=st.sampled_from(["bookie", "httpserver"]),
    host=st.sampled_from(["10.0.0.1", "bk-0.bk.ns.svc", ""]),
    port=st.sampled_from([3181, 8000, 0, 2**31 - 1]),
    protocol=st.sampled_from(["bookie-rpc", "http"]),
    auth=st.sampled_from([(), ("tls",)]),
    extensions=st.sampled_from([(), ("x", "y")]),
)


@st.composite
def built_service_infos(draw: st.DrawFn) -> Built:
    """A BookieServiceInfoFormat message built field by field here, serialised by the protobuf runtime."""
    endpoints = draw(st.lists(ENDPOINTS, min_size=1, max_size=3))
    properties = draw(st.sampled_from([{}, {"autorecovery.enabled": "true"}, {"a": "b", "k": "v"}]))
    msg = pb.BookieServiceInfoFormat(properties=properties)
    for e in endpoints:
        msg.endpoints.add(id=e.id, host=e.host, port=e.port, protocol=e.protocol, auth=e.auth, extensions=e.extensions)
    value = BookieServiceInfo(tuple(endpoints), tuple(properties.items()))
    return Built(value, msg.SerializeToString(deterministic=True))


@st.composite
def built_racks(draw: st.DrawFn) -> Built:
    """A rack map (racks with and without their leading ``/``, some hostnames, bookies in several groups), on one
    line as Pulsar writes it or indented."""
    bookies = st.sampled_from(["bk1:3181", "bk2:3181", "10.0.0.3:3181"])
    racks = st.sampled_from(["rack1", "/rack0", "/region-a/rack2", "", "/"])
    groups = draw(
        st.dictionaries(st.sampled_from(["default", "zz", "g2"]), st.dictionaries(bookies, racks), min_size=1)
    )
    hostnames = draw(st.dictionaries(bookies, st.sampled_from(["bk1.example", ""]), max_size=2))
    expected: dict[str, str] = {}
    for group in sorted(groups):
        expected |= {bookie: normalised_rack(rack) for bookie, rack in groups[group].items()}
    value = RackMap(expected, {bookie: host for bookie, host in hostnames.items() if bookie in expected})
    data = format_pulsar_racks(groups, hostnames=hostnames)
    indent = draw(st.sampled_from([None, 2]))  # Pulsar writes one line; a person may well write one key a line
    return Built(value, data if indent is None else json.dumps(json.loads(data), indent=indent).encode())


ENDPOINT_FIELDS = ("id", "port", "host", "protocol")
_MESSAGE_CHANGES = ("clear", "port", "delete", "duplicate", "swap", "bad text", "unknown", "property", "none")


@st.composite
def one_message_change(draw: st.DrawFn, data: bytes) -> Changed:
    """A registration with ONE change: an endpoint's required field cleared, its port set to a boundary, an endpoint
    deleted, duplicated or swapped with the next, an endpoint or property whose text is not UTF-8 appended, an
    unknown field appended, or a property added."""
    msg = pb.BookieServiceInfoFormat.FromString(data)
    kind = draw(st.sampled_from(_MESSAGE_CHANGES))
    at = draw(st.integers(0, len(msg.endpoints) - 1))
    endpoints = list(msg.endpoints)
    if kind == "clear":
        name = draw(st.sampled_from(ENDPOINT_FIELDS))
        msg.endpoints[at].ClearField(name)
        return Changed(msg.SerializePartialToString(deterministic=True), f"clear endpoints[{at}].{name}")
    if kind == "port":
        port = draw(st.sampled_from([0, -1, 65535, 65536, 2**31 - 1, -(2**31)]))
        msg.endpoints[at].port = port
        return Changed(msg.SerializeToString(deterministic=True), f"endpoints[{at}].port = {port}")
    if kind in ("delete", "duplicate", "swap"):
        if kind == "swap" and at + 1 < len(endpoints):
            endpoints[at], endpoints[at + 1] = endpoints[at + 1], endpoints[at]
        elif kind != "swap":
            endpoints[at : at + 1] = [endpoints[at]] * (2 if kind == "duplicate" else 0)
        del msg.endpoints[:]
        msg.endpoints.extend(endpoints)
        return Changed(msg.SerializeToString(deterministic=True), f"{kind} endpoint {at}")
    extra = {
        "bad text": draw(
            st.sampled_from([_field(6, b"\x0a\x01\xff\x10\x01\x1a\x01h\x22\x01p"), _field(7, b"\x0a\x02\xc3\x28")])
        ),
        "unknown": b"\x48\x01",  # field 9, a varint: unknown to BookieServiceInfoFormat
        "property": _field(7, _field(1, b"zone") + _field(2, b"eu-1")),
    }.get(kind)
    if extra is None:
        return Changed(data, "none")
    return Changed(data + extra, f"append {kind} {extra!r}")


def values_in_text(data: bytes) -> list[int]:
    """Where a text record keeps its values: inside double quotes, and digits."""
    quoted = [at for m in re.finditer(rb'"((?:[^"\\\n]|\\.)*)"', data) for at in range(m.start(1), m.end(1))]
    return quoted + [m.start() for m in re.finditer(rb"[0-9]", data)]


def values_in_layout(data: bytes) -> list[int]:
    """The manager line of LAYOUT."""
    return list(range(data.find(b"\n") + 1, len(data)))


def fields_in_registration(data: bytes) -> list[int]:
    """Each endpoint field of a registration: its tag byte (where a changed bit names another field or wire type)
    and the text of a string (one-byte tags and lengths: the registrations built here are small)."""
    spots: list[int] = []
    at = 0
    while at + 1 < len(data):
        end = at + 2 + data[at + 1]
        inner = at + 2 if data[at] == 0x32 else end  # 0x32: field 6 (an endpoint), length-delimited
        while inner < end:
            spots.append(inner)
            inner += 1
            if data[inner - 1] & 7 == 0:  # a varint: its bytes up to the last
                while inner < end and data[inner] & 0x80:
                    inner += 1
                inner += 1
            else:
                spots += range(inner + 1, inner + 1 + data[inner])
                inner += 1 + data[inner]
        at = end
    return spots


class Record(NamedTuple):
    """A record format under fuzz: valid records, how to read bytes independently, what its values satisfy, where
    its values are (for byte changes), and what its near-valid text is (characters of ``alphabet``, or changes to
    the protobuf message)."""

    valid: st.SearchStrategy[Built]
    read: Callable[[bytes], object]
    holds: Callable[[object], None]
    values: Callable[[bytes], list[int]]
    alphabet: str | None


RECORDS: dict[Callable[[bytes], object], Record] = {
    parse_underreplication_mark: Record(
        built_marks(), _mark_read, _mark_holds, values_in_text, "replicatm:\" \n\\0123456789-#'{}<>"
    ),
    parse_lock_data: Record(
        built_bookie_ids(format_lock_data),
        _bookie_id_read(pb.LockDataFormat),
        _bookie_id_holds(parse_lock_data, format_lock_data),
        values_in_text,
        'bookieId:" \n\\0123456789#',
    ),
    parse_auditor_vote: Record(
        built_bookie_ids(format_auditor_vote),
        _bookie_id_read(pb.AuditorVoteFormat),
        _bookie_id_holds(parse_auditor_vote, format_auditor_vote),
        values_in_text,
        'bookieId:" \n\\0123456789#',
    ),
    parse_layout: Record(built_layouts(), _layout_read, _layout_holds, values_in_layout, "12:\n \t.xF0\u00a0"),
    parse_bookie_service_info: Record(
        built_service_infos(), _service_info_read, _service_info_holds, fields_in_registration, None
    ),
    parse_pulsar_racks: Record(built_racks(), _racks_read, _racks_hold, values_in_text, '{}[]":,/ \nrackhostnme0123lu'),
}
#: Kept for the tests that name the parsers under fuzz.
PARSERS = list(RECORDS)


def parses_or_rejects(parser: Callable[[bytes], object], data: bytes, built: Built | None = None) -> str:
    """``"rejected"`` when ``data`` raises FormatError, which it must exactly when the reference reading refuses it;
    ``"decoded"`` when it gives the reference's value (the ``built`` record's value when unchanged), which holds its
    format's checks."""
    record = RECORDS[parser]
    want = record.read(data)
    try:
        value = parser(data)
    except FormatError:
        assert want is REFUSED, f"{parser.__name__} refused {data!r}, which holds {want!r}"
        return "rejected"
    assert want is not REFUSED, f"{parser.__name__} accepted {data!r} as {value!r}, but the format refuses it"
    assert value == want, f"{parser.__name__} read {data!r} as {value!r}, but it holds {want!r}"
    assert built is None or value == built.value, f"{parser.__name__} read {value!r}, but {built.value!r} was written"
    record.holds(value)
    return "decoded"


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@QUIET_PROTOBUF
def test_arbitrary_bytes_give_value_or_format_error(parser: Callable[[bytes], object]) -> None:
    """A valid record with one byte flipped, replaced, changed by one, inserted or deleted (three in four of them
    where the record keeps its values, or a registration its endpoints' fields), or cut short, or bytes appended:
    the parser gives exactly what the bytes say, or FormatError exactly when they are no record."""
    outcomes: Counter[str] = Counter()

    @FUZZ
    @given(data=st.data(), built=RECORDS[parser].valid)
    def run(data: st.DataObject, built: Built) -> None:
        changed = data.draw(one_byte_change(built.data, hot=RECORDS[parser].values(built.data)))
        outcomes[parses_or_rejects(parser, changed.data, built if changed.change == "none" else None)] += 1

    run()
    assert_fair_shares(outcomes, decoded=0.15, rejected=0.15)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@QUIET_PROTOBUF
def test_near_valid_text_gives_value_or_format_error(parser: Callable[[bytes], object]) -> None:
    """A valid record's text with one character, number, token or line changed (a registration: one field or
    endpoint of its protobuf message): the parser gives exactly what it says, or FormatError when it is no record."""
    outcomes: Counter[str] = Counter()
    alphabet = RECORDS[parser].alphabet

    @FUZZ
    @given(data=st.data(), built=RECORDS[parser].valid)
    def run(data: st.DataObject, built: Built) -> None:
        if alphabet is None:
            changed = data.draw(one_message_change(built.data))
        else:
            changed = data.draw(one_text_change(built.data.decode(), alphabet))
        outcomes[parses_or_rejects(parser, changed.data, built if changed.change == "none" else None)] += 1

    run()
    assert_fair_shares(outcomes, decoded=0.15, rejected=0.15)


def _field(number: int, body: bytes) -> bytes:
    """A length-delimited protobuf field (bodies here are shorter than 128 bytes)."""
    return bytes([(number << 3) | 2, len(body)]) + body


_SUBFIELD = st.tuples(st.integers(1, 7), st.integers(0, 5), st.binary(max_size=8)).map(
    lambda t: bytes([(t[0] << 3) | t[1]]) + (bytes([len(t[2])]) + t[2] if t[1] == 2 else t[2])
)
_NESTED = st.tuples(st.sampled_from([6, 7]), st.lists(_SUBFIELD, max_size=6).map(b"".join)).map(
    lambda t: _field(t[0], t[1][:120])
)


@given(data=st.lists(_NESTED, max_size=4).map(b"".join))
def test_protobuf_like_bytes_give_value_or_format_error(data: bytes) -> None:
    # Endpoint and property-entry shaped payloads reach deeper into the decoder than random bytes.
    try:
        info = parse_bookie_service_info(data)
    except FormatError:
        return
    if info is not None:
        assert all(isinstance(e.host, str) and isinstance(e.id, str) for e in info.endpoints)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.properties)


# --------------------------------------------------------------------------- cookie

#: A cookie in the shape a BookKeeper 4.17.3 bookie writes (tests/services/test_bookkeeper.py checks real ones
#: byte for byte).
REAL_COOKIE = (
    b'5\nbookieHost: "127.0.0.1:43385"\njournalDir: "/state/bookies/bookie-1/journal"\n'
    b'ledgerDirs: "1\\t/state/bookies/bookie-1/ledgers"\ninstanceId: "a8232bc3-cc73-4054-8f6c-f45bdb86c1c0"\n'
)

_dirs = st.lists(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters='"\\'), min_size=1),
                 min_size=1, max_size=3).map(tuple)  # fmt: skip


def test_a_real_cookie_decodes_and_formats_back_byte_for_byte() -> None:
    cookie = parse_cookie(REAL_COOKIE)
    assert cookie.bookie_host == "127.0.0.1:43385" and cookie.version == 5
    assert cookie.ledger_dirs == ("/state/bookies/bookie-1/ledgers",) and cookie.index_dirs is None
    assert cookie.instance_id == "a8232bc3-cc73-4054-8f6c-f45bdb86c1c0"
    assert format_cookie(cookie) == REAL_COOKIE


@given(host=st.from_regex(r"[a-z0-9.-]{1,20}:[0-9]{1,5}", fullmatch=True), ledgers=_dirs, index=st.none() | _dirs,
       instance=st.none() | st.uuids().map(str))  # fmt: skip
def test_cookies_round_trip(
    host: str, ledgers: tuple[str, ...], index: tuple[str, ...] | None, instance: str | None
) -> None:
    cookie = Cookie(host, "/j1,/j2", ledgers, instance_id=instance, index_dirs=index)
    assert parse_cookie(format_cookie(cookie)) == cookie


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b'3\nbookieHost: "h:1"\n', "not a cookie layout version"),
        (b'bookieHost: "h:1"', "not a cookie layout version"),
        (b'5\nbookieHost: "h:1"\nledgerDirs: "1\\t/a"\n', "required field journalDir is missing"),
        (b'5\nbookieHost: "h:1"\njournalDir: "/j"\nledgerDirs: "2\\t/a"\n', "ledgerDirs"),
        (b'5\nbookieHost: "h:1"\njournalDir: "/j"\nledgerDirs: "1\\t/a"\ncolour: 3\n', "not protobuf text"),
        (b"5\n\xff", "not valid UTF-8"),
    ],
)
def test_bad_cookies_are_named(data: bytes, fragment: str) -> None:
    with pytest.raises(FormatError, match=re.escape(fragment)):
        parse_cookie(data)
