"""BookKeeper's own tools, run against a cluster: its shell, and the ledger tool that writes real ledgers.

Both are JVM programs on the class path of ``jvm/bookkeeper/pom.xml`` (``.jvm/bookkeeper/``): BookKeeper's shell
(``org.apache.bookkeeper.bookie.BookieShell``) and ``jvm/bookkeeper/LedgerTool.java``, a small program of this
project that uses BookKeeper's client to create, write, close, leave open, recover and delete ledgers (run from its
source: Java compiles a single-file program at launch). They are test and demonstration tooling: the product never
writes to a cluster.

``scripts/ledger-tool ARGS`` (``python -m scrutiny.services.bookkeeper_tools``) runs the ledger tool for a person,
against ``$SCRUTINY_ZOOKEEPER``'s cluster unless ``--metadata-service-uri`` is given.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from scrutiny.paths import BOOKKEEPER_JARS, BOOKKEEPER_TOOLS_LOGGING, LEDGER_TOOL_SOURCE
from scrutiny.services.servers import ServicesError, java_binary

__all__ = [
    "METADATA_ROOT",
    "LedgerToolError",
    "bookkeeper_classpath",
    "bookkeeper_shell",
    "entries_read_from_bookie",
    "jvm_options",
    "ledger_tool",
    "metadata_service_uri",
    "stats_config",
]

#: BookKeeper's default metadata root, where ``initnewcluster`` puts the cluster.
METADATA_ROOT = "/ledgers"

SHELL_MAIN = "org.apache.bookkeeper.bookie.BookieShell"
#: What BookKeeper's start scripts give its JVMs on Java 9 and later (netty and the native checksums need them).
_OPENS = ("java.base/java.io", "java.base/java.util.zip", "java.base/java.nio", "java.base/jdk.internal.misc")
#: How many times ``readledger -b`` is run before its failure is an error (see entries_read_from_bookie).
_SHELL_ATTEMPTS = 3
#: ``readledger -b`` logs each entry the bookie returned as ``--------- Lid=L, Eid=E ---------``.
_ENTRY_READ = re.compile(r"--------- Lid=(\d+), Eid=(\d+) ---------")


class LedgerToolError(ServicesError):
    """The ledger tool or BookKeeper's shell failed; the message holds its standard error."""


def metadata_service_uri(zookeeper: str, root: str = METADATA_ROOT) -> str:
    """BookKeeper's ``metadataServiceUri`` for a ZooKeeper connect string (hosts joined by ``;``)."""
    return f"zk+hierarchical://{zookeeper.replace(',', ';')}{root}"


def stats_config(port: int) -> dict[str, str]:
    """A BookKeeper JVM's stats settings: its metrics as Prometheus text on ``127.0.0.1:port/metrics``, or none (0)."""
    if not port:
        return {"statsProviderClass": "org.apache.bookkeeper.stats.NullStatsProvider"}
    return {
        "statsProviderClass": "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider",
        "prometheusStatsHttpAddress": "127.0.0.1",
        "prometheusStatsHttpPort": str(port),
    }


def jvm_options(logging_config: Path) -> list[str]:
    """The options every BookKeeper JVM here runs with, logging as ``logging_config`` says."""
    opens = [part for module in _OPENS for part in ("--add-opens", f"{module}=ALL-UNNAMED")]
    return [
        # Local bookies, AutoRecovery and the tools run briefly or lightly: the client compiler alone starts them in
        # a fraction of the CPU time (the optimizing compiler's work at start never pays off here).
        "-XX:TieredStopAtLevel=1",
        "-Djava.net.preferIPv4Stack=true",
        "-Dio.netty.tryReflectionSetAccessible=true",
        "-Dio.netty.leakDetectionLevel=disabled",
        f"-Dlog4j2.configurationFile=file:{logging_config}",
        *opens,
    ]


def bookkeeper_classpath() -> str:
    """BookKeeper's class path (``.jvm/bookkeeper/*``); ServicesError when ``scripts/setup`` has not resolved it."""
    if not (BOOKKEEPER_JARS / "bookkeeper-server.jar").is_file():
        raise ServicesError(f"BookKeeper's jars are not in {BOOKKEEPER_JARS}: run scripts/setup")
    return str(BOOKKEEPER_JARS / "*")


def _tool_command(*tail: str) -> list[str]:
    return [java_binary(), "-Xmx256m", *jvm_options(BOOKKEEPER_TOOLS_LOGGING), "-cp", bookkeeper_classpath(), *tail]


def bookkeeper_shell(metadata_service_uri: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``bookkeeper shell ARGS`` against the cluster (its exit status is the command's result)."""
    with tempfile.NamedTemporaryFile("w", prefix="scrutiny-bk-", suffix=".conf") as conf:
        # Generous client timeouts (seconds): on a loaded machine a read that times out would look like a lost entry.
        conf.write(f"metadataServiceUri={metadata_service_uri}\nreadEntryTimeout=30\naddEntryTimeout=30\n")
        conf.flush()
        command = _tool_command(SHELL_MAIN, "-conf", conf.name, *args)
        try:
            return subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise LedgerToolError(f"bookkeeper shell {' '.join(args)} did not finish in {timeout:.0f} s") from None


def ledger_tool(metadata_service_uri: str, *args: str, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Run the ledger tool (``create``, ``recover``, ``delete``, ``read``); the JSON object it printed per ledger."""
    command = _tool_command(str(LEDGER_TOOL_SOURCE), "--metadata-service-uri", metadata_service_uri, *args)
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise LedgerToolError(f"ledger tool {' '.join(args)} did not finish in {timeout:.0f} s") from None
    if done.returncode != 0:
        raise LedgerToolError(f"ledger tool {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def entries_read_from_bookie(
    metadata_service_uri: str, ledger_id: int, bookie_id: str, first: int, last: int
) -> set[int]:
    """The entries ``first..last`` of a ledger that one bookie returns to BookKeeper's ``shell readledger -b``.

    The shell reads each entry from that bookie alone (no fencing); an entry it lacks is logged as an error and
    left out. This is BookKeeper's own answer to "what does this bookie hold", entry by entry. With ``-b`` the
    shell's ``-le`` is exclusive in 4.17 (it reads ``first`` up to ``-le`` minus one), so ``last + 1`` is passed.
    The 4.17 shell sometimes fails on its way out (a read callback after its client closed: exit 255,
    ``RejectedExecutionException``); such a run is repeated, up to three times in all.
    """
    args = ("readledger", "-l", str(ledger_id), "-fe", str(first), "-le", str(last + 1), "-b", bookie_id)
    for _ in range(_SHELL_ATTEMPTS):
        done = bookkeeper_shell(metadata_service_uri, *args, timeout=120.0)
        if done.returncode == 0:
            return {int(entry) for ledger, entry in _ENTRY_READ.findall(done.stderr) if int(ledger) == ledger_id}
    raise LedgerToolError(f"bookkeeper shell {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    """``scripts/ledger-tool``: the ledger tool with its output passed through; its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--metadata-service-uri" not in args:
        zookeeper = os.environ.get("SCRUTINY_ZOOKEEPER", "")
        if not zookeeper:
            print("ledger-tool: give --metadata-service-uri URI or set SCRUTINY_ZOOKEEPER", file=sys.stderr)
            return 2
        args = ["--metadata-service-uri", metadata_service_uri(zookeeper), *args]
    try:
        return subprocess.run(_tool_command(str(LEDGER_TOOL_SOURCE), *args), check=False).returncode
    except ServicesError as error:
        print(f"ledger-tool: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
