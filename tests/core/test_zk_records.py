"""Tests for scrutiny.core.zk_records: the small ZooKeeper records, pinned to the facts file."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core.errors import FormatError
from scrutiny.core.zk_paths import LedgerManager
from scrutiny.core.zk_records import (
    DEFAULT_RACK,
    DEFAULT_REGION_RACK,
    BookieServiceInfo,
    Endpoint,
    Layout,
    RackMap,
    UnderReplicationMark,
    bookie_address_from_id,
    format_auditor_vote,
    format_bookie_service_info,
    format_layout,
    format_lock_data,
    format_pulsar_racks,
    format_underreplication_mark,
    merge_underreplication_mark,
    parse_auditor_vote,
    parse_bookie_service_info,
    parse_layout,
    parse_lock_data,
    parse_pulsar_racks,
    parse_underreplication_mark,
)
from scrutiny.proto import bookkeeper_formats_pb2 as pb

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
    assert value.manager_class and not any(c.isspace() or c == ":" for c in value.manager_class)
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
    assert all(rack.startswith("/") for rack in value.racks.values())
    assert set(value.hostnames) <= set(value.racks)
    again = parse_pulsar_racks(format_pulsar_racks({"group": dict(value.racks)}, hostnames=dict(value.hostnames)))
    assert again == value and dict(again.hostnames) == dict(value.hostnames)


#: Each parser with what a value it returns must satisfy: its format's invariants, and a round trip through the
#: matching formatter back to the same value.
PARSERS: dict[Callable[[bytes], object], Callable[[object], None]] = {
    parse_underreplication_mark: _mark_holds,
    parse_lock_data: _bookie_id_holds(parse_lock_data, format_lock_data),
    parse_auditor_vote: _bookie_id_holds(parse_auditor_vote, format_auditor_vote),
    parse_layout: _layout_holds,
    parse_bookie_service_info: _service_info_holds,
    parse_pulsar_racks: _racks_hold,
}


def parses_or_rejects(parser: Callable[[bytes], object], data: bytes) -> None:
    """``data`` either raises FormatError or parses to a value that holds its checks."""
    try:
        value = parser(data)
    except FormatError:
        return
    PARSERS[parser](value)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_give_value_or_format_error(parser: Callable[[bytes], object], data: bytes) -> None:
    parses_or_rejects(parser, data)


TEXTY = st.text(alphabet="replicatmbokId:\"\\ \n0123456789{}[]<>#'-_.xf", max_size=80)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.__name__)
@given(text=TEXTY)
def test_near_valid_text_gives_value_or_format_error(parser: Callable[[bytes], object], text: str) -> None:
    parses_or_rejects(parser, text.encode())


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
