"""What the local Pulsar broker is told, and how its REST producer's answers are read."""

from __future__ import annotations

import pytest

from scrutiny.services.pulsar import PulsarOptions, managed_ledger_name, message_position
from scrutiny.services.servers import ServicesError

pytestmark = pytest.mark.unit


def test_the_broker_uses_the_services_zookeeper_and_bookies_and_keeps_closed_ledgers() -> None:
    text = PulsarOptions(ensemble=3, write_quorum=2, ack_quorum=1, entries_per_ledger=5).config(
        "127.0.0.1:2181", 6650, 8080
    )
    conf = dict(line.split("=", 1) for line in text.splitlines())
    assert conf["metadataStoreUrl"] == conf["configurationMetadataStoreUrl"] == "zk:127.0.0.1:2181"
    assert conf["bookkeeperMetadataServiceUri"] == "zk+hierarchical://127.0.0.1:2181/ledgers"
    quorums = ("managedLedgerDefaultEnsembleSize", "managedLedgerDefaultWriteQuorum", "managedLedgerDefaultAckQuorum")
    assert [conf[k] for k in quorums] == ["3", "2", "1"]
    assert (conf["brokerServicePort"], conf["webServicePort"], conf["advertisedAddress"]) == (
        "6650",
        "8080",
        "127.0.0.1",
    )
    assert conf["managedLedgerMaxEntriesPerLedger"] == "5"
    assert (conf["defaultRetentionTimeInMinutes"], conf["brokerDeleteInactiveTopicsEnabled"]) == ("-1", "false")
    assert conf["systemTopicEnabled"] == "false"


@pytest.mark.parametrize(
    "bad",
    [
        {"ensemble": 2, "write_quorum": 3},
        {"write_quorum": 2, "ack_quorum": 3},
        {"ack_quorum": 0},
        {"entries_per_ledger": 0},
    ],
)
def test_impossible_ledger_shapes_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ServicesError):
        PulsarOptions(**bad)


def test_a_message_id_names_its_ledger_and_entry() -> None:
    assert message_position("12:4:-1") == (12, 4)
    assert message_position("7:0:-1:0") == (7, 0)
    assert managed_ledger_name("orders") == "public/default/persistent/orders"
