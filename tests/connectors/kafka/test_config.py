"""Kafka client arguments from the ``[kafka]`` settings (kafka-python's, and librdkafka's for the watcher's producer):
what is passed, and which combinations are refused."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Producer

from scrutiny.connectors.kafka.config import (
    admin_kwargs,
    consumer_kwargs,
    kafka_client_config,
    librdkafka_config,
    parse_bootstrap_servers,
    producer_kwargs,
)
from scrutiny.connectors.kafka.settings import KafkaSection
from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret
from scrutiny.settings.loader import load_settings

SASL = KafkaSection(
    bootstrap_servers="b1:9093, b2:9093",
    security_protocol="SASL_SSL",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="scrutiny",
    sasl_password=Secret("hunter2"),
)


def test_plaintext_defaults_give_connection_only() -> None:
    kafka = KafkaSection(bootstrap_servers="127.0.0.1:40001")
    assert consumer_kwargs(kafka) == {
        "bootstrap_servers": ["127.0.0.1:40001"],
        "security_protocol": "PLAINTEXT",
        "client_id": "scrutiny-consumer",
    }
    assert admin_kwargs(kafka, client_id="x")["client_id"] == "x"
    assert producer_kwargs(kafka)["acks"] == "all"


def test_sasl_ssl_reveals_the_password_only_into_the_arguments(tmp_path: Path) -> None:
    cafile = tmp_path / "ca.pem"
    cafile.write_text("-----BEGIN CERTIFICATE-----\n")
    kafka = replace(SASL, ssl_cafile=str(cafile))
    arguments = producer_kwargs(kafka)
    assert arguments["bootstrap_servers"] == ["b1:9093", "b2:9093"]
    assert arguments["security_protocol"] == "SASL_SSL" and arguments["sasl_mechanism"] == "SCRAM-SHA-512"
    assert arguments["sasl_plain_username"] == "scrutiny" and arguments["sasl_plain_password"] == "hunter2"
    assert arguments["ssl_cafile"] == str(cafile)
    config = kafka_client_config(kafka)
    assert "hunter2" not in repr(config) and "hunter2" not in str(config) and "'***'" in repr(config)


def test_lower_case_protocol_and_mechanism_are_normalised() -> None:
    arguments = consumer_kwargs(replace(SASL, security_protocol="sasl_plaintext", sasl_mechanism="plain"))
    assert arguments["security_protocol"] == "SASL_PLAINTEXT" and arguments["sasl_mechanism"] == "PLAIN"


def test_settings_from_the_environment_reach_the_arguments() -> None:
    settings = load_settings(
        env={
            "SCRUTINY_KAFKA": "k1:9092,k2:9092",
            "SCRUTINY_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "SCRUTINY_KAFKA_SASL_MECHANISM": "PLAIN",
            "SCRUTINY_KAFKA_SASL_USERNAME": "u",
            "SCRUTINY_KAFKA_SASL_PASSWORD": "p",
        }
    )
    arguments = admin_kwargs(settings.kafka)
    assert arguments["bootstrap_servers"] == ["k1:9092", "k2:9092"] and arguments["sasl_plain_password"] == "p"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"security_protocol": "TLS"}, "kafka.security_protocol must be one of"),
        ({"sasl_mechanism": ""}, "needs kafka.sasl_mechanism"),
        ({"sasl_mechanism": "GSSAPI"}, "kafka.sasl_mechanism must be one of"),
        ({"sasl_username": ""}, "needs both kafka.sasl_username and kafka.sasl_password"),
        ({"sasl_password": Secret("")}, "needs both kafka.sasl_username and kafka.sasl_password"),
        ({"security_protocol": "SSL"}, "kafka.sasl_mechanism, kafka.sasl_username, kafka.sasl_password set but"),
        ({"ssl_cafile": "/nonexistent/ca.pem"}, "is not a readable file"),
        ({"bootstrap_servers": ""}, "kafka.bootstrap_servers must be"),
        ({"bootstrap_servers": "b1:9093,,b2:9093"}, "kafka.bootstrap_servers must be"),
        ({"bootstrap_servers": "b1"}, "entry 'b1' is not host:port"),
        ({"bootstrap_servers": "b1:99999"}, "entry 'b1:99999' is not host:port"),
    ],
)
def test_bad_combinations_are_refused_naming_the_keys(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        kafka_client_config(replace(SASL, **changes))  # type: ignore[arg-type]
    assert "hunter2" not in str(caught.value)


def test_cafile_without_ssl_is_refused(tmp_path: Path) -> None:
    cafile = tmp_path / "ca.pem"
    cafile.write_text("x")
    expected = "kafka.ssl_cafile is set but kafka.security_protocol is PLAINTEXT"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        kafka_client_config(KafkaSection(ssl_cafile=str(cafile)))


def test_sasl_password_without_sasl_protocol_is_refused() -> None:
    expected = "kafka.sasl_password set but kafka.security_protocol is PLAINTEXT"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        kafka_client_config(KafkaSection(sasl_password=Secret("hunter2")))


def test_bootstrap_servers_keep_ipv6_hosts() -> None:
    assert parse_bootstrap_servers("[::1]:9092, broker:19092") == ("[::1]:9092", "broker:19092")


def _certificate(tmp_path: Path) -> Path:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
            *("-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"),
        ],
        check=True,
        capture_output=True,
    )
    return cert


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_librdkafka_takes_the_same_connection_under_its_own_names(tmp_path: Path, protocol: str) -> None:
    sasl = protocol.startswith("SASL_")
    kafka = KafkaSection(
        bootstrap_servers="127.0.0.1:1,127.0.0.1:2",
        security_protocol=protocol,
        sasl_mechanism="SCRAM-SHA-256" if sasl else "",
        sasl_username="scrutiny" if sasl else "",
        sasl_password=Secret("hunter2" if sasl else ""),
        ssl_cafile=str(_certificate(tmp_path)) if "SSL" in protocol else "",
    )
    config = librdkafka_config(kafka_client_config(kafka).kwargs("scrutiny-watcher"))
    expected = {"bootstrap.servers": "127.0.0.1:1,127.0.0.1:2", "security.protocol": protocol}
    expected |= {"client.id": "scrutiny-watcher"}
    if sasl:
        expected |= {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "scrutiny", "sasl.password": "hunter2"}
    if "SSL" in protocol:
        expected["ssl.ca.location"] = kafka.ssl_cafile
    assert config == expected
    Producer(config).flush(0)  # librdkafka refuses an unknown key or value at construction


def test_an_argument_librdkafka_is_not_given_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a Kafka connection argument: acks"):
        librdkafka_config({"bootstrap_servers": ["b:1"], "acks": "all"})
