"""Every command and subcommand meets bad input with exit code 2 and one line on standard error, never a traceback.

The table :data:`BAD` has rows for every command the parser knows (:func:`parser_commands` walks it, so a new
command without rows fails :func:`test_the_table_covers_every_command`): missing, unreadable, non-UTF-8, empty and
garbage files wherever a file is read (configuration, scenario, token, metadata and listing bytes, racks, the query
on standard input), numbers out of range (negative, zero, inf, nan, beyond 64 bits), unknown choices, bad ledger
ids, addresses and ports. Each row runs in this process through ``main``. Commands that talk to ZooKeeper, Kafka
or Spark, start servers or serve must refuse the input before they contact or start anything: while a row runs,
opening a connection, starting a process or serving fails the test (:func:`nothing_is_started`). The bad
configurations of test_bad_config.py, which drives six commands with them, are given to every other command that
reads a configuration too (:data:`CONFIG_COMMANDS`; the parser says which read one).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scrutiny.cli.main import build_parser, main
from scrutiny.core.ledger_metadata import Segment, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.listing_codec import encode_listing
from scrutiny.core.striping import expected_groups
from tests.cli import test_bad_config

TOO_BIG = str(2**63)  # one more than the largest ledger id, time in ms or count
HUGE = "9" * 30


@dataclass(frozen=True)
class Bad:
    """One bad command line: its arguments after the command (``{name}`` is a file of :func:`files`), what the
    error line must contain, environment variables to set, and standard input: bytes, or a file (``{name}``)."""

    what: str
    argv: tuple[str, ...]
    named: str
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes | str | None = None


def bad(
    what: str, named: str, *argv: str, env: Mapping[str, str] | None = None, stdin: bytes | str | None = None
) -> Bad:
    return Bad(what, argv, named, dict(env or {}), stdin)


#: Files of garbage bytes (made by :func:`files`), each used wherever bytes are decoded, and seeded random ones.
BLOBS = ("empty", "not_utf8", "garbage", "truncated_metadata", "metadata_bad_version", "listing_bad_version")
RANDOM_BLOBS = 6


def bad_bytes_rows(decoded: str, *argv: str) -> list[Bad]:
    """Garbage where bytes are read: ``{blob}`` in ``argv`` becomes each garbage file (the error names ``decoded``),
    a missing file and a directory."""

    def with_blob(name: str) -> tuple[str, ...]:
        return tuple(arg.replace("{blob}", "{" + name + "}") for arg in argv)

    names = [*BLOBS, *(f"random{seed}" for seed in range(RANDOM_BLOBS))]
    rows = [bad(f"bytes: {name}", decoded, *with_blob(name)) for name in names]
    rows.append(bad("bytes: a missing file", "No such file or directory", *with_blob("missing")))
    rows.append(bad("bytes: a directory", "Is a directory", *with_blob("directory")))
    rows.append(bad("bytes: endless", "holds more than 67,108,864 bytes", *with_blob("endless")))
    return rows


BAD: dict[str, list[Bad]] = {
    "inspect metadata": [
        bad("neither a file nor an id", "give a FILE"),
        bad("a file and an id", "give a FILE", "{md}", "--ledger-id", "1"),
        bad("negative ledger id", "argument --ledger-id: must not be negative", "--ledger-id", "-1"),
        bad("non-numeric ledger id", "argument --ledger-id: expected a whole number", "--ledger-id", "x1"),
        bad("ledger id of 2^63", "argument --ledger-id: must be at most", "--ledger-id", TOO_BIG),
        bad("text on standard input", "invalid ledger metadata", "-", stdin=b"not metadata at all\n"),
        bad("cannot save", "cannot write", "{md}", "--save", "{missing}/saved"),
        bad("bad configuration", "not valid TOML", "--ledger-id", "1", "--config", "{garbage}"),
        bad(
            "a misspelt ZooKeeper",
            "zookeeper.connect 'zk::1' is not host:port",
            "--ledger-id",
            "1",
            env={"SCRUTINY_ZOOKEEPER": "zk::1"},
        ),
        *bad_bytes_rows("invalid ledger metadata", "{blob}"),
    ],
    "inspect listing": [
        bad("neither a file nor an id", "give a FILE"),
        bad("an id without a bookie", "give a FILE", "--ledger-id", "1"),
        bad("a file and an id", "not both", "{listing}", "--ledger-id", "1", "--bookie", "b:1"),
        bad("negative ledger id", "argument --ledger-id: must not be negative", "--ledger-id", "-5", "--bookie", "b"),
        bad("ledger id of 2^63", "argument --ledger-id: must be at most", "--ledger-id", TOO_BIG, "--bookie", "b"),
        bad("negative --max-ranges", "argument --max-ranges: must not be negative", "{listing}", "--max-ranges", "-1"),
        bad("nan --max-ranges", "argument --max-ranges: expected a whole number", "{listing}", "--max-ranges", "nan"),
        bad("garbage on standard input", "invalid entry listing", "-", stdin=bytes(range(256))),
        bad("bad configuration", "is not UTF-8", "--ledger-id", "1", "--bookie", "b:1", "--config", "{not_utf8}"),
        bad(
            "a misspelt ZooKeeper port",
            "port '99999'",
            "--ledger-id",
            "1",
            "--bookie",
            "b:1",
            env={"SCRUTINY_ZOOKEEPER": "127.0.0.1:99999"},
        ),
        *bad_bytes_rows("invalid entry listing", "{blob}"),
    ],
    "inspect path": [
        bad("neither an id nor a path", "one of the arguments --ledger-id --path is required"),
        bad("negative ledger id", "argument --ledger-id: must not be negative", "--ledger-id", "-1"),
        bad("non-numeric ledger id", "argument --ledger-id: expected a whole number", "--ledger-id", "L7"),
        bad("ledger id of 2^63", "argument --ledger-id: must be at most", "--ledger-id", TOO_BIG),
        bad("huge ledger id", "argument --ledger-id: must be at most", "--ledger-id", HUGE),
        bad("a path outside the root", "is not under the ledgers root", "--path", "/elsewhere/L1"),
        bad("a garbled path", "is not 4 decimal digits", "--path", "/ledgers/00/0000/Lxyz"),
        bad("unknown manager", "argument --manager: invalid choice", "--ledger-id", "1", "--manager", "bogus"),
        bad("relative root", "is not an absolute path", "--ledger-id", "1", "--root", "ledgers"),
    ],
    "verdict": [
        bad("no metadata", "the following arguments are required: --metadata"),
        bad("listing without a file", "--listing expects BOOKIE=FILE", "--metadata", "{md}", "--listing", "b0:1"),
        bad("listing of a missing file", "cannot read", "--metadata", "{md}", "--listing", "b0:1={missing}"),
        bad("garbage listing", "listing of b0:1", "--metadata", "{md}", "--listing", "b0:1={garbage}"),
        bad("listing not UTF-8", "listing of b0:1", "--metadata", "{md}", "--listing", "b0:1={not_utf8}"),
        bad("two answers", "more than one answer", "--metadata", "{md}", "--no-ledger", "b0:1", "--unknown", "b0:1"),
        bad("racks not JSON", "invalid Pulsar rack map", "--metadata", "{md}", "--racks", "{garbage}"),
        bad("racks not UTF-8", "invalid Pulsar rack map", "--metadata", "{md}", "--racks", "{not_utf8}"),
        bad("racks missing", "cannot read", "--metadata", "{md}", "--racks", "{missing}"),
        bad("racks a list", "not a JSON object", "--metadata", "{md}", "--racks", "{json_list}"),
        bad("negative --now", "argument --now: must not be negative", "--metadata", "{md}", "--now", "-1"),
        bad("--now beyond 64 bits", "argument --now: must be at most", "--metadata", "{md}", "--now", HUGE),
        bad("--now inf", "argument --now: expected a whole number", "--metadata", "{md}", "--now", "inf"),
        bad(
            "mark time beyond 64 bits",
            "argument --under-replicated-since: must be at most",
            "--metadata",
            "{md}",
            "--under-replicated-since",
            TOO_BIG,
        ),
        bad("unknown placement", "argument --placement: invalid choice", "--metadata", "{md}", "--placement", "x"),
        bad("garbage on standard input", "invalid ledger metadata", "--metadata", "-", stdin=b"\x00\x01garbage"),
        bad("bad configuration", "not valid TOML", "--metadata", "{md}", "--config", "{garbage}"),
        *bad_bytes_rows("invalid ledger metadata", "--metadata", "{blob}"),
        *bad_bytes_rows("listing of b1:1", "--metadata", "{md}", "--listing", "b1:1={blob}"),
    ],
    "services up": [
        bad("negative --bookies", "argument --bookies: must not be negative", "--bookies", "-1"),
        bad("too many bookies", "argument --bookies: must be from 0 to 32", "--bookies", "1000"),
        bad("--timeout 0", "argument --timeout: must be positive", "--timeout", "0"),
        bad("--timeout nan", "argument --timeout: must be a finite number", "--timeout", "nan"),
        bad("--timeout huge", "argument --timeout: must be at most", "--timeout", "1e300"),
        bad("write cache 0", "argument --write-cache-mb: must be from 1 to 65536", "--write-cache-mb", "0"),
        bad("write cache huge", "argument --write-cache-mb: must be from 1 to", "--write-cache-mb", "99999999"),
        bad("flush interval inf", "argument --flush-interval: must be a finite", "--flush-interval", "inf"),
        bad("flush interval huge", "argument --flush-interval: must be from", "--flush-interval", "9999999"),
        bad("unknown storage", "argument --storage: invalid choice", "--storage", "rocks"),
        bad("unknown format", "argument --format: invalid choice", "--format", "json"),
        bad("state directory a file", "is not a directory", "--state-dir", "{garbage}"),
        bad("bad configuration", "not UTF-8", "--state-dir", "{fresh}", "--config", "{not_utf8}"),
    ],
    "services status": [
        bad("unknown format", "argument --format: invalid choice", "--format", "xml"),
        bad("state directory a file", "is not a directory", "--state-dir", "{garbage}"),
        bad("missing configuration", "cannot read configuration file", "--config", "{missing}"),
    ],
    "services down": [
        bad("state directory a file", "is not a directory", "--state-dir", "{garbage}"),
        bad("garbage configuration", "not valid TOML", "--config", "{garbage}"),
    ],
    "services bookie": [
        bad("no bookie", "the following arguments are required"),
        bad("unknown action", "invalid choice: 'kill'", "kill", "bookie-1"),
        bad("unknown bookie", "no local bookie 'bookie-9'", "stop", "bookie-9", "--state-dir", "{fresh}"),
        bad("state directory a file", "is not a directory", "wipe", "bookie-1", "--state-dir", "{garbage}"),
        bad("bad configuration", "not valid TOML", "start", "bookie-1", "--config", "{garbage}"),
    ],
    "services autorecovery": [
        bad("unknown action", "invalid choice: 'restart'", "restart"),
        bad("negative interval", "argument --check-interval: must not be negative", "start", "--check-interval", "-1"),
        bad(
            "nan interval",
            "argument --bookie-check-interval: expected a whole number",
            "start",
            "--bookie-check-interval",
            "nan",
        ),
        bad(
            "interval beyond 32 bits",
            "argument --lost-bookie-recovery-delay: must be from 0 to 2147483647",
            "start",
            "--lost-bookie-recovery-delay",
            "99999999999",
        ),
        bad("no ZooKeeper to run on", "no ZooKeeper is recorded", "start", "--state-dir", "{fresh}"),
        bad("state directory a file", "is not a directory", "stop", "--state-dir", "{garbage}"),
        bad("bad configuration", "not UTF-8", "stop", "--config", "{not_utf8}"),
    ],
    "agent": [
        bad("no source", "one of the arguments --ledger-dirs --forward-v3 is required", "--bookie-id", "b:1"),
        bad("no bookie id", "the following arguments are required: --bookie-id", "--ledger-dirs", "{empty_dir}"),
        bad(
            "empty bookie id",
            "argument --bookie-id: a bookie id is not empty",
            "--ledger-dirs",
            "{empty_dir}",
            "--bookie-id",
            "",
        ),
        bad("no ledger directory", "at least one ledger directory", "--ledger-dirs", ",", "--bookie-id", "b:1"),
        *[
            bad(f"{option} {value}", named, "--ledger-dirs", "{empty_dir}", "--bookie-id", "b:1", option, value)
            for option, value, named in [
                ("--listen", "nowhere", "--listen expects HOST:PORT"),
                ("--listen", "127.0.0.1:99999", "--listen expects HOST:PORT"),
                ("--listen", "bad host:3185", "the host 'bad host' is not an IP address or a host name"),
                ("--listen", "10.1.2.3:3185", "refusing to listen on non-loopback"),
                ("--token-file", "{missing}", "cannot read"),
                ("--token-file", "{empty}", "the token file"),
                ("--token-file", "{not_utf8}", "is not UTF-8 text"),
                ("--token-file", "{directory}", "cannot read"),
                ("--token-file", "{endless}", "holds more than"),
                ("--tls-cert", "{garbage}", "--tls-cert and --tls-key go together"),
                ("--metrics-port", "99999", "argument --metrics-port: a port is 0..65535"),
                ("--metrics-port", "-1", "argument --metrics-port: must not be negative"),
                ("--metrics-host", "no such host!", "argument --metrics-host: 'no such host!' is not an IP address"),
                ("--max-ledgers-per-call", "0", "argument --max-ledgers-per-call: must be from 1"),
                ("--max-concurrent-calls", "0", "argument --max-concurrent-calls: must be from 1"),
                ("--max-concurrent-calls", "100000", "argument --max-concurrent-calls: must be from 1 to 1024"),
                ("--max-concurrent-calls", HUGE, "argument --max-concurrent-calls: must be at most"),
                ("--grace", "nan", "argument --grace: must be a finite number"),
                ("--grace", "-1", "argument --grace: must be a finite number"),
                ("--state-dir", "{garbage}", "the state directory"),
            ]
        ],
        bad(
            "TLS files of garbage",
            "are not a PEM certificate chain and its private key",
            "--ledger-dirs",
            "{empty_dir}",
            "--bookie-id",
            "b:1",
            "--tls-cert",
            "{garbage}",
            "--tls-key",
            "{not_utf8}",
        ),
        bad(
            "TLS files missing",
            "cannot read",
            "--ledger-dirs",
            "{empty_dir}",
            "--bookie-id",
            "b:1",
            "--tls-cert",
            "{missing}",
            "--tls-key",
            "{missing}",
        ),
        bad("forward to nowhere", "--forward-v3 expects HOST:PORT", "--forward-v3", "bookie", "--bookie-id", "b:1"),
        bad("forward port", "--forward-v3 expects HOST:PORT", "--forward-v3", "b:70000", "--bookie-id", "b:1"),
    ],
    "watch": [
        bad("--duration nan", "argument --duration: must be a finite number", "--duration", "nan"),
        bad("--duration negative", "argument --duration: must be a finite number", "--duration", "-1"),
        bad("--duration huge", "argument --duration: must be at most", "--duration", "1e300"),
        bad("--metrics-port 99999", "argument --metrics-port: a port is 0..65535", "--metrics-port", "99999"),
        bad("--metrics-port abc", "argument --metrics-port: expected a whole number", "--metrics-port", "abc"),
        bad("--metrics-host bad", "argument --metrics-host", "--metrics-host", "300.1.1.1"),
        bad("ZooKeeper misspelt", "zookeeper.connect", env={"SCRUTINY_ZOOKEEPER": "zk1:2181,,zk2:2181"}),
        bad("Kafka misspelt", "kafka.bootstrap_servers", env={"SCRUTINY_KAFKA": "kafka::9092"}),
        bad("metrics host misspelt", "watcher.metrics_host", env={"SCRUTINY_WATCHER_METRICS_HOST": "a b"}),
        bad(
            "session timeout beyond 64 bits",
            "must fit in 64 bits",
            env={"SCRUTINY_ZOOKEEPER_SESSION_TIMEOUT_SECONDS": HUGE},
        ),
        bad(
            "ten years and more",
            "at most 315360000 seconds",
            env={"SCRUTINY_WATCHER_TICK_INTERVAL_SECONDS": "999999999"},
        ),
    ],
    "simulate": [
        bad("nothing to do", "give a scenario file"),
        bad("missing scenario", "cannot read scenario", "{missing}", "--dry-run"),
        bad("scenario a directory", "cannot read scenario", "{directory}", "--dry-run"),
        bad("scenario not UTF-8", "is not UTF-8 text", "{not_utf8}", "--dry-run"),
        bad("scenario not TOML", "not valid TOML", "{garbage}", "--dry-run"),
        bad("empty scenario", "cluster.bookies: required", "{empty}", "--dry-run"),
        bad("endless scenario", "is larger than 67,108,864 bytes", "{endless}", "--dry-run"),
        bad("a huge id range", "a scenario defines at most 1,000,000 ledgers", "{huge_ids}", "--dry-run"),
        bad("a negative ledger id", "ledgers[0].id: -1 is out of range", "{negative_id}", "--dry-run"),
        bad("a ledger id of 2^63", "is out of range [0, 9223372036854775807]", "{too_big_id}", "--dry-run"),
        bad("a ledger id that is text", "ledgers[0].id: expected a ledger id", "{text_id}", "--dry-run"),
        bad("a huge limbo list", "name at most 1,000,000 ledger ids", "{huge_limbo}", "--dry-run"),
        bad("huge ensembles of many ledgers", "hold at most 20,000,000 ensemble members", "{huge_parts}", "--dry-run"),
        bad("huge custom metadata", "bytes of custom metadata", "{huge_custom}", "--dry-run"),
        bad("too many bookies", "cluster.bookies: 100000 is out of range", "{huge_bookies}", "--dry-run"),
        bad("a nan time", "schedule[0].at: nan is not a finite number", "{nan_time}", "--dry-run"),
        bad("an age of centuries", "is more than 315,360,000 seconds", "{huge_age}", "--dry-run"),
        bad("an infinite delay", "fault.delay_s: inf is not a finite number", "{inf_delay}", "--dry-run"),
        bad("a length beyond 64 bits", "does not fit in the metadata's 64 bits", "{huge_length}", "--dry-run"),
        bad("a nan flush interval", "write_cache_flush_seconds", "{nan_flush}", "--dry-run"),
        bad("negative --duration", "argument --duration: must be a finite", "{scenario}", "--duration", "-1"),
        bad("huge --duration", "argument --duration: must be at most", "{scenario}", "--duration", "1e12"),
        bad(
            "truth into a missing directory",
            "cannot write",
            "{scenario}",
            "--dry-run",
            "--truth-out",
            "{missing}/t.json",
        ),
        bad("truth onto a directory", "it is a directory", "{scenario}", "--dry-run", "--truth-out", "{directory}"),
        bad("ZooKeeper misspelt", "--zookeeper 'zk:1:2'", "{scenario}", "--zookeeper", "zk:1:2"),
        bad("ZooKeeper port", "port '0'", "{scenario}", "--zookeeper", "127.0.0.1:0/chroot"),
        bad("ZooKeeper empty", "--zookeeper '' is empty", "{scenario}", "--zookeeper", ""),
        bad("settings' ZooKeeper misspelt", "zookeeper.connect", "{scenario}", env={"SCRUTINY_ZOOKEEPER": "[::1"}),
        bad("bad configuration", "not valid TOML", "{scenario}", "--dry-run", "--config", "{garbage}"),
        bad("generate and a scenario", "give no scenario file", "{scenario}", "--generate", "5", "--out", "-"),
        bad("generate without --out", "--generate needs --out", "--generate", "5"),
        bad("generate 0", "need at least 1 ledger", "--generate", "0", "--out", "-"),
        bad("generate a negative number", "need at least 1 ledger", "--generate", "-5", "--out", "-"),
        bad("generate a huge number", "at most 1,000,000 ledgers", "--generate", "100000000000", "--out", "-"),
        bad("generate nan", "argument --generate: invalid int value", "--generate", "nan", "--out", "-"),
        bad("generate many bookies", "10,000 bookies", "--generate", "5", "--bookies", HUGE, "--out", "-"),
        bad("generate one rack", "2..bookies racks", "--generate", "5", "--racks", "1", "--out", "-"),
        bad("generate a negative seed", "the seed must be from 0", "--generate", "5", "--seed", "-1", "--out", "-"),
        bad(
            "generate a nan fault",
            "fault missing: nan is out of range",
            "--generate",
            "5",
            "--faults",
            "missing=nan",
            "--out",
            "-",
        ),
        bad("generate an unknown fault", "unknown fault 'lost'", "--generate", "5", "--faults", "lost=1", "--out", "-"),
        bad(
            "generate an unknown mix", "unknown fault mix preset", "--generate", "5", "--faults", "chaos", "--out", "-"
        ),
        bad(
            "generate too many bookie faults",
            "bookie faults for 9 bookies",
            "--generate",
            "5",
            "--faults",
            "eio=10",
            "--out",
            "-",
        ),
        bad("generate into a missing directory", "cannot write", "--generate", "5", "--out", "{missing}/s.toml"),
    ],
    "run": [
        bad("missing scenario", "cannot read scenario", "--scenario", "{missing}"),
        bad("scenario not UTF-8", "is not UTF-8 text", "--scenario", "{not_utf8}"),
        bad("scenario garbage", "not valid TOML", "--scenario", "{garbage}"),
        bad("scenario endless", "is larger than 67,108,864 bytes", "--scenario", "{endless}"),
        bad(
            "scenario with a huge id range", "a scenario defines at most 1,000,000 ledgers", "--scenario", "{huge_ids}"
        ),
        bad("--duration nan", "argument --duration: must be a finite number", "--duration", "nan"),
        bad("--until-idle negative", "argument --until-idle: must be a finite number", "--until-idle", "-3"),
        bad("--summary-every 0", "argument --summary-every: must be positive", "--summary-every", "0"),
        bad("--metrics-port 65536", "argument --metrics-port: a port is 0..65535", "--metrics-port", "65536"),
        bad("--metrics-host empty", "argument --metrics-host: '' is empty", "--metrics-host", ""),
        bad(
            "a port in the environment",
            "checker.metrics_port must be a port",
            env={"SCRUTINY_CHECKER_METRICS_PORT": "70000"},
        ),
        bad(
            "a re-verification interval of ages",
            "at most 315360000 seconds",
            env={"SCRUTINY_CHECKER_REVERIFY_INTERVAL": "1e300"},
        ),
        bad("missing configuration", "cannot read configuration file", "--config", "{missing}"),
        bad("endless configuration", "is larger than 1,048,576 bytes", "--config", "{endless}"),
    ],
    "report": [
        bad("missing data directory", "does not exist", "--data-dir", "{missing}"),
        bad("negative --worst", "argument --worst: must not be negative", "--worst", "-1"),
        bad("huge --worst", "argument --worst: must be at most", "--worst", HUGE),
        bad("unknown --fail-on", "argument --fail-on: invalid choice", "--fail-on", "fatal"),
        bad("unknown --format", "argument --format: invalid choice", "--format", "yaml"),
        bad("garbage configuration", "not valid TOML", "--config", "{garbage}"),
    ],
    "sql": [
        bad("no query", "give a query"),
        bad("an empty query", "the query is empty", "   "),
        bad("an empty query on standard input", "the query is empty", "-", stdin=b""),
        bad("an endless query", "standard input holds more than", "-", stdin="{endless}"),
        bad("a query not UTF-8", "the query on standard input is not UTF-8 text", "-", stdin=b"SELECT '\xff\xfe'"),
        bad("a query of undecodable bytes", "the query given is not UTF-8 text", "SELECT '\udcff'"),
        bad("a parameter without a value", "--param expects NAME=VALUE", "SELECT 1", "--param", "hours"),
        bad("a parameter without a name", "--param expects NAME=VALUE", "SELECT 1", "--param", "=6"),
        bad("unknown --format", "argument --format: invalid choice", "SELECT 1", "--format", "xml"),
        bad("missing data directory", "does not exist", "SELECT 1", "--data-dir", "{missing}"),
        bad("a data directory without tables", "holds none of the tables", "SELECT 1", "--data-dir", "{empty_dir}"),
        bad("garbage configuration", "not valid TOML", "SELECT 1", "--config", "{garbage}"),
    ],
    "scan": [
        bad("ledgers not a range", "is not a ledger id", "--ledgers", "abc"),
        bad("ledgers backwards", "start 5 is after end 1", "--ledgers", "5-1"),
        bad("ledger of 2^63", "is larger than the largest ledger id", "--ledgers", TOO_BIG),
        bad("ledgers an empty part", "empty part", "--ledgers", "1,,2"),
        bad("ledgers a lone dash", "give a start, an end or both", "--ledgers", "-"),
        bad("chunk size 0", "argument --chunk-size: must be at least 1", "--chunk-size", "0"),
        bad("chunk size huge", "argument --chunk-size: must be at most", "--chunk-size", HUGE),
        bad("fast and deep", "not allowed with argument", "--fast", "--deep"),
        bad("fix of a fast scan", "--fix needs a deep scan", "--fix", "--fast"),
        bad("dry run alone", "only go with --fix", "--dry-run"),
        bad("an empty bookie", "--bookie is empty", "--bookie", ""),
        bad("data directory a file", "the data directory", "--data-dir", "{garbage}"),
        bad("unknown --fail-on", "argument --fail-on: invalid choice", "--fail-on", "never"),
        bad("ZooKeeper misspelt", "zookeeper.connect", env={"SCRUTINY_ZOOKEEPER": "zk:port"}),
        bad("metadata URI misspelt", "zookeeper.metadata_uri", env={"SCRUTINY_ZOOKEEPER_METADATA_URI": "zk+flat:/x"}),
        bad("garbage configuration", "not valid TOML", "--config", "{garbage}"),
    ],
    "dashboard": [
        bad("port 99999", "argument --port: a port is 0..65535", "--port", "99999"),
        bad("port -1", "argument --port: must not be negative", "--port", "-1"),
        bad("host misspelt", "argument --host: 'local host' is not an IP address", "--host", "local host"),
        bad("host out of range", "argument --host", "--host", "256.0.0.1"),
        bad("refresh 0", "argument --refresh-seconds: must be positive", "--refresh-seconds", "0"),
        bad("refresh nan", "argument --refresh-seconds: must be a finite", "--refresh-seconds", "nan"),
        bad(
            "refresh longer than a day", "argument --refresh-seconds: must be at most 86400", "--refresh-seconds", "1e6"
        ),
        bad("empty token", "--token must not be empty", "--data-dir", "{empty_dir}", "--token", ""),
        bad("token and token file", "not allowed with argument", "--token", "t", "--token-file", "{token}"),
        bad("missing token file", "cannot read", "--data-dir", "{empty_dir}", "--token-file", "{missing}"),
        bad("empty token file", "the token file", "--data-dir", "{empty_dir}", "--token-file", "{empty}"),
        bad("token file not UTF-8", "is not UTF-8 text", "--data-dir", "{empty_dir}", "--token-file", "{not_utf8}"),
        bad("token file endless", "holds more than", "--data-dir", "{empty_dir}", "--token-file", "{endless}"),
        bad("missing data directory", "does not exist", "--data-dir", "{missing}"),
        bad("a data directory without tables", "holds none of the tables", "--data-dir", "{empty_dir}"),
        bad("garbage configuration", "not valid TOML", "--config", "{garbage}"),
    ],
}


def parser_commands() -> dict[str, argparse.ArgumentParser]:
    """Every runnable command the parser defines (``verdict``, ``inspect metadata``, ...) and its parser."""

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subcommands:
            yield " ".join(path), parser
        for action in subcommands:
            for name, child in action.choices.items():
                yield from walk(child, (*path, name))

    return dict(walk(build_parser(), ()))


def test_the_table_covers_every_command() -> None:
    assert set(BAD) == set(parser_commands())


#: The command lines of the commands that read the configuration and that test_bad_config.py does not drive.
CONFIG_COMMANDS = {
    "inspect metadata": ("--ledger-id", "1"),
    "inspect listing": ("--ledger-id", "1", "--bookie", "b:1"),
    "verdict": ("--metadata", "{md}"),
    "services up": ("--state-dir", "{fresh}", "--bookies", "1"),
    "services status": ("--state-dir", "{fresh}"),
    "services down": ("--state-dir", "{fresh}"),
    "services bookie": ("start", "bookie-1", "--state-dir", "{fresh}"),
    "services autorecovery": ("start", "--state-dir", "{fresh}"),
    "simulate": ("{scenario}",),
}


def test_every_command_that_reads_the_configuration_meets_a_bad_one() -> None:
    driven = {command[0] for command in test_bad_config.COMMANDS} | set(CONFIG_COMMANDS)
    reading = {name for name, parser in parser_commands().items() if "--config" in parser._option_string_actions}
    assert driven == reading


SCENARIO = """
[cluster]
bookies = 3

