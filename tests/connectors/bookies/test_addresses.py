"""Resolving bookie ids to addresses: override, then registration, then a host:port id, else an error."""

from __future__ import annotations

import pytest

from scrutiny.connectors.bookies.addresses import (
    BookieAddressBook,
    BookieAddressError,
    parse_address,
    resolve_bookie_address,
)
from scrutiny.core.errors import ScrutinyError
from scrutiny.core.zk_records import BookieServiceInfo, Endpoint, format_bookie_service_info

RPC = Endpoint(id="bookie", host="10.0.0.7", port=3181, protocol="bookie-rpc")
HTTP = Endpoint(id="http", host="10.0.0.7", port=8000, protocol="http")
INFO = BookieServiceInfo(endpoints=(HTTP, RPC))


def test_an_override_comes_first() -> None:
    address = resolve_bookie_address("bk1:3181", overrides={"bk1:3181": "proxy:4000"}, registration=INFO)
    assert address == ("proxy", 4000)
    assert resolve_bookie_address("bk1", overrides={"bk1": ("h", 1)}) == ("h", 1)


def test_the_registrations_rpc_endpoint_comes_next() -> None:
    assert resolve_bookie_address("bk1:3181", registration=INFO) == ("10.0.0.7", 3181)
    assert resolve_bookie_address("bookie-uuid", registration=format_bookie_service_info(INFO)) == ("10.0.0.7", 3181)
    assert resolve_bookie_address("bk1", overrides={"other": "x:1"}, registration=INFO) == ("10.0.0.7", 3181)


@pytest.mark.parametrize(
    "registration",
    [None, b"", b"\xff\xff not protobuf", BookieServiceInfo(endpoints=(HTTP,))],
    ids=["none", "legacy-empty", "undecodable", "no-rpc-endpoint"],
)
def test_a_host_port_id_is_the_last_resort(registration: BookieServiceInfo | bytes | None) -> None:
    assert resolve_bookie_address("bk-3.example:3181", registration=registration) == ("bk-3.example", 3181)


@pytest.mark.parametrize(
    ("registration", "why"),
    [
        (None, "no registration is known for it"),
        (b"", "its registration is empty (legacy bookie)"),
        (b"\xff\xff", "its registration does not decode"),
        (BookieServiceInfo(endpoints=(HTTP,)), "its registration has no bookie-rpc endpoint"),
    ],
)
def test_an_unresolvable_id_is_a_clear_error(registration: BookieServiceInfo | bytes | None, why: str) -> None:
    with pytest.raises(BookieAddressError) as caught:
        resolve_bookie_address("bookie-uuid", registration=registration)
    assert isinstance(caught.value, ScrutinyError)
    assert caught.value.bookie_id == "bookie-uuid"
    message = str(caught.value)
    assert message.startswith("cannot resolve bookie id 'bookie-uuid' to an address")
    assert why in message and "not host:port" in message


@pytest.mark.parametrize("text", ["host", "host:", ":3181", "host:0", "host:65536", "host:31a", "a b:1", "[zz]:1"])
def test_malformed_addresses_are_errors(text: str) -> None:
    with pytest.raises(BookieAddressError, match="is not host:port"):
        parse_address(text)
    with pytest.raises(BookieAddressError, match="for bookie 'bk'"):
        resolve_bookie_address("bk", overrides={"bk": text})


def test_addresses_parse() -> None:
    assert parse_address(" bk-1.example.com:3181 ") == ("bk-1.example.com", 3181)
    assert parse_address("[::1]:3181") == ("::1", 3181)
    assert parse_address("127.0.0.1:65535") == ("127.0.0.1", 65535)


def test_the_address_book_resolves_and_checks_overrides_up_front() -> None:
    book = BookieAddressBook(overrides={"a": "proxy:1"}, registrations={"b": INFO, "c": b""})
    assert book.resolve("a") == ("proxy", 1)
    assert book.resolve("b") == ("10.0.0.7", 3181)
    assert book.resolve("c:3181") == ("c", 3181)
    with pytest.raises(BookieAddressError):
        book.resolve("c")
    moved = book.with_registrations(
        {"b": BookieServiceInfo(endpoints=(Endpoint("x", "10.0.0.8", 3182, "bookie-rpc"),))}
    )
    assert moved.resolve("b") == ("10.0.0.8", 3182) and moved.resolve("a") == ("proxy", 1)
    with pytest.raises(BookieAddressError, match="for bookie 'z'"):
        BookieAddressBook(overrides={"z": "nope"})


def test_the_address_book_is_a_snapshot() -> None:
    overrides = {"a": "proxy:1"}
    book = BookieAddressBook(overrides=overrides)
    overrides["a"] = "elsewhere:2"
    assert book.resolve("a") == ("proxy", 1)
