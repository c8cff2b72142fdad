"""The checker's input: Spark's own Kafka source (``spark-sql-kafka-0-10``), its options from the settings.

:func:`kafka_source_options` turns the ``[kafka]`` section and the ``[checker]`` reading keys into the source's
options: ``subscribe`` to the topic, the connection as ``kafka.*`` Java client properties (SASL and TLS included),
``startingOffsets`` (only read when the checkpoint is new: afterwards Spark resumes from the offsets its checkpoint
holds), ``failOnDataLoss`` and ``maxOffsetsPerTrigger``.

:func:`check_checkpoint_source` runs before the query starts. A checkpoint written by the Python Kafka source of
earlier versions holds offsets Spark's source cannot read; rather than re-reading the whole topic or skipping what
was not checked, the checker stops and says how to continue exactly where that checkpoint stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

from scrutiny.connectors.kafka.config import kafka_client_config
from scrutiny.connectors.kafka.settings import KafkaSection
from scrutiny.core.errors import ConfigError, ScrutinyError

#: Spark's name of its Kafka source.
FORMAT = "kafka"


class CheckpointSourceError(ScrutinyError):
    """The checkpoint was written by another Kafka source: its offsets mean nothing to Spark's."""


def kafka_source_options(
    section: KafkaSection,
    *,
    starting_offsets: str = "earliest",
    fail_on_data_loss: bool = True,
    max_offsets_per_trigger: int = 0,
    fetch_wait_ms: int | None = None,
) -> dict[str, str]:
    """The options of Spark's Kafka source reading ``section.topic``; ConfigError naming the key when invalid.

    Runs on the driver when the job builds its query. ``max_offsets_per_trigger`` 0 means no cap. ``fetch_wait_ms``:
    the consumers' ``fetch.max.wait.ms`` (None: Kafka's default, 500 ms, which each task reading a partition's last
    records waits out once). The SASL password
    is revealed into ``kafka.sasl.jaas.config``, which Spark redacts in plans and its UI.
    """
    properties = kafka_client_config(section).java_properties()
    options = {f"kafka.{key}": value for key, value in properties.items()}
    options |= {
        "subscribe": section.topic,
        "startingOffsets": _starting_offsets(starting_offsets, section.topic),
        "failOnDataLoss": "true" if fail_on_data_loss else "false",
        "includeHeaders": "false",
    }
    if max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    if fetch_wait_ms is not None:
        options["kafka.fetch.max.wait.ms"] = str(fetch_wait_ms)
    return options


def _starting_offsets(text: str, topic: str) -> str:
    """``earliest``, ``latest``, or Spark's JSON ``{"topic": {"0": 42, ...}}`` naming only ``topic``."""
    value = text.strip()
    if value in ("earliest", "latest"):
        return value
    try:
        document = json.loads(value)
    except ValueError:
        document = None
    if not (isinstance(document, dict) and set(document) == {topic} and isinstance(document[topic], dict)):
        raise ConfigError(
            f'checker.starting_offsets must be earliest, latest or {{"{topic}": {{"PARTITION": OFFSET, ...}}}}, '
            f"not {text!r}"
        )
    return value


def check_checkpoint_source(checkpoint: str, topic: str) -> None:
    """Refuse a local checkpoint whose offsets were written by the former Python Kafka source (see the module doc).

    The error names the offsets to start a new checkpoint from: the end of the last batch Spark completed, so
    nothing is read twice and nothing is skipped. A checkpoint in an object store is not inspected.
    """
    if "://" in checkpoint:
        return
    offsets, commits = Path(checkpoint) / "offsets", Path(checkpoint) / "commits"
    done = sorted((int(p.name) for p in commits.glob("[0-9]*") if p.name.isdigit()), reverse=True)
    planned = sorted((int(p.name) for p in offsets.glob("[0-9]*") if p.name.isdigit()), reverse=True)
    if not planned:
        return
    former = _former_offsets((offsets / str(planned[0])).read_text(encoding="utf-8"))
    if former is None:
        return
    resume = _former_offsets((offsets / str(done[0])).read_text(encoding="utf-8")) if done else None
    start = json.dumps({topic: resume}) if resume else "earliest"
    raise CheckpointSourceError(
        f"the checkpoint {checkpoint} was written by the Python Kafka source of an earlier version, whose offsets "
        f"Spark's Kafka source cannot read. Continue exactly where it stopped: give checker.checkpoint_dir a new "
        f"directory and set checker.starting_offsets = '{start}' (the end of its last completed batch); the "
        "tables stay as they are. See docs/checker.md."
    )


def _former_offsets(text: str) -> dict[str, int] | None:
    """Partition -> next offset when an offset log file holds the former source's ``{"topic", "partitions"}``."""
    for line in text.splitlines()[2:]:
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict) and set(document) == {"topic", "partitions"}:
            return {str(p): int(o) for p, o in document["partitions"].items()}
    return None
