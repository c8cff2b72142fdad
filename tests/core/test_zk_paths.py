"""Tests for scrutiny.core.zk_paths: BookKeeper's ZooKeeper layout, pinned to the facts file."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrutiny.core import zk_paths as zp
from scrutiny.core.errors import PathError
from scrutiny.core.zk_paths import (
    MAX_LEDGER_ID,
    LedgerManager,
    is_ledger_tree_child,
    ledger_id_from_path,
    ledger_id_from_underreplication_path,
    ledger_path,
    parse_metadata_uri,
    underreplication_lock_path,
    underreplication_path,
)

H = LedgerManager.HIERARCHICAL
LH = LedgerManager.LONG_HIERARCHICAL
FLAT = LedgerManager.FLAT

ledger_ids = st.integers(min_value=0, max_value=MAX_LEDGER_ID) | st.sampled_from(
    [0, 1, 9999, 2147483646, 2147483647, 2147483648, 9999999999, 10000000000, MAX_LEDGER_ID]
)
VALID_ROOTS = ("/ledgers", "/", "/pulsar/ledgers", "/a.b/c-d")
roots = st.sampled_from(VALID_ROOTS)


# --------------------------------------------------------------------------- ledger_path, pinned


@pytest.mark.parametrize(
    ("ledger_id", "manager", "path"),
    [
        (0, H, "/ledgers/00/0000/L0000"),
        (1, H, "/ledgers/00/0000/L0001"),
        (123456789, H, "/ledgers/01/2345/L6789"),
        (2147483646, H, "/ledgers/21/4748/L3646"),
        (2147483647, H, "/ledgers/000/0000/0021/4748/L3647"),
        (2147483648, H, "/ledgers/000/0000/0021/4748/L3648"),
        (MAX_LEDGER_ID, H, "/ledgers/922/3372/0368/5477/L5807"),
        (0, LH, "/ledgers/000/0000/0000/0000/L0000"),
        (1, LH, "/ledgers/000/0000/0000/0000/L0001"),
        (123456789, LH, "/ledgers/000/0000/0001/2345/L6789"),
        (2147483647, LH, "/ledgers/000/0000/0021/4748/L3647"),
        (MAX_LEDGER_ID, LH, "/ledgers/922/3372/0368/5477/L5807"),
        (0, FLAT, "/ledgers/L0000000000"),
        (1, FLAT, "/ledgers/L0000000001"),
        (9999999999, FLAT, "/ledgers/L9999999999"),
        (10000000000, FLAT, "/ledgers/L10000000000"),
        (MAX_LEDGER_ID, FLAT, "/ledgers/L9223372036854775807"),
    ],
)
def test_ledger_path_pinned(ledger_id: int, manager: LedgerManager, path: str) -> None:
    assert ledger_path(ledger_id, manager=manager) == path
    assert ledger_id_from_path(path, manager=manager) == ledger_id


def test_default_manager_is_hierarchical_and_root_is_ledgers() -> None:
    assert ledger_path(1) == "/ledgers/00/0000/L0001"
    assert ledger_id_from_path("/ledgers/01/2345/L6789") == 123456789


def test_manager_type_names_are_accepted() -> None:
    assert ledger_path(1, manager=LedgerManager("flat")) == "/ledgers/L0000000001"
    assert [m.value for m in LedgerManager] == ["hierarchical", "longhierarchical", "flat"]


def test_other_roots() -> None:
    assert ledger_path(1, root="/pulsar/ledgers") == "/pulsar/ledgers/00/0000/L0001"
    assert ledger_path(1, root="/") == "/00/0000/L0001"
    assert ledger_path(7, manager=FLAT, root="/") == "/L0000000007"
    assert ledger_id_from_path("/00/0000/L0001", root="/") == 1
    assert ledger_id_from_path("/pulsar/ledgers/00/0000/L0001", root="/pulsar/ledgers") == 1


@pytest.mark.parametrize("root", ["ledgers", "/ledgers/", "//ledgers", "/a//b", "/a/./b", "/a/..", ""])
def test_invalid_roots_rejected(root: str) -> None:
    with pytest.raises(PathError):
        ledger_path(1, root=root)
    with pytest.raises(PathError):
        ledger_id_from_path("/ledgers/00/0000/L0001", root=root)


@pytest.mark.parametrize("ledger_id", [-1, MAX_LEDGER_ID + 1, 2**64])
@pytest.mark.parametrize("manager", list(LedgerManager))
def test_ledger_id_out_of_range(ledger_id: int, manager: LedgerManager) -> None:
    with pytest.raises(PathError):
        ledger_path(ledger_id, manager=manager)


def test_non_int_ledger_id_rejected() -> None:
    with pytest.raises(PathError):
        ledger_path(True)
    with pytest.raises(PathError):
        ledger_path("1")  # type: ignore[arg-type]


def test_unknown_manager_rejected() -> None:
    with pytest.raises(PathError):
        ledger_path(1, manager="ms")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- reverse mapping, rejections


@pytest.mark.parametrize(
    ("path", "manager"),
    [
        ("/ledgers/00/0000/0001", H),  # missing L
        ("/ledgers/00/0000/l0001", H),  # lowercase l
        ("/ledgers/0/0000/L0001", H),  # short first dir
        ("/ledgers/000/0000/L0001", H),  # 3-4-4 is no form
        ("/ledgers/00/000/L0001", H),
        ("/ledgers/00/0000/L001", H),
        ("/ledgers/00/0000/L00001", H),
        ("/ledgers/0a/0000/L0001", H),  # non-digit
        ("/ledgers/00/0000/L000\u0661", H),  # Arabic-Indic digit
        ("/ledgers/00/0000/L+001", H),
        ("/ledgers/00/0000", H),  # too shallow
        ("/ledgers/00", H),
        ("/ledgers", H),
        ("/ledgers/", H),
        ("/ledgers/00/0000/L0001/x", H),  # too deep
        ("/ledgers/00/0000/L0001/", H),  # trailing slash
        ("/ledgers//00/0000/L0001", H),
        ("/other/00/0000/L0001", H),  # not under root
        ("/ledgersX/00/0000/L0001", H),
        ("ledgers/00/0000/L0001", H),
        ("/ledgers/000/0000/0000/0000/L0001", H),  # long form of a short id: non-canonical
        ("/ledgers/000/0000/0021/4748/L3646", H),  # 2147483646 in long form
        ("/ledgers/21/4748/L3647", H),  # 2147483647 in short form
        ("/ledgers/99/9999/L9999", H),  # 9999999999 >= 2147483647, must be long form
        ("/ledgers/999/9999/9999/9999/L9999", H),  # > 2^63-1
        ("/ledgers/00/0000/L0001", LH),  # short form for longhierarchical
        ("/ledgers/999/9999/9999/9999/L9999", LH),
        ("/ledgers/L0000000001/x", FLAT),
        ("/ledgers/L000000001", FLAT),  # 9 digits
        ("/ledgers/L00000000001", FLAT),  # 11 digits, zero padded too far
        ("/ledgers/L", FLAT),
        ("/ledgers/0000000001", FLAT),
        ("/ledgers/L9999999999999999999", FLAT),  # > 2^63-1
        ("/ledgers/00/0000/L0001", FLAT),
        ("/ledgers/LAYOUT", FLAT),
        ("/ledgers/available", H),
        ("/ledgers/underreplication/ledgers/0000/0000/0000/0005/urL0000000005", H),
    ],
)
def test_reverse_rejects(path: str, manager: LedgerManager) -> None:
    with pytest.raises(PathError):
        ledger_id_from_path(path, manager=manager)


def test_huge_digit_strings_rejected_without_int_conversion_errors() -> None:
    huge = "1" * 5000
    with pytest.raises(PathError):
        ledger_id_from_path("/ledgers/L" + huge, manager=FLAT)
    with pytest.raises(PathError):
        zp.ledger_id_from_underreplication_lock_path("/ledgers/underreplication/locks/urL" + huge)
    assert not is_ledger_tree_child("L" + huge, manager=FLAT)


def test_path_error_is_value_error_with_message() -> None:
    with pytest.raises(ValueError, match="canonical"):
        ledger_id_from_path("/ledgers/21/4748/L3647")


# --------------------------------------------------------------------------- ledger tree children


@pytest.mark.parametrize(
    ("name", "manager", "expected"),
    [
        ("00", H, True),
        ("21", H, True),
        ("000", H, True),
        ("922", H, True),
        ("0", H, False),
        ("0000", H, False),
        ("0a", H, False),
        ("\u0661\u0662", H, False),
        ("00", LH, False),
        ("000", LH, True),
        ("L0000000001", FLAT, True),
        ("L9223372036854775807", FLAT, True),
        ("L000000001", FLAT, False),
        ("L00000000001", FLAT, False),
        ("L9223372036854775808", FLAT, False),
        ("00", FLAT, False),
        ("", H, False),
        ("", FLAT, False),
    ],
)
def test_is_ledger_tree_child(name: str, manager: LedgerManager, expected: bool) -> None:
    assert is_ledger_tree_child(name, manager=manager) is expected


@pytest.mark.parametrize(
    "name",
    [
        "available",
        "cookies",
        "LAYOUT",
        "INSTANCEID",
        "underreplication",
        "idgen",
        "idgen-long",
        "ID-0000000001",
        "L",
        "readonly",
        "anything",
    ],
)
@pytest.mark.parametrize("manager", list(LedgerManager))
def test_special_children_are_not_ledger_trees(name: str, manager: LedgerManager) -> None:
    assert not is_ledger_tree_child(name, manager=manager)


# --------------------------------------------------------------------------- properties


@given(ledger_id=ledger_ids, manager=st.sampled_from(list(LedgerManager)), root=roots)
def test_round_trip_and_tree_child(ledger_id: int, manager: LedgerManager, root: str) -> None:
    path = ledger_path(ledger_id, manager=manager, root=root)
    assert ledger_id_from_path(path, manager=manager, root=root) == ledger_id
    below = path[len(root) :].lstrip("/")
    assert is_ledger_tree_child(below.split("/")[0], manager=manager)


@given(ledger_id=ledger_ids)
def test_hierarchical_form_depends_on_id(ledger_id: int) -> None:
    depth = ledger_path(ledger_id).count("/") - 1
    assert depth == (3 if ledger_id < 2147483647 else 5)
    if ledger_id >= 2147483647:
        assert ledger_path(ledger_id) == ledger_path(ledger_id, manager=LH)


@st.composite
def one_mutation(draw: st.DrawFn, text: str, alphabet: str) -> str:
    """``text`` with one character deleted, replaced or inserted (characters from ``alphabet``)."""
    kind = draw(st.sampled_from(["delete", "replace", "insert"]))
    at = draw(st.integers(0, len(text) - (0 if kind == "insert" else 1)))
    char = draw(st.sampled_from(alphabet))
    if kind == "delete":
        return text[:at] + text[at + 1 :]
    if kind == "replace":
        return text[:at] + char + text[at + 1 :]
    return text[:at] + char + text[at:]


@given(ledger_id=ledger_ids, manager=st.sampled_from(list(LedgerManager)), mutate=st.booleans(), data=st.data())
def test_reverse_accepts_only_canonical_paths(
    ledger_id: int, manager: LedgerManager, mutate: bool, data: st.DataObject
) -> None:
    """A ledger's own path maps back to it; the same path with one character changed is either refused or is the
    canonical path of the id it names (half the examples are unchanged paths, so the assertions are reached)."""
    canonical = ledger_path(ledger_id, manager=manager)
    path = data.draw(one_mutation(canonical, "/L0123456789ab")) if mutate else canonical
    try:
        back = ledger_id_from_path(path, manager=manager)
    except PathError:
        assert mutate, f"the canonical path {path} was refused"
        return
    assert ledger_path(back, manager=manager) == path
    assert mutate or back == ledger_id


@given(
    ledger_id=ledger_ids,
    manager=st.sampled_from([*LedgerManager, "hierarchical", "bogus"]),
    root=roots | st.sampled_from(["ledgers", "/l/", "/a//b", "/x.y"]),
    mutations=st.integers(min_value=0, max_value=3),
    data=st.data(),
)
def test_the_one_match_form_gives_what_the_checks_one_at_a_time_give(
    ledger_id: int, manager: str, root: str, mutations: int, data: st.DataObject
) -> None:
    """The regex form a walk uses for every path answers exactly as the checks one at a time: the same id, or a
    PathError with the same message (canonical paths of every form, then with characters changed, digits from
    other scripts included)."""
    form = LedgerManager(manager) if manager in set(LedgerManager) else LedgerManager.HIERARCHICAL
    path = ledger_path(ledger_id, manager=form, root=root if root in VALID_ROOTS else "/ledgers")
    for _ in range(mutations):
        path = data.draw(one_mutation(path, "/L0123456789\u0663\uff11a."))

    def answer(convert: Callable[[], int]) -> tuple[str, object]:
        try:
            return "id", convert()
        except PathError as error:
            return "error", str(error)

    as_given = cast(LedgerManager, manager)  # an unknown name too: both answer with the same error
    fast = answer(lambda: ledger_id_from_path(path, manager=as_given, root=root))
    checked = answer(lambda: zp._checked_ledger_id_from_path(path, manager, root))
    assert fast == checked, path


@pytest.mark.parametrize(
    ("path", "manager"),
    [
        ("/ledgers/21/4748/L3647", H),  # the short form of the first id that has the long one
        ("/ledgers/99/9999/L9999", H),
        ("/ledgers/000/0000/0000/0000/L0001", H),  # the long form of an id that has the short one
        ("/ledgers/922/3372/0368/5477/L5808", H),  # one above the largest id
        ("/ledgers/922/3372/0368/5477/L5808", LH),
        ("/ledgers/00/0000/L0001", LH),
        ("/ledgers/00/0000/L000\u0663", H),  # a digit of another script
        ("/ledgers/00/0000/L0001/", H),
        ("/ledgers/00/0000/L0001\n", H),
    ],
)
def test_paths_next_to_a_canonical_form_are_refused_with_the_checks_reason(path: str, manager: LedgerManager) -> None:
    with pytest.raises(PathError) as checked:
        zp._checked_ledger_id_from_path(path, manager, "/ledgers")
    with pytest.raises(PathError, match=re.escape(str(checked.value))):
        ledger_id_from_path(path, manager=manager)


# --------------------------------------------------------------------------- under-replication


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (5, "/ledgers/underreplication/ledgers/0000/0000/0000/0005/urL0000000005"),
        (0, "/ledgers/underreplication/ledgers/0000/0000/0000/0000/urL0000000000"),
        (0xABCDEF, "/ledgers/underreplication/ledgers/0000/0000/00ab/cdef/urL0011259375"),
        (2147483647, "/ledgers/underreplication/ledgers/0000/0000/7fff/ffff/urL2147483647"),
        (10000000000, "/ledgers/underreplication/ledgers/0000/0002/540b/e400/urL10000000000"),
        (MAX_LEDGER_ID, "/ledgers/underreplication/ledgers/7fff/ffff/ffff/ffff/urL9223372036854775807"),
    ],
)
def test_underreplication_path_pinned(ledger_id: int, path: str) -> None:
    assert underreplication_path(ledger_id) == path
    assert ledger_id_from_underreplication_path(path) == ledger_id


@pytest.mark.parametrize(
    "path",
    [
        "/ledgers/underreplication/ledgers/0000/0000/0000/0005/urL0000000006",  # dirs disagree
        "/ledgers/underreplication/ledgers/0000/0000/0000/000A/urL0000000010",  # uppercase hex
        "/ledgers/underreplication/ledgers/0000/0000/0000/005/urL0000000005",
        "/ledgers/underreplication/ledgers/0000/0000/0000/0005/urL000000005",
        "/ledgers/underreplication/ledgers/0000/0000/0000/0005/L0000000005",
        "/ledgers/underreplication/ledgers/0000/0000/0000/0005",
        "/ledgers/underreplication/ledgers/0000/0000/0000/0005/urL0000000005/x",
        "/ledgers/underreplication/locks/0000/0000/0000/0005/urL0000000005",
        "/ledgers/underreplication/ledgers/0000/0000/0000/0g05/urL0000000005",
        "/other/underreplication/ledgers/0000/0000/0000/0005/urL0000000005",
        "/ledgers/underreplication/ledgers/ffff/ffff/ffff/ffff/urL18446744073709551615",
    ],
)
def test_underreplication_path_rejects(path: str) -> None:
    with pytest.raises(PathError):
        ledger_id_from_underreplication_path(path)


@given(ledger_id=ledger_ids, root=roots)
def test_underreplication_round_trip(ledger_id: int, root: str) -> None:
    path = underreplication_path(ledger_id, root=root)
    assert ledger_id_from_underreplication_path(path, root=root) == ledger_id
    lock = underreplication_lock_path(ledger_id, root=root)
    assert zp.ledger_id_from_underreplication_lock_path(lock, root=root) == ledger_id


def test_underreplication_lock_path() -> None:
    assert underreplication_lock_path(5) == "/ledgers/underreplication/locks/urL0000000005"
    assert zp.ledger_id_from_underreplication_lock_path("/ledgers/underreplication/locks/urL0000000005") == 5
    for bad in [
        "/ledgers/underreplication/locks/urL5",
        "/ledgers/underreplication/locks/5",
        "/ledgers/underreplication/ledgers/urL0000000005",
        "/ledgers/underreplication/locks/urL0000000005/x",
    ]:
        with pytest.raises(PathError):
            zp.ledger_id_from_underreplication_lock_path(bad)
    with pytest.raises(PathError):
        underreplication_lock_path(-1)
    with pytest.raises(PathError):
        underreplication_path(MAX_LEDGER_ID + 1)


def test_auditor_vote_sequence() -> None:
    assert zp.auditor_vote_sequence("V_0000000042") == 42
    for bad in ["V_", "V_x1", "v_0000000001", "0000000001", "V_-1", "V_" + "9" * 5000]:
        with pytest.raises(PathError):
            zp.auditor_vote_sequence(bad)


# --------------------------------------------------------------------------- other nodes


def test_cluster_paths() -> None:
    assert zp.available_path() == "/ledgers/available"
    assert zp.readonly_path() == "/ledgers/available/readonly"
    assert zp.available_bookie_path("bk1:3181") == "/ledgers/available/bk1:3181"
    assert zp.readonly_bookie_path("bk1:3181") == "/ledgers/available/readonly/bk1:3181"
    assert zp.cookies_path() == "/ledgers/cookies"
    assert zp.cookie_path("bookie-1") == "/ledgers/cookies/bookie-1"
    assert zp.layout_path() == "/ledgers/LAYOUT"
    assert zp.instance_id_path() == "/ledgers/INSTANCEID"
    assert zp.underreplication_root_path() == "/ledgers/underreplication"
    assert zp.underreplication_ledgers_path() == "/ledgers/underreplication/ledgers"
    assert zp.underreplication_locks_path() == "/ledgers/underreplication/locks"
    assert zp.underreplication_disable_path() == "/ledgers/underreplication/disable"
    assert zp.lost_bookie_recovery_delay_path() == "/ledgers/underreplication/lostBookieRecoveryDelay"
    assert zp.auditor_election_path() == "/ledgers/underreplication/auditorelection"
    assert zp.layout_path(root="/pulsar/ledgers") == "/pulsar/ledgers/LAYOUT"
    assert zp.available_path(root="/") == "/available"


@pytest.mark.parametrize("bookie_id", ["", "readonly", "a/b", "a b", "..", "."])
def test_bad_bookie_ids_rejected(bookie_id: str) -> None:
    with pytest.raises(PathError):
        zp.available_bookie_path(bookie_id)
    with pytest.raises(PathError):
        zp.cookie_path(bookie_id)


# --------------------------------------------------------------------------- metadata service URI


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("zk+hierarchical://h1:2181;h2:2181/ledgers", (["h1:2181", "h2:2181"], "/ledgers", H)),
        ("zk://h1:2181/ledgers", (["h1:2181"], "/ledgers", H)),
        ("zk+longhierarchical://h1:2181,h2:2181/ledgers", (["h1:2181", "h2:2181"], "/ledgers", LH)),
        ("zk+flat://zk/pulsar/ledgers", (["zk"], "/pulsar/ledgers", FLAT)),
        ("ZK+Hierarchical://h1:2181/ledgers", (["h1:2181"], "/ledgers", H)),
        ("zk://h1:2181/ledgers/", (["h1:2181"], "/ledgers", H)),
        ("zk://h1:2181/", (["h1:2181"], "/", H)),
        ("zk://[::1]:2181;10.0.0.1:2181/ledgers", (["[::1]:2181", "10.0.0.1:2181"], "/ledgers", H)),
    ],
)
def test_parse_metadata_uri(uri: str, expected: tuple[list[str], str, LedgerManager]) -> None:
    assert parse_metadata_uri(uri) == expected


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("h1:2181/ledgers", "scheme"),
        ("http://h1:2181/ledgers", "scheme"),
        ("zk+ms://h1:2181/ledgers", "unsupported ledger manager"),
        ("zk+null://h1:2181/ledgers", "unsupported ledger manager"),
        ("zk+://h1:2181/ledgers", "unsupported ledger manager"),
        ("zkx://h1:2181/ledgers", "scheme"),
        ("zk://h1:2181", "no ledgers root"),
        ("zk:///ledgers", "host"),
        ("zk://h1:2181;;h2:2181/ledgers", "host"),
        ("zk://h1:99999/ledgers", "port"),
        ("zk://h1:0/ledgers", "port"),
        ("zk://h1:/ledgers", "host"),
        ("zk://h 1/ledgers", "host"),
        ("zk://user@h1/ledgers", "user info"),
        ("zk://h1/ledgers?x=1", "query"),
        ("zk://h1/ledgers#f", "fragment"),
        ("zk://h1/a//b", "empty"),
    ],
)
def test_parse_metadata_uri_rejects(uri: str, message: str) -> None:
    with pytest.raises(PathError, match=message):
        parse_metadata_uri(uri)


VALID_URIS = st.builds(
    lambda scheme, hosts, root: f"{scheme}://{';'.join(hosts)}{root}",
    st.sampled_from(["zk", "zk+hierarchical", "zk+longhierarchical", "zk+flat", "ZK+Flat"]),
    st.lists(st.sampled_from(["h1:2181", "zk", "10.0.0.1:2181", "[::1]:2181", "zk-3.example:2182"]), min_size=1),
    st.sampled_from(["/ledgers", "/pulsar/ledgers", "/", "/ledgers/"]),
)


@given(uri=VALID_URIS, mutate=st.booleans(), data=st.data())
def test_parse_metadata_uri_never_crashes(uri: str, mutate: bool, data: st.DataObject) -> None:
    """A valid URI parses; with one character changed it parses to a consistent value or raises PathError (half
    the examples are valid URIs, so the assertions are reached)."""
    text = data.draw(one_mutation(uri, "zk+:/;,[]@?#.h1lf0")) if mutate else uri
    try:
        hosts, root, manager = parse_metadata_uri(text)
    except PathError:
        assert mutate, f"the valid URI {text} was refused"
        return
    assert hosts and all(hosts) and root.startswith("/") and manager in LedgerManager
    assert root == "/" or not root.endswith("/")
