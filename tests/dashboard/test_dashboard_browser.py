"""The dashboard served over HTTP on 127.0.0.1 and driven by Debian's Chromium through Playwright.

The tables hold the known data set of tests/support/dashboard_tables.py, written once, two hours before the tests run
(the test that appends a batch works on a copy). The page must show its figures, follow a batch appended while it
is open (live refresh, no reload), and, when started with a token, answer 401 to every request without it. The
browser is /usr/bin/chromium: never downloaded, and its absence fails the tests (scripts/setup installs it).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from pyspark.sql import SparkSession

from scrutiny.cli.dashboard import TOKEN_ENV
from scrutiny.dashboard.app import create_app
from scrutiny.dashboard.server import TOKEN_COOKIE, DashboardServer
from tests.support.dashboard_tables import (
    B1,
    B2,
    B3,
    EXPECTED_COVERAGE_TEXT,
    EXPECTED_LAST_BATCH,
    EXPECTED_OPEN,
    append_live_batch,
    write_known_tables,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "test-token-7Qx_2"
RENDER_TIMEOUT_MS = 20_000
HTTP_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: install Debian's chromium (scripts/setup does)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=30_000)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def data_dir(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data set, read-only: shared by the tests of this module."""
    path = tmp_path_factory.mktemp("dashboard") / "data"
    write_known_tables(spark, path, datetime.now(UTC) - timedelta(hours=2))
    return path


@pytest.fixture
def live_data_dir(data_dir: Path, tmp_path: Path) -> Path:
    """A copy of the data set for a test that appends batches."""
    return Path(shutil.copytree(data_dir, tmp_path / "data"))


def serve(data_dir: Path, *, token: str | None = None) -> DashboardServer:
    server = DashboardServer(create_app(data_dir, token=token, refresh_seconds=1.0), "127.0.0.1", 0)
    server.start()
    return server


@pytest.fixture
def dashboard(live_data_dir: Path) -> Iterator[DashboardServer]:
    server = serve(live_data_dir)
    try:
        yield server
    finally:
        server.stop()


def text_of(page: Page, element_id: str) -> str:
    return page.locator(f"#{element_id}").inner_text()


def test_the_page_shows_the_tables_and_follows_new_batches(
    browser: Browser, dashboard: DashboardServer, live_data_dir: Path, tmp_path: Path, spark: SparkSession
) -> None:
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    try:
        page.goto(dashboard.url(), wait_until="domcontentloaded", timeout=RENDER_TIMEOUT_MS)
        expect(page.locator("#open-critical")).to_have_text(str(EXPECTED_OPEN["critical"]), timeout=RENDER_TIMEOUT_MS)
        assert text_of(page, "open-warning") == str(EXPECTED_OPEN["warning"])
        assert text_of(page, "open-info") == str(EXPECTED_OPEN["info"])
        assert text_of(page, "status") == "UNHEALTHY"
        assert text_of(page, "worst-ledger-0-id") == "2"
        missing = text_of(page, "worst-ledger-0-missing")
        assert f"{B1} (segment 0): 0-4" in missing and f"{B2} (segment 0): 0-4" in missing
        assert text_of(page, "worst-ledger-1-id") == "1"
        assert text_of(page, "worst-ledger-1-missing") == f"{B3} (segment 0): 1-2, 4-5, 7-8"
        assert text_of(page, "bookie-0-name") == B3
        assert text_of(page, "stuck-0-ledger") == "3"
        assert text_of(page, "coverage-percent") == EXPECTED_COVERAGE_TEXT
        assert text_of(page, "last-batch-id") == str(EXPECTED_LAST_BATCH)
        assert text_of(page, "checker-state") == "running"
        for chart in ("category-chart", "timeline-chart", "bookie-chart", "coverage-chart", "checker-chart"):
            expect(page.locator(f"#{chart} .main-svg").first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
        assert page.locator("#category-chart .barlayer .point").count() > 0

        screenshot = tmp_path / "dashboard.png"
        page.screenshot(path=str(screenshot), full_page=True)
        image = screenshot.read_bytes()
        assert image[:8] == b"\x89PNG\r\n\x1a\n"
        assert len(image) > 50_000, len(image)

        page.evaluate("window.scrutinyTestMarker = 42")
        append_live_batch(spark, live_data_dir, datetime.now(UTC))
        expect(page.locator("#open-critical")).to_have_text(str(EXPECTED_OPEN["critical"] + 1), timeout=15_000)
        expect(page.locator("#last-batch-id")).to_have_text(str(EXPECTED_LAST_BATCH + 1))
        expect(page.locator("#worst-ledger-0-id")).to_have_text("10")
        assert page.evaluate("window.scrutinyTestMarker") == 42  # the same document: refreshed, not reloaded
    finally:
        page.close()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    try:
        with urlopen(Request(url, headers=headers or {}), timeout=HTTP_TIMEOUT_S) as response:
            return response.status, dict(response.headers)
    except HTTPError as error:
        return error.code, dict(error.headers)


def assert_token_guard(base: str) -> None:
    for path in ("", "_dash-layout", "_dash-dependencies"):
        assert get(base + path)[0] == 401, path
    assert get(base + "?token=wrong")[0] == 401
    assert get(base, {"Authorization": "Bearer wrong"})[0] == 401
    assert get(base + "_dash-layout", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
    status, headers = get(f"{base}?token={TOKEN}")
    assert status == 200
    assert headers["Set-Cookie"].startswith(f"{TOKEN_COOKIE}={TOKEN}") and "HttpOnly" in headers["Set-Cookie"]
    assert get(base + "_dash-layout", {"Cookie": f"{TOKEN_COOKIE}={TOKEN}"})[0] == 200


def test_with_a_token_every_request_needs_it(browser: Browser, data_dir: Path) -> None:
    server = serve(data_dir, token=TOKEN)
    try:
        assert_token_guard(server.url())
        page = browser.new_page()
        try:
            page.goto(server.url(TOKEN), wait_until="domcontentloaded", timeout=RENDER_TIMEOUT_MS)
            # the callbacks carry no token in their URL: they pass thanks to the cookie the first answer set
            expect(page.locator("#open-critical")).to_have_text(
                str(EXPECTED_OPEN["critical"]), timeout=RENDER_TIMEOUT_MS
            )
        finally:
            page.close()
    finally:
        server.stop()


def test_the_command_serves_with_its_token_and_stops_on_ctrl_c(data_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    command = [sys.executable, "-m", "scrutiny.cli", "dashboard", "--data-dir", str(data_dir)]
    command += ["--port", "0", "--token", TOKEN, "--refresh-seconds", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        line = read_line(process, timeout_s=30)
        assert line.startswith("scrutiny dashboard: http://127.0.0.1:") and line.endswith("/ (token required)"), line
        assert TOKEN not in line  # a given token is never printed
        assert_token_guard(line.split()[2])
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(timeout=15) == 0
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit 15 s after SIGINT; {_signal_state(process.pid)}") from None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def _signal_state(pid: int) -> str:
    """The process's signal masks and thread count (why a signal did nothing), from /proc."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as error:
        return f"no /proc entry ({error})"
    return ", ".join(line for line in lines if line.startswith(("SigIgn", "SigCgt", "SigBlk", "Threads", "State")))


def read_line(process: subprocess.Popen[str], *, timeout_s: float) -> str:
    """The first line the process prints, within ``timeout_s`` (its stderr in the failure message)."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            return process.stdout.readline().rstrip("\n")
        if process.poll() is not None:
            break
    process.kill()
    _, err = process.communicate(timeout=10)
    raise AssertionError(f"the dashboard printed no address (exit {process.returncode}): {err}")
