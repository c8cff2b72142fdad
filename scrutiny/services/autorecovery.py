"""BookKeeper's own AutoRecovery (the Auditor and a ReplicationWorker) beside the real local bookies, on demand.

``scrutiny services autorecovery start|stop`` and the tests that compare the checker with BookKeeper's Auditor use
it. It is ``org.apache.bookkeeper.replication.AutoRecoveryMain`` from the jars of ``jvm/bookkeeper/pom.xml``, one
JVM under ``<state_dir>/bookies/autorecovery/`` (``ar.conf``, ``server.log``, ``state.json``), against the services'
ZooKeeper. Its check intervals are BookKeeper's settings of the same meaning (0 turns a check off):

* ``auditorPeriodicCheckInterval``: every ledger's entries checked against its bookies (default a week);
* ``auditorPeriodicBookieCheckInterval``: lost bookies looked for (default a day);
* ``auditorReplicasCheckInterval``: each closed ledger's replicas counted (default off);
* ``lostBookieRecoveryDelay``: how long a bookie may be gone before its ledgers are marked (default 0).

With a metrics port it serves its stats as Prometheus text (the replicas check reports what it finds there and in
its log, without marking anything).

It has no port: it runs when its process lives and an auditor has been elected
(``<root>/underreplication/auditorelection`` holds a vote).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from scrutiny.connectors.zookeeper.tree import read_autorecovery
from scrutiny.paths import BOOKKEEPER_LOGGING
from scrutiny.services.bookkeeper import LocalBookies
from scrutiny.services.bookkeeper_tools import (
    METADATA_ROOT,
    bookkeeper_classpath,
    jvm_options,
    metadata_service_uri,
    stats_config,
)
from scrutiny.services.servers import (
    AUTORECOVERY,
    LOG_FILE,
    STATE_FILE,
    RunningServer,
    ServicesError,
    ServiceState,
    java_binary,
    read_record,
    recorded_state,
    spawn_server,
    stop_process,
)

__all__ = ["AutoRecoveryOptions", "AutoRecoveryStatus", "LocalAutoRecovery"]

AUTORECOVERY_MAIN = "org.apache.bookkeeper.replication.AutoRecoveryMain"
CONFIG_FILE = "ar.conf"
#: Its directory among the bookies' (``<state_dir>/bookies/autorecovery``).
AUTORECOVERY_DIR = "autorecovery"
_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class AutoRecoveryOptions:
    """The Auditor's check intervals and the lost-bookie delay, in seconds (0: that check is off), and the loopback
    port of its metrics (0: none)."""

    periodic_check_s: int = 604_800
    bookie_check_s: int = 86_400
    replicas_check_s: int = 0
    lost_bookie_recovery_delay_s: int = 0
    metrics_port: int = 0

    def __post_init__(self) -> None:
        for name in (
            "periodic_check_s",
            "bookie_check_s",
            "replicas_check_s",
            "lost_bookie_recovery_delay_s",
            "metrics_port",
        ):
            if getattr(self, name) < 0:
                raise ServicesError(f"autorecovery option {name} must not be negative")

    def config(self, zookeeper: str) -> str:
        """The ``ar.conf`` text."""
        lines = {
            "metadataServiceUri": metadata_service_uri(zookeeper),
            "auditorPeriodicCheckInterval": self.periodic_check_s,
            "auditorPeriodicBookieCheckInterval": self.bookie_check_s,
            "auditorReplicasCheckInterval": self.replicas_check_s,
            "lostBookieRecoveryDelay": self.lost_bookie_recovery_delay_s,
            "zkTimeout": 4000,
            # AutoRecovery names itself by a bookie id (its auditor vote, the replication locks): loopback here.
            "advertisedAddress": "127.0.0.1",
            "allowLoopback": "true",
            "httpServerEnabled": "false",
            **stats_config(self.metrics_port),
        }
        return "".join(f"{key}={value}\n" for key, value in lines.items())


@dataclass(frozen=True, slots=True)
class AutoRecoveryStatus:
    """Whether AutoRecovery runs, and its process."""

    state: ServiceState
    pid: int | None
    log_file: Path

    def to_json(self) -> dict[str, object]:
        """Its entry in ``services status --format json``."""
        return {"state": str(self.state), "pid": self.pid, "log_file": str(self.log_file)}


class LocalAutoRecovery:
    """AutoRecovery beside ``bookies`` (in their directory, on their ZooKeeper, with their timeouts; one at a time)."""

    def __init__(self, bookies: LocalBookies) -> None:
        self.bookies = bookies
        self.directory = bookies.directory / AUTORECOVERY_DIR

    def status(self) -> AutoRecoveryStatus:
        """Running while its recorded process lives; crashed when it died; stopped when none is recorded."""
        state, record = recorded_state(AUTORECOVERY, self.directory)
        return AutoRecoveryStatus(state, None if record is None else record.pid, self.directory / LOG_FILE)

    def start(self, options: AutoRecoveryOptions | None = None) -> AutoRecoveryStatus:
        """Start it (a running one is stopped first, so new intervals apply); return once an auditor is elected."""
        self.stop()
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / CONFIG_FILE
        config.write_text((options or AutoRecoveryOptions()).config(self.bookies.zookeeper))
        command = [
            java_binary(),
            "-Xmx128m",
            "-XX:+UseSerialGC",
            *jvm_options(BOOKKEEPER_LOGGING),
            "-cp",
            bookkeeper_classpath(),
            AUTORECOVERY_MAIN,
            "-c",
            str(config),
        ]
        server = spawn_server(AUTORECOVERY, self.directory, command, 0)
        try:
            self._wait_elected(server)
        except BaseException:
            server.stop(self.bookies.stop_timeout)
            raise
        return self.status()

    def stop(self) -> AutoRecoveryStatus:
        """Stop it (SIGTERM, then SIGKILL) if it runs."""
        record = read_record(self.directory)
        if record is not None:
            stop_process(record, self.bookies.stop_timeout)
            with contextlib.suppress(FileNotFoundError):
                (self.directory / STATE_FILE).unlink()
        return self.status()

    def _wait_elected(self, server: RunningServer) -> None:
        deadline = time.monotonic() + self.bookies.start_timeout
        with self.bookies.zookeeper_client() as client:
            while read_autorecovery(client, METADATA_ROOT).auditor is None:
                if not server.is_alive():
                    raise ServicesError("AutoRecovery exited before an auditor was elected", log_tail=server.log_tail())
                if time.monotonic() >= deadline:
                    raise ServicesError("AutoRecovery elected no auditor in time", log_tail=server.log_tail())
                time.sleep(_POLL_S)
