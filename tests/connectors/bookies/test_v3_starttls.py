"""START_TLS request encoding and answer checks, TLS mode validation (pure: no sockets)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from scrutiny.connectors.bookies.fetch import FetchConfig, FetchConfigError, fetch_config_from_settings
from scrutiny.connectors.bookies.settings import BookiesSection
from scrutiny.connectors.bookies.v3_client import BookieClientConfig, client_tls_context
from scrutiny.connectors.bookies.v3_protocol import start_tls_refusal, start_tls_request
from scrutiny.proto import bookkeeper_protocol_pb2 as pb

#: Request field 106 (startTLSRequest), length-delimited: tag (106 << 3) | 2 as a varint, then length 0.
EMPTY_FIELD_106 = bytes([0xD2, 0x06, 0x00])


def test_bookkeepers_numbers() -> None:
    # BookKeeper's bookkeeper-proto/src/main/proto/BookkeeperProtocol.proto
    assert pb.START_TLS == 9
    assert pb.Request.DESCRIPTOR.fields_by_name["startTLSRequest"].number == 106
    assert pb.Response.DESCRIPTOR.fields_by_name["startTLSResponse"].number == 106


def test_the_request_is_a_v3_start_tls_header_and_an_empty_field_106() -> None:
    data = start_tls_request(7).SerializeToString()
    header = pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.START_TLS, txnId=7)
    encoded_header = header.SerializeToString()
    assert data == bytes([0x0A, len(encoded_header)]) + encoded_header + EMPTY_FIELD_106
    assert encoded_header == bytes([0x08, 3, 0x10, 9, 0x18, 7])


def answer(txn_id: int, status: int | None, operation: int = pb.START_TLS) -> bytes:
    response = pb.Response()
    response.header.version = pb.VERSION_THREE
    response.header.operation = operation  # type: ignore[assignment]
    response.header.txnId = txn_id
    if status is not None:
        response.status = status  # type: ignore[assignment]
    response.startTLSResponse.SetInParent()
    return response.SerializePartialToString()


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (answer(5, pb.EOK), None),
        (answer(5, pb.EBADREQ), "START_TLS refused with status EBADREQ: TLS is not enabled on the bookie"),
        (answer(5, pb.EUA), "START_TLS refused with status EUA"),
        (answer(6, pb.EOK), "the answer to START_TLS is for another request"),
        (answer(5, pb.EOK, pb.GET_LIST_OF_ENTRIES_OF_LEDGER), "the answer to START_TLS is for another request"),
        (answer(5, None), "answer to START_TLS without a status code BookKeeper defines"),
        (b"\xff\x00", "undecodable answer to START_TLS (2 bytes)"),
    ],
)
def test_only_eok_to_the_same_request_allows_the_upgrade(frame: bytes, reason: str | None) -> None:
    assert start_tls_refusal(5, frame) == reason


def test_tls_modes() -> None:
    assert BookieClientConfig().tls_mode == "starttls"
    assert BookieClientConfig(tls_mode="direct").tls_mode == "direct"
    with pytest.raises(ValueError, match="tls_mode must be one of starttls, direct"):
        BookieClientConfig(tls_mode="implicit")  # type: ignore[arg-type]


def test_fetch_config_tls_fields() -> None:
    assert FetchConfig().v3_tls_mode == "starttls"
    FetchConfig(v3_tls=True, v3_tls_mode="direct", v3_cert_file="/c.pem", v3_key_file="/k.pem")
    for options, message in [
        ({"v3_tls": True, "v3_tls_mode": "tls"}, "v3_tls_mode must be one of starttls, direct, not 'tls'"),
        ({"v3_cert_file": "/c.pem"}, "v3_cert_file is set but v3_tls is off"),
        ({"v3_tls": True, "v3_key_file": "/k.pem"}, "v3_key_file is set without v3_cert_file"),
    ]:
        with pytest.raises(FetchConfigError, match=message):
            FetchConfig(**options)  # type: ignore[arg-type]


def test_settings_keys_are_read() -> None:
    assert fetch_config_from_settings(BookiesSection(v3_tls=True)) == FetchConfig(v3_tls=True)
    section = BookiesSection(v3_tls=True, v3_tls_mode="direct", v3_cert_file="/c.pem", v3_key_file="/k.pem")
    config = fetch_config_from_settings(section)
    assert (config.v3_tls_mode, config.v3_cert_file, config.v3_key_file) == ("direct", "/c.pem", "/k.pem")


def test_a_missing_client_certificate_file_fails_at_configuration_time(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        client_tls_context(cert_file=str(tmp_path / "absent.pem"))
    assert isinstance(client_tls_context(), ssl.SSLContext)
