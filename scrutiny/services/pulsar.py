"""A real Apache Pulsar broker beside the real local bookies: Pulsar's own ledgers for the checker to check.

``org.apache.pulsar.PulsarStandaloneStarter`` from the jars of ``jvm/pulsar/pom.xml`` (Pulsar 4.2.4, which ships the
bookies' BookKeeper 4.17.3), started broker-only (``--only-broker``: no ZooKeeper or bookies of its own, no functions
worker, no stream storage) against the services' ZooKeeper and bookies, in ``<state_dir>/pulsar/`` (``broker.conf``,
``server.log``, ``state.json``). At its first start it creates the cluster ``standalone``, the tenant ``public`` and
the namespace ``public/default`` itself. Its topics' ledgers are BookKeeper ledgers like any other, carrying Pulsar's
custom metadata (``application=pulsar``, ``component=managed-ledger``, ``pulsar/managed-ledger=<tenant>/<namespace>/
persistent/<topic>``; schema ledgers ``component=schema``).

The configuration is for tests and demonstrations: closed ledgers are kept (infinite retention, inactive topics never
deleted), a topic's ledger rolls over after ``entries_per_ledger`` messages, and no system topics are made. Messages
are written with the broker's REST producer (``POST /topics/persistent/...``; one message, one entry), so no Pulsar
client is needed. Measured here (2 cores, loaded): a first start 25 s, later ones about 11 s; 270-440 MB resident.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scrutiny.paths import BOOKKEEPER_LOGGING, PULSAR_JARS
from scrutiny.services.bookkeeper_tools import jvm_options, metadata_service_uri
from scrutiny.services.servers import (
    LOG_FILE,
    LOOPBACK,
    PULSAR,
    RunningServer,
    ServicesError,
    free_port,
    java_binary,
    spawn_server,
)

__all__ = ["LocalPulsar", "PulsarOptions", "managed_ledger_name", "message_position"]

STANDALONE_MAIN = "org.apache.pulsar.PulsarStandaloneStarter"
CONFIG_FILE = "broker.conf"
#: What Pulsar's start script opens on Java 17 beyond what every BookKeeper JVM here gets (``jvm_options``).
_MORE_OPENS = ("java.base/sun.net", "java.management/sun.management")
_POLL_S = 0.25
_HTTP_TIMEOUT_S = 30.0
#: Starts tried with new ports when one was taken between choosing it and the broker's bind (its log says so).
_PORT_ATTEMPTS = 3
_BIND_FAILED = b"failed to bind to"


class _PortTakenError(ServicesError):
    """The broker could not bind a port chosen free a moment before: another process took it."""


class _LogWatch:
    """Looks for a phrase in what a log file gains from an offset on, reading each byte once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.carry = b""

    def saw(self, phrase: bytes) -> bool:
        """Whether ``phrase`` (lower case) is in what the log gained since this watch began."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                new = handle.read()
        except OSError:
            return False
        self.offset += len(new)
        text = self.carry + new.lower()
        self.carry = text[-len(phrase) :]
        return phrase in text


@dataclass(frozen=True, slots=True)
class PulsarOptions:
    """The ledgers Pulsar makes: their ensemble, write and ack quorums, and how many entries before a rollover."""

    ensemble: int = 2
    write_quorum: int = 2
    ack_quorum: int = 2
    entries_per_ledger: int = 50_000
    heap_mb: int = 384

    def __post_init__(self) -> None:
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble:
            raise ServicesError("Pulsar's ledgers need 1 <= ack quorum <= write quorum <= ensemble")
        if self.entries_per_ledger < 1 or self.heap_mb < 64:
            raise ServicesError("entries_per_ledger must be positive and heap_mb at least 64")

    def config(self, zookeeper: str, broker_port: int, web_port: int) -> str:
        """The broker's configuration file."""
        lines = {
            "clusterName": "standalone",
            "metadataStoreUrl": f"zk:{zookeeper}",
            "configurationMetadataStoreUrl": f"zk:{zookeeper}",
            "bookkeeperMetadataServiceUri": metadata_service_uri(zookeeper),
            "advertisedAddress": LOOPBACK,
            "bindAddress": LOOPBACK,
            "brokerServicePort": broker_port,
            "webServicePort": web_port,
            "managedLedgerDefaultEnsembleSize": self.ensemble,
            "managedLedgerDefaultWriteQuorum": self.write_quorum,
            "managedLedgerDefaultAckQuorum": self.ack_quorum,
            "managedLedgerMaxEntriesPerLedger": self.entries_per_ledger,
            "managedLedgerMinLedgerRolloverTimeMinutes": 0,
            # Closed ledgers stay: no retention limit, topics without producers or subscriptions are not deleted.
            "defaultRetentionTimeInMinutes": -1,
            "defaultRetentionSizeInMB": -1,
            "brokerDeleteInactiveTopicsEnabled": "false",
            # No system topics (__change_events): only the ledgers of the topics written here.
            "systemTopicEnabled": "false",
            "topicLevelPoliciesEnabled": "false",
        }
        return "".join(f"{key}={value}\n" for key, value in lines.items())


def managed_ledger_name(topic: str, namespace: str = "public/default") -> str:
    """The ``pulsar/managed-ledger`` value of a persistent topic's ledgers."""
    return f"{namespace}/persistent/{topic}"


