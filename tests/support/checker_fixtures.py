"""The end-to-end checker tests' settings for a scenario on the session's servers (a fixture of the whole suite)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from scrutiny.settings.loader import Settings
from scrutiny.simulator.model import Scenario
from tests.support.checker_harness import SettingsFor, harness_settings
from tests.support.servers import KafkaTopicFactory


@pytest.fixture
def settings_for(
    service_settings: Settings, zk_client: KazooClient, kafka_topic_factory: KafkaTopicFactory, tmp_path: Path
) -> SettingsFor:
    def make(scenario: Scenario) -> Settings:
        topic = kafka_topic_factory(partitions=2)
        return harness_settings(service_settings, scenario, zk_client.chroot, topic, tmp_path)

    return make
