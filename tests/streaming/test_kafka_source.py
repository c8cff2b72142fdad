"""The options of Spark's Kafka source from the settings, and the refusal of a former source's checkpoint."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from scrutiny.connectors.kafka.settings import KafkaSection
from scrutiny.core.errors import ConfigError
from scrutiny.core.secret import Secret
from scrutiny.streaming.kafka_source import CheckpointSourceError, check_checkpoint_source, kafka_source_options

pytestmark = pytest.mark.unit

KAFKA = KafkaSection(bootstrap_servers="k1:9092,k2:9092", topic="events")


def test_plaintext_options_subscribe_to_the_topic_from_the_chosen_offsets() -> None:
    options = kafka_source_options(
        KAFKA, starting_offsets="latest", fail_on_data_loss=False, max_offsets_per_trigger=500
    )
    assert options == {
        "kafka.bootstrap.servers": "k1:9092,k2:9092",
        "kafka.security.protocol": "PLAINTEXT",
        "subscribe": "events",
        "startingOffsets": "latest",
        "failOnDataLoss": "false",
        "includeHeaders": "false",
        "maxOffsetsPerTrigger": "500",
    }
    assert "maxOffsetsPerTrigger" not in kafka_source_options(KAFKA)  # 0: no cap
    assert "kafka.fetch.max.wait.ms" not in kafka_source_options(KAFKA)  # Kafka's default
    assert kafka_source_options(KAFKA, fetch_wait_ms=20)["kafka.fetch.max.wait.ms"] == "20"


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_sasl_becomes_a_jaas_login_with_the_values_escaped(mechanism: str, module: str, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    section = replace(
        KAFKA,
        security_protocol="SASL_SSL",
        sasl_mechanism=mechanism,
        sasl_username='us"er',
        sasl_password=Secret('pa\\ss"word'),
        ssl_cafile=str(ca),
    )
    options = kafka_source_options(section)
    assert options["kafka.security.protocol"] == "SASL_SSL" and options["kafka.sasl.mechanism"] == mechanism
    assert options["kafka.sasl.jaas.config"] == f'{module} required username="us\\"er" password="pa\\\\ss\\"word";'
    assert options["kafka.ssl.truststore.type"] == "PEM" and options["kafka.ssl.truststore.location"] == str(ca)


def test_bad_connection_settings_and_offsets_are_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"kafka\.sasl_mechanism"):
        kafka_source_options(replace(KAFKA, security_protocol="SASL_PLAINTEXT"))
    for bad in ("newest", '{"other": {"0": 1}}', '{"events": 5}', "{"):
        with pytest.raises(ConfigError, match=r"checker\.starting_offsets"):
            kafka_source_options(KAFKA, starting_offsets=bad)
    exact = json.dumps({"events": {"0": 42, "1": 7}})
    assert kafka_source_options(KAFKA, starting_offsets=exact)["startingOffsets"] == exact


def offset_log(directory: Path, batch: int, source: object, *, committed: bool) -> None:
    (directory / "offsets").mkdir(parents=True, exist_ok=True)
    (directory / "commits").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}), json.dumps(source)]
    (directory / "offsets" / str(batch)).write_text("\n".join(lines), encoding="utf-8")
    if committed:
        (directory / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}', encoding="utf-8")


def test_a_former_sources_checkpoint_is_refused_with_the_offsets_to_resume_from(tmp_path: Path) -> None:
    offset_log(tmp_path, 0, {"topic": "events", "partitions": {"0": 10, "1": 4}}, committed=True)
    offset_log(tmp_path, 1, {"topic": "events", "partitions": {"0": 25, "1": 9}}, committed=False)  # not done
    with pytest.raises(CheckpointSourceError) as refused:
        check_checkpoint_source(str(tmp_path), "events")
    assert """checker.starting_offsets = '{"events": {"0": 10, "1": 4}}'""" in str(refused.value)


def test_a_former_checkpoint_with_no_completed_batch_resumes_from_the_start(tmp_path: Path) -> None:
    offset_log(tmp_path, 0, {"topic": "events", "partitions": {"0": 10}}, committed=False)
    with pytest.raises(CheckpointSourceError, match=r"checker\.starting_offsets = 'earliest'"):
        check_checkpoint_source(str(tmp_path), "events")


def test_sparks_own_checkpoints_and_new_ones_pass(tmp_path: Path) -> None:
    check_checkpoint_source(str(tmp_path / "new"), "events")
    offset_log(tmp_path, 0, {"events": {"0": 10, "1": 4}}, committed=True)
    check_checkpoint_source(str(tmp_path), "events")
    check_checkpoint_source("s3a://bucket/checkpoint", "events")  # not inspected
