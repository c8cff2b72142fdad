"""The installed ``scrutiny`` console script, run as a separate process (stdin, stdout, exit codes)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from scrutiny.core.ledger_metadata import Segment, build_ledger_metadata, encode_ledger_metadata_v3
from scrutiny.core.listing_codec import encode_listing_per_run
from scrutiny.core.striping import expected_groups
from scrutiny.core.zk_paths import ledger_path
from scrutiny.paths import PROJECT_ROOT
from scrutiny.settings.loader import Settings
from tests.support.checker_process import child_env, write_config

pytestmark = pytest.mark.integration

SCRUTINY = Path(sys.executable).parent / "scrutiny"
#: The README's way to run a command (sets up the checkout first).
SCRIPT = PROJECT_ROOT / "scripts" / "scrutiny"


def scrutiny(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(SCRUTINY), *args], input=stdin, capture_output=True, timeout=60, check=False)


def test_console_script_reads_metadata_from_stdin() -> None:
    metadata = build_ledger_metadata(
        ensemble_size=2, write_quorum=2, ack_quorum=1, segments=[Segment(0, ("a:1", "b:2"))], last_entry_id=4
    )
    done = scrutiny("inspect", "metadata", "-", stdin=encode_ledger_metadata_v3(metadata))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ack_quorum"] == 1


def test_console_script_verdict_and_errors(tmp_path: Path) -> None:
    metadata = build_ledger_metadata(
        ensemble_size=3, write_quorum=2, ack_quorum=2, segments=[Segment(0, ("a:1", "b:2", "c:3"))], last_entry_id=9
    )
    (tmp_path / "md").write_bytes(encode_ledger_metadata_v3(metadata))
    (tmp_path / "a").write_bytes(encode_listing_per_run(expected_groups(0, 3, 2, 0, 9)))
    done = scrutiny(
        "verdict", "--metadata", str(tmp_path / "md"), "--listing", f"a:1={tmp_path / 'a'}", "--no-ledger", "b:2"
    )
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["verdict"] == "VIOLATED" and verdict["retry_bookies"] == ["c:3"]
    bad = scrutiny("inspect", "listing", "-", stdin=b"short")
    assert bad.returncode == 2
    assert bad.stderr.decode().startswith("scrutiny: error: invalid entry listing") and bad.stdout == b""
    usage = scrutiny("verdict")
    assert usage.returncode == 2 and b"--metadata" in usage.stderr


def test_the_script_reads_relative_paths_from_the_callers_directory(tmp_path: Path) -> None:
    """``scripts/scrutiny`` runs where it is called from: a relative file argument is the caller's file."""
    metadata = build_ledger_metadata(
        ensemble_size=2, write_quorum=2, ack_quorum=2, segments=[Segment(0, ("a:1", "b:2"))], last_entry_id=7
    )
    (tmp_path / "L0042").write_bytes(encode_ledger_metadata_v3(metadata))
    done = subprocess.run(
        [str(SCRIPT), "inspect", "metadata", "L0042"], cwd=tmp_path, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["last_entry_id"] == 7
    generated = subprocess.run(
        [str(SCRIPT), "simulate", "--generate", "3", "--out", "scenario.toml"],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert generated.returncode == 0, generated.stderr
    assert (tmp_path / "scenario.toml").is_file() and not (PROJECT_ROOT / "scenario.toml").exists()


def test_watch_shows_its_own_lines_not_the_kafka_clients_and_no_chroot_warning(
    service_settings: Settings, zk_root_client: KazooClient, kafka_topic: str, tmp_path: Path
) -> None:
    chroot = f"/scrutiny-test/watch-cli-{uuid.uuid4().hex[:8]}"
    zk_root_client.ensure_path(f"{chroot}/ledgers/available")
    zookeeper = replace(service_settings.zookeeper, connect=f"{service_settings.zookeeper.connect}{chroot}")
    settings = replace(service_settings, zookeeper=zookeeper, kafka=replace(service_settings.kafka, topic=kafka_topic))
    config = write_config(settings, tmp_path / "scrutiny.toml")
    env = child_env(settings, tmp_path / "spark-local")
    try:
        done = subprocess.run(
            [str(SCRUTINY), "watch", "--config", str(config), "--duration", "4"],
            env=env, capture_output=True, timeout=90, check=False,
        )  # fmt: skip
        err = done.stderr.decode()
        assert done.returncode == 0, err[-2000:]
        assert "scrutiny.watcher" in err and "stopped" in err
        assert not [line for line in err.splitlines() if " INFO kafka" in line]
        missing = replace(settings, zookeeper=replace(zookeeper, connect=f"{zookeeper.connect}-absent"))
        missing_config = str(write_config(missing, tmp_path / "missing.toml"))
        gone = subprocess.run(
            [str(SCRUTINY), "watch", "--config", missing_config, "--duration", "2"],
            env=env, capture_output=True, timeout=90, check=False,
        )  # fmt: skip
        said = gone.stderr.decode()
        assert gone.returncode == 0, said[-2000:]
        assert "UserWarning" not in said and "No chroot path exists" not in said
        assert f"the chroot {chroot}-absent of the ZooKeeper connect string does not exist" in said
    finally:
        zk_root_client.delete(chroot, recursive=True)


def test_inspect_reads_a_live_znode_and_listing_that_verdict_then_judges(
    service_settings: Settings, zk_root_client: KazooClient, tmp_path: Path
) -> None:
    """The README's offline verdict, with the bytes taken from a running cluster: ledger 4 of the example scenario
    (bookie-2 lost entries 10-19 of its stripe, AQ = WQ) is BELOW_ACK_QUORUM on the saved files."""
    chroot = f"/scrutiny-test/inspect-cli-{uuid.uuid4().hex[:8]}"
    zk_root_client.ensure_path(chroot)
    zookeeper = replace(service_settings.zookeeper, connect=f"{service_settings.zookeeper.connect}{chroot}")
    settings = replace(service_settings, zookeeper=zookeeper)
    config = str(write_config(settings, tmp_path / "scrutiny.toml"))
    env = child_env(settings, tmp_path / "spark-local")
    example = PROJECT_ROOT / "conf" / "scenarios" / "example.toml"
    simulator = subprocess.Popen(
        [str(SCRUTINY), "simulate", str(example), "--zookeeper", zookeeper.connect],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        assert simulator.stdout is not None and json.loads(simulator.stdout.readline())["scenario"] == "example"

        def run(*args: str) -> subprocess.CompletedProcess[bytes]:
            command = [str(SCRUTINY), *args]
            return subprocess.run(command, capture_output=True, timeout=60, check=False, env=env, cwd=tmp_path)

        shown = run("inspect", "metadata", "--ledger-id", "4", "--save", "L4", "--config", config)
        assert shown.returncode == 0, shown.stderr
        ensemble = json.loads(shown.stdout)["segments"][0]["ensemble"]
        assert (tmp_path / "L4").read_bytes() == zk_root_client.get(ledger_path(4, root=f"{chroot}/ledgers"))[0]
        listings = []
        for bookie in ensemble:  # saved in a file named after the bookie
            asked = run(
                "inspect", "listing", "--ledger-id", "4", "--bookie", bookie, "--save", bookie, "--config", config
            )
            assert asked.returncode == 0, asked.stderr
            document = json.loads(asked.stdout)
            assert document["answer"] == "listing" and document["protocol"] in {"v3", "agent"} and document["address"]
            listings += ["--listing", f"{bookie}={bookie}"]
        judged = run("verdict", "--metadata", "L4", *listings)
        categories = {v["category"] for v in json.loads(judged.stdout)["violations"]}
        assert judged.returncode == 0 and "BELOW_ACK_QUORUM" in categories
        absent = run("inspect", "metadata", "--ledger-id", "999", "--config", config)
        assert absent.returncode == 2 and b"no ledger 999" in absent.stderr
    finally:
        simulator.terminate()
        simulator.wait(timeout=30)
        zk_root_client.delete(chroot, recursive=True)
