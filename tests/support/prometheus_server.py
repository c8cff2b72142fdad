"""A real Prometheus server (Debian's, extracted by scripts/setup) on loopback, for the tests of the shipped rules."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from scrutiny.services.servers import free_port
from tests.support.promql import PROMETHEUS_BIN

PROMETHEUS = PROMETHEUS_BIN / "prometheus"


class PrometheusServer:
    """A running server's HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as response:
            return json.loads(response.read())

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts pending or firing now."""
        alerts: list[dict[str, Any]] = self.get("/api/v1/alerts")["data"]["alerts"]
        return alerts


@contextmanager
def running_prometheus(
    directory: Path, *, jobs: dict[str, Sequence[str]], rule_files: Sequence[Path], every_s: int = 1
) -> Iterator[PrometheusServer]:
    """Prometheus scraping ``jobs`` (job name -> host:port targets) and evaluating ``rule_files`` every ``every_s``
    seconds, its data under ``directory``; stopped (by its PID) on exit, whatever happened."""
    assert PROMETHEUS.exists(), f"{PROMETHEUS} is missing: run scripts/setup (it extracts Debian's prometheus package)"
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": f"{every_s}s", "evaluation_interval": f"{every_s}s"},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(targets)}]} for job, targets in jobs.items()
        ],
    }
    config_file = directory / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    address = f"127.0.0.1:{free_port()}"
    command = [
        str(PROMETHEUS),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address={address}",
        "--log.level=warn",
    ]
    with (directory / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        server = PrometheusServer(f"http://{address}")
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (directory / "prometheus.log").read_text()[-2000:]
            try:
                server.get("/api/v1/status/buildinfo")
                break
            except OSError:
                assert time.monotonic() < deadline, "Prometheus did not answer within 60 s"
                time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def quick_rules(source: Path, target: Path) -> Path:
    """``source``'s rules with every ``for:`` at 0 s: the expressions, labels and annotations as shipped, without
    the minutes they wait (a test cannot)."""
    document = yaml.safe_load(source.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target
