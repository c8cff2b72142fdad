"""Deleting the event topic of a development broker (the embedded default's fresh start), on a real broker."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaProducer

from scrutiny.connectors.kafka.config import admin_kwargs, producer_kwargs
from scrutiny.connectors.kafka.publisher import delete_topic
from scrutiny.settings.loader import Settings
from tests.support.servers import KafkaTopicFactory

pytestmark = pytest.mark.integration


def test_delete_topic_removes_it_with_its_records_and_then_finds_nothing(
    service_settings: Settings, kafka_topic_factory: KafkaTopicFactory, kafka_admin: KafkaAdminClient
) -> None:
    topic = kafka_topic_factory(partitions=2)
    producer = KafkaProducer(**producer_kwargs(service_settings.kafka))
    for index in range(10):
        producer.send(topic, key=str(index).encode(), value=b"event")
    producer.flush()
    producer.close()
    options = admin_kwargs(service_settings.kafka)
    assert delete_topic(options, topic) is True
    assert topic not in set(kafka_admin.list_topics())
    assert delete_topic(options, topic) is False