class LocalPulsar:
    """One broker in ``directory`` against ``zookeeper``'s BookKeeper cluster (at ``/ledgers``)."""

    def __init__(self, directory: Path, zookeeper: str, *, start_timeout: float = 120.0) -> None:
        self.directory = directory
        self.zookeeper = zookeeper
        self.start_timeout = start_timeout
        self.server: RunningServer | None = None
        self.web_port = 0

    @property
    def web_url(self) -> str:
        """The broker's HTTP address (admin API and REST producer)."""
        return f"http://{LOOPBACK}:{self.web_port}"

    def start(self, options: PulsarOptions | None = None) -> float:
        """Start the broker; return once ``public/default`` exists, with the seconds it took."""
        if not (PULSAR_JARS / "pulsar-broker.jar").is_file():
            raise ServicesError(f"Pulsar's jars are not in {PULSAR_JARS}: run scripts/setup")
        options = options or PulsarOptions()
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / CONFIG_FILE
        opens = [part for module in _MORE_OPENS for part in ("--add-opens", f"{module}=ALL-UNNAMED")]
        command = [
            java_binary(),
            f"-Xmx{options.heap_mb}m",
            "-XX:MaxDirectMemorySize=256m",
            "-XX:+UseSerialGC",
            "-Djute.maxbuffer=10485760",
            *jvm_options(BOOKKEEPER_LOGGING),
            *opens,
            "-cp",
            str(PULSAR_JARS / "*"),
            STANDALONE_MAIN,
            "--config",
            str(config),
            "--only-broker",
            "-nfw",  # no functions worker
            "-nss",  # no stream storage
            "-a",  # the advertised address
            LOOPBACK,
        ]
        began = time.monotonic()
        for attempt in range(_PORT_ATTEMPTS):  # new ports each try: one of the last try's was taken before its bind
            broker_port, self.web_port = free_port(), free_port()
            config.write_text(options.config(self.zookeeper, broker_port, self.web_port))
            watch = _LogWatch(self.directory / LOG_FILE)
            self.server = spawn_server(PULSAR, self.directory, command, broker_port)
            try:
                self._wait_ready(watch)
            except _PortTakenError:
                self.stop()
                if attempt == _PORT_ATTEMPTS - 1:
                    raise
                continue
            except BaseException:
                self.stop()
                raise
            return time.monotonic() - began
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker (SIGTERM closes its ledgers; SIGKILL after ``timeout``)."""
        if self.server is not None:
            self.server.stop(timeout)
            self.server = None

    def _wait_ready(self, watch: _LogWatch) -> None:
        """Until the namespace ``public/default`` exists (the clusters' list answers a little before it does);
        :class:`_PortTakenError` as soon as the broker's log says it could not bind one of its ports."""
        assert self.server is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            if watch.saw(_BIND_FAILED):
                raise _PortTakenError("the Pulsar broker could not bind its port", log_tail=self.server.log_tail())
            if not self.server.is_alive():
                raise ServicesError("the Pulsar broker exited while starting", log_tail=self.server.log_tail())
            with contextlib.suppress(OSError, ValueError, ServicesError):  # not listening yet; no tenant yet (404)
                if "public/default" in self._call("GET", "/admin/v2/namespaces/public", timeout=2.0):
                    return
            if time.monotonic() >= deadline:
                raise ServicesError(
                    f"the Pulsar broker did not start in {self.start_timeout:.0f} s", log_tail=self.server.log_tail()
                )
            time.sleep(_POLL_S)

    # --- what a test does with it ------------------------------------------------------------------

    def create_topic(self, topic: str) -> None:
        """Create the persistent topic ``public/default/<topic>`` (its first ledger opens)."""
        self._call("PUT", f"/admin/v2/persistent/public/default/{topic}")

    def produce(self, topic: str, payloads: list[bytes]) -> list[tuple[int, int]]:
        """Write each payload as one message; the (ledger, entry) of each, as the broker acknowledged them."""
        body = {"messages": [{"payload": base64.b64encode(p).decode()} for p in payloads]}
        answer = self._call("POST", f"/topics/persistent/public/default/{topic}", body)
        results = answer["messagePublishResults"]
        failed = [r for r in results if r.get("errorCode", 0) != 0]
        if failed or len(results) != len(payloads):
            raise ServicesError(f"Pulsar refused messages for {topic}: {failed or answer}")
        return [message_position(r["messageId"]) for r in results]

    def unload(self, topic: str) -> None:
        """Unload the topic: the broker closes its current ledger (it opens a new one when the topic is used again)."""
        self._call("PUT", f"/admin/v2/persistent/public/default/{topic}/unload")

    def _call(self, method: str, path: str, body: object = None, *, timeout: float = _HTTP_TIMEOUT_S) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.web_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                text = answer.read().decode()
        except urllib.error.HTTPError as error:
            raise ServicesError(f"Pulsar {method} {path}: HTTP {error.code} {error.read()[:500]!r}") from None
        return json.loads(text) if text.strip() else None


def message_position(message_id: str) -> tuple[int, int]:
    """``ledger:entry:partition`` (the REST producer's message id) as (ledger, entry)."""
    ledger, entry, *_ = message_id.split(":")
    return int(ledger), int(entry)