[defaults]
ensemble_size = 3
write_quorum = 2
last_entry = 9
ensemble = "auto"
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Files the rows name: good ones (``md``, ``listing``, ``scenario``) and every kind of bad one."""
    base = tmp_path_factory.mktemp("bad-input")
    metadata = encode_ledger_metadata_v3(
        build_ledger_metadata(
            ensemble_size=3,
            write_quorum=2,
            ack_quorum=2,
            segments=[Segment(0, ("b0:1", "b1:1", "b2:1"))],
            last_entry_id=99,
            length=4_000,
        )
    )
    rng = random.Random(20)
    contents: dict[str, bytes | str] = {
        "md": metadata,
        "listing": encode_listing(expected_groups(0, 3, 2, 0, 99)),
        "empty": b"",
        "not_utf8": b"\xff\xfe[checker]\n\x80",
        "garbage": "hello { garbage = = ] \n",
        "token": "s3cret\n",
        "json_list": "[1, 2, 3]",
        "truncated_metadata": metadata[: len(metadata) // 2],
        "metadata_bad_version": b"BookieMetadataFormatVersion\t9\n" + metadata[30:],
        "listing_bad_version": b"\x00\x00\x00\x07" + bytes(60),
        **{f"random{seed}": rng.randbytes(rng.randrange(1, 400)) for seed in range(RANDOM_BLOBS)},
        "scenario": SCENARIO + "[[ledgers]]\nid = 1\n",
        "huge_ids": SCENARIO + "[[ledgers]]\nids = [[1, 100000000000]]\n",
        "negative_id": SCENARIO + "[[ledgers]]\nid = -1\n",
        "too_big_id": SCENARIO + f"[[ledgers]]\nids = [[1, {2**63}]]\n",
        "text_id": SCENARIO + "[[ledgers]]\nid = '7'\n",
        "huge_limbo": SCENARIO + "[bookies.bookie-1]\nlimbo = [[0, 9223372036854775806]]\n",
        "huge_parts": SCENARIO.replace("bookies = 3", "bookies = 1000")
        + "[[ledgers]]\nids = [[1, 100000]]\nensemble_size = 1000\n",
        "huge_custom": SCENARIO + f"[[ledgers]]\nids = [[1, 5000]]\ncustom = {{ k = '{'x' * 100_000}' }}\n",
        "huge_bookies": SCENARIO.replace("bookies = 3", "bookies = 100000"),
        "nan_time": SCENARIO + "[[ledgers]]\nid = 1\n[[schedule]]\nat = nan\naction = 'delete'\nledger = 1\n",
        "huge_age": SCENARIO + "[[ledgers]]\nid = 1\nunder_replicated = { age_s = 1e12 }\n",
        "inf_delay": SCENARIO + "[bookies.bookie-2]\nfault = { kind = 'slow', delay_s = inf }\n",
        "huge_length": SCENARIO + "[[ledgers]]\nid = 1\nlast_entry = 4611686018427387903\n",
        "nan_flush": SCENARIO.replace("bookies = 3", "bookies = 3\nwrite_cache_flush_seconds = nan"),
    }
    for index, config in enumerate(test_bad_config.BAD):
        if config.content is not None:
            contents[f"config{index}"] = config.content
    paths = {
        "endless": "/dev/zero",
        "missing": str(base / "missing"),
        "directory": str(base),
        "empty_dir": str(base / "empty_dir"),
    }
    (base / "empty_dir").mkdir()
    for name, content in contents.items():
        path = base / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        paths[name] = str(path)
    return paths


class Started(BaseException):
    """A row contacted or started something (a BaseException: no handler of the command's catches it)."""


@pytest.fixture
def nothing_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a row runs, connecting anywhere, starting a process or serving raises :class:`Started`.

    The clients of ZooKeeper and Kafka are stopped where they are made or started: they connect from threads of
    their own, where a refused connection would leave the command waiting rather than failing.
    """

    def refuse(what: str) -> object:
        def refused(*_args: object, **_kwargs: object) -> None:
            raise Started(f"the command went on to {what} instead of refusing the input")

        return refused

    monkeypatch.setattr("kazoo.client.KazooClient.start", refuse("connect to ZooKeeper"))
    monkeypatch.setattr("kafka.KafkaProducer.__init__", refuse("connect to Kafka"))
    monkeypatch.setattr("kafka.KafkaAdminClient.__init__", refuse("connect to Kafka"))
    monkeypatch.setattr("scrutiny.agent.server.AgentServer.start", refuse("serve"))
    monkeypatch.setattr(socket.socket, "connect", refuse("connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connect"))
    monkeypatch.setattr(socket.socket, "listen", refuse("listen"))
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("start a process"))
    monkeypatch.setattr(os, "fork", refuse("fork"))


@pytest.fixture
def paths(files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """:func:`files` and ``fresh``, an empty directory of this test's own; no ``SCRUTINY_*`` variable, and the
    working and services' directories in ``tmp_path`` (nothing a command might write lands in the checkout)."""
    for name in [n for n in os.environ if n.startswith("SCRUTINY_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SCRUTINY_SERVICES_STATE_DIR", str(tmp_path / "services"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fresh").mkdir()
    return {**files, "fresh": str(tmp_path / "fresh")}


def run(argv: list[str]) -> int:
    """``main(argv)``'s exit code, whether it returns it or the parser exits."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1


#: :data:`BAD`, and test_bad_config.py's bad configurations given to :data:`CONFIG_COMMANDS`.
ROWS = [(command, row) for command, rows in BAD.items() for row in rows] + [
    (command, Bad(f"configuration: {config.what}", (*argv, *config_argv), config.named, config.env))
    for command, argv in CONFIG_COMMANDS.items()
    for index, config in enumerate(test_bad_config.BAD)
    for config_argv in [("--config", f"{{config{index}}}") if config.content is not None else ()]
]


@pytest.mark.usefixtures("nothing_is_started")
@pytest.mark.parametrize("case", ROWS, ids=[f"{c}: {r.what}" for c, r in ROWS])
def test_bad_input_is_one_line_and_exit_code_2(
    case: tuple[str, Bad],
    paths: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    command, row = case
    for name, value in row.env.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.INFO)
    argv = [*command.split(), *(arg.format(**paths) for arg in row.argv)]
    with contextlib.ExitStack() as stack:
        if isinstance(row.stdin, bytes):
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(row.stdin), encoding="utf-8"))
        elif row.stdin is not None:
            stdin = stack.enter_context(Path(row.stdin.format(**paths)).open(encoding="utf-8"))
            monkeypatch.setattr(sys, "stdin", stdin)
        code = run(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, (argv, captured.err[-2000:])
    assert "Traceback" not in captured.err
    assert len(lines) == 1, lines
    assert lines[0].startswith("scrutiny") and ": error: " in lines[0], lines
    assert row.named in lines[0], (row.named, lines[0])
    logged = [r for r in caplog.records if r.levelno >= logging.WARNING or r.name.startswith("scrutiny")]
    assert logged == [], [r.getMessage() for r in logged]  # the command would print them on standard error
