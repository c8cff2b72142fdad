"""The bookie agent end to end: RocksDB databases laid out like DbLedgerStorage, the gRPC server, the client.

The "bookie" here is this test writing its databases read-write, as DbLedgerStorage does, while
the agent reads them as a secondary instance.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from scrutiny.agent.dbstorage import CANCEL_CHECK_LEDGERS, DbLedgerStorageBackend, ledger_key
from scrutiny.agent.server import (
    CANCELLED_REASON,
    AgentMetrics,
    AgentServer,
    AgentServerConfig,
    Cancelled,
    LedgerAnswer,
    ListingBackend,
    ListingCancelledError,
    ListingNotSupportedError,
    ListingStatus,
    SourceHealth,
    never,
)
from scrutiny.cli.main import main
from scrutiny.connectors.bookies.agent_client import AgentClient, AgentListingError
from scrutiny.connectors.bookies.agent_protocol import (
    DEFAULT_LEDGERS_PER_PAGE,
    DEFAULT_MAX_LEDGERS_PER_CALL,
    MAX_HELD_LEDGER_BYTES,
    PAGE_OVERHEAD_BYTES,
    SERVICE_NAME,
    ledgers_per_page_cap,
)
from scrutiny.core.held_ledgers import LISTING_START, NO_ENTRY, HeldLedger, LedgerPage
from scrutiny.core.listing_codec import encode_listing, encode_listing_per_run
from scrutiny.core.sequence_groups import SequenceGroup, expand, from_entries
from scrutiny.core.verdict import AnswerKind, BookieAnswer
from scrutiny.proto import bookie_agent_pb2 as pb
from tests.agent.fake_bookie import FLAGS_KEY, FakeBookie

pytestmark = pytest.mark.integration

SCRUTINY = Path(sys.executable).parent / "scrutiny"
TOKEN = "s3cret-agent-token"


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[FakeBookie]:
    fake = FakeBookie(tmp_path / "bookie", 3)
    try:
        yield fake
    finally:
        fake.close()


@contextmanager
def serving(backend: ListingBackend, **config: object) -> Iterator[AgentServer]:
    server = AgentServer(backend, AgentServerConfig(listen="127.0.0.1:0", **config))  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop(grace_s=1.0)


def target(server: AgentServer) -> str:
    return f"127.0.0.1:{server.port}"


def listing_of(entries: Sequence[int]) -> BookieAnswer:
    return BookieAnswer.listing(from_entries(sorted(entries)))


class CountingBackend:
    """A backend wrapper that records the size of every batch it was asked."""

    def __init__(self, inner: ListingBackend) -> None:
        self.inner = inner
        self.batches: list[int] = []
        self.pages: list[tuple[int, int]] = []  # (after_ledger_id, max_ledgers) of every ListLedgers

    def get_listings(self, ledger_ids: Sequence[int], *, cancelled: Cancelled = never) -> list[LedgerAnswer]:
        self.batches.append(len(ledger_ids))
        return self.inner.get_listings(ledger_ids, cancelled=cancelled)

    def list_ledgers(self, after_ledger_id: int, max_ledgers: int, *, cancelled: Cancelled = never) -> LedgerPage:
        self.pages.append((after_ledger_id, max_ledgers))
        return self.inner.list_ledgers(after_ledger_id, max_ledgers, cancelled=cancelled)

    def health(self) -> list[SourceHealth]:
        return self.inner.health()

    def close(self) -> None:
        self.inner.close()


def test_listings_are_exactly_what_the_bookie_wrote(bookie: FakeBookie, tmp_path: Path) -> None:
    expected: dict[int, BookieAnswer] = {}
    striped = [e for e in range(20_000) if e % 5 < 2]
    for ledger_id, entries in {3: striped, 4: [0, 1, 2, 7, 9], 7: [0], 10: [5, 2**40, 2**40 + 1]}.items():
        bookie.put_record(ledger_id)
        bookie.put_entries(ledger_id, entries)
        expected[ledger_id] = listing_of(entries)
    bookie.put_entries(3, [-0x1000, -1])  # negative entry ids sort last and are not entries
    bookie.put_record(5, fenced=True)
    bookie.put_entries(5, range(4))
    expected[5] = listing_of(range(4))
    bookie.put_record(8, key16=True)  # a 16-byte record key (index rebuild), no entries
    expected[8] = BookieAnswer.listing([])
    bookie.put_record(11, limbo=True, key16=True)
    bookie.put_entries(11, range(3))
    bookie.put_record(9, limbo=True)
    bookie.put_entries(9, range(3))
    expected[9] = expected[11] = BookieAnswer.unknown("limbo")
    bookie.put_entries(12, [1, 2, 3, 10])  # entries without a ledger record: still held
    expected[12] = listing_of([1, 2, 3, 10])
    bookie.put_record(13, home=(13 + 1) % 3)  # in the wrong directory: the agent must not find it
    bookie.put_entries(13, range(5), home=(13 + 1) % 3)
    expected[13] = expected[6] = expected[2**40] = BookieAnswer.no_ledger()
    expected[-2] = BookieAnswer.unknown("negative")
    for directory in range(3):
        bookie.db(directory, "ledgers")[FLAGS_KEY] = b"\x00\x00\x00\x01"
    bookie.flush()
    files_before = {p: sorted(os.listdir(p)) for d in bookie.dirs for p in (d / "current").iterdir()}
    backend = DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path / "state")
    before_ms = int(time.time() * 1000)
    with serving(backend) as server, AgentClient(target(server)) as client:
        answers = client.fetch(expected)
    assert {i: a.answer for i, a in answers.items() if a.answer.kind is not AnswerKind.UNKNOWN} == {
        i: e for i, e in expected.items() if e.kind is not AnswerKind.UNKNOWN
    }
    assert "limbo" in answers[9].answer.reason and "limbo" in answers[11].answer.reason
    assert answers[9].answer.limbo and answers[11].answer.limbo and not answers[-2].answer.limbo
    assert "negative" in answers[-2].answer.reason
    assert answers[3].answer.groups == (SequenceGroup(0, 19_995, 2, 5),)  # compact: one group
    assert all(
        before_ms <= (a.as_of_ms or 0) <= int(time.time() * 1000)
        for i, a in answers.items()
        if i >= 0 and i not in (9, 11)
    )
    assert {p: sorted(os.listdir(p)) for p in files_before} == files_before  # nothing written into the bookie's dirs
    assert not backend.scratch_dir.exists()  # the agent's own files are gone after close


def test_fenced_and_record_flags_reach_the_wire(bookie: FakeBookie, tmp_path: Path) -> None:
    bookie.put_record(5, fenced=True)
    bookie.put_entries(5, range(4))
    bookie.put_entries(6, range(2))
    backend = DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path)
    try:
        fenced, orphan = backend.get_listings([5, 6])
    finally:
        backend.close()
    assert fenced.fenced and fenced.has_ledger_record and fenced.status is ListingStatus.POSITIVE
    assert not orphan.fenced and not orphan.has_ledger_record and orphan.status is ListingStatus.POSITIVE


def test_two_thousand_ledgers_in_one_call(bookie: FakeBookie, tmp_path: Path) -> None:
    ledgers = range(1000, 3000)
    for ledger_id in ledgers:
        bookie.put_record(ledger_id)
        bookie.put_entries(ledger_id, range(ledger_id % 7, ledger_id % 7 + 5))
    backend = CountingBackend(DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path))
    with serving(backend) as server, AgentClient(target(server), chunk_size=5000) as client:
        answers = client.get_listings(ledgers)
    assert backend.batches == [2000]  # one read of the index for the whole call (its speed: bench/agent_bench.py)
    assert answers == {i: listing_of(range(i % 7, i % 7 + 5)) for i in ledgers}


def test_calls_without_the_right_token_are_never_served(
    bookie: FakeBookie, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bookie.put_record(1)
    bookie.put_entries(1, range(3))
    backend = CountingBackend(DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path))
    caplog.set_level(logging.WARNING, logger="scrutiny.agent.server")
    with serving(backend, token=TOKEN) as server:
        for token in (None, "wrong-token", TOKEN[:-1]):
            with AgentClient(target(server), token=token) as client:
                answer = client.get_listings([1, 2])
            assert {a.kind for a in answer.values()} == {AnswerKind.UNKNOWN}
            assert "UNAUTHENTICATED" in answer[1].reason
        assert backend.batches == []
        with AgentClient(target(server), token=TOKEN) as client:
            assert client.get_listings([1, 2]) == {1: listing_of(range(3)), 2: BookieAnswer.no_ledger()}
        rejected = server.metrics.registry.get_sample_value(
            "scrutiny_agent_requests_total", {"method": "GetListings", "code": "UNAUTHENTICATED"}
        )
    assert backend.batches == [2]
    assert rejected == 3
    assert caplog.text.count("rejected GetListings call") == 3
    assert TOKEN not in caplog.text and "wrong-token" not in caplog.text


def test_the_agent_follows_a_live_bookie(bookie: FakeBookie, tmp_path: Path) -> None:
    """A writer keeps adding entries (and flushing, compacting, restarting) while the agent answers."""
    ledgers = [21, 22, 23, 24]
    acked: dict[int, list[int]] = {ledger_id: [] for ledger_id in ledgers}
    written: dict[int, list[int]] = {ledger_id: [] for ledger_id in ledgers}
    lock = threading.Lock()
    failure: list[BaseException] = []
    rounds = 150

    def write() -> None:
        try:
            for step in range(rounds):
                for ledger_id in ledgers:
                    new = [e for e in range(step * 10, step * 10 + 10) if e % 4 != ledger_id % 4]
                    with lock:
                        written[ledger_id].extend(new)
                    if step == 0:
                        bookie.put_record(ledger_id)
                    bookie.put_entries(ledger_id, new)
                    with lock:
                        acked[ledger_id].extend(new)
                if step % 3 == 2:
                    bookie.flush()  # memtables to table files: write-ahead logs are deleted meanwhile
                if step == 70:
                    bookie.db(bookie.home(21), "locations").compact_range(None, None)
                if step == 110:
                    bookie.restart()  # a new MANIFEST: the secondary must follow
                time.sleep(0.004)
        except BaseException as error:
            failure.append(error)

    backend = DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path)
    writer = threading.Thread(target=write, name="bookie-writer")
    listings = 0
    with serving(backend) as server, AgentClient(target(server)) as client:
        writer.start()
        try:
            while writer.is_alive():
                with lock:
                    before = {i: set(v) for i, v in acked.items()}
                answers = client.get_listings(ledgers)
                with lock:
                    possible = {i: set(v) for i, v in written.items()}
                for ledger_id in ledgers:
                    answer = answers[ledger_id]
                    if answer.kind is AnswerKind.UNKNOWN:  # honest (e.g. a flush storm outran the retries)
                        assert "write-ahead logs" in answer.reason
                        continue
                    if not before[ledger_id] and answer.kind is AnswerKind.NO_LEDGER:
                        continue
                    assert answer.kind is AnswerKind.LISTING, answer.reason
                    held = set(expand(answer.groups))
                    assert before[ledger_id] <= held <= possible[ledger_id]  # every acknowledged entry
                    listings += 1
        finally:
            writer.join(timeout=30)
        assert not failure
        final = client.get_listings(ledgers)
    assert listings >= 20
    assert final == {i: listing_of(acked[i]) for i in ledgers}
    assert len(acked[21]) == len([e for e in range(rounds * 10) if e % 4 != 1])


def test_unreadable_directories_answer_unknown_and_recover(tmp_path: Path) -> None:
    good = FakeBookie(tmp_path / "good", 1)
    try:
        good.put_record(3)
        good.put_entries(3, range(2))
        missing = tmp_path / "late" / "ledgers0"  # where FakeBookie(tmp_path / "late", 1) will create it
        not_a_db = tmp_path / "notadb"
        (not_a_db / "current" / "ledgers").mkdir(parents=True)
        (not_a_db / "current" / "locations").mkdir(parents=True)
        (not_a_db / "current" / "locations" / "CURRENT").write_text("garbage\n")
        backend = DbLedgerStorageBackend([good.dirs[0], missing, not_a_db], state_dir=tmp_path / "state")
        with serving(backend) as server, AgentClient(target(server)) as client:
            first = client.get_listings([3, 4, 5, 6, 7, 8])
            again = client.get_listings([3, 4, 5])
            health = {d.index: d for d in client.health().directories}
            assert not (missing / "current").exists()  # the agent created nothing in the bookie's place
            recovered = FakeBookie(tmp_path / "late", 1)  # the bookie creates its databases late
            recovered.put_record(4)
            later = client.get_listings([4, 7])
            recovered.close()
    finally:
        good.close()
    assert first[3] == again[3] == listing_of(range(2)) and first[6] == BookieAnswer.no_ledger()
    for ledger_id in (4, 5, 7, 8):
        assert first[ledger_id].kind is AnswerKind.UNKNOWN
    assert "does not exist" in first[4].reason and "does not exist" in again[4].reason
    assert "ledger directory 2" in first[5].reason
    assert health[0].ok and not health[1].ok and not health[2].ok and health[2].reason
    assert later[4] == BookieAnswer.listing([]) and later[7] == BookieAnswer.no_ledger()


def test_requests_over_the_limit_are_refused(bookie: FakeBookie, tmp_path: Path) -> None:
    backend = CountingBackend(DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path))
    with serving(backend, max_ledgers_per_call=50) as server:
        with AgentClient(target(server), chunk_size=51) as client:
            refused = client.get_listings(range(51))
        with AgentClient(target(server), chunk_size=50) as client:
            served = client.get_listings(range(120))
        invalid = server.metrics.registry.get_sample_value(
            "scrutiny_agent_requests_total", {"method": "GetListings", "code": "INVALID_ARGUMENT"}
        )
    assert {a.kind for a in refused.values()} == {AnswerKind.UNKNOWN}
    assert "INVALID_ARGUMENT" in refused[0].reason and invalid == 1
    assert backend.batches == [50, 50, 20]
    assert served == dict.fromkeys(range(120), BookieAnswer.no_ledger())


class ScriptedBackend:
    """Answers from a script, after an optional delay."""

    def __init__(self, answers: dict[int, LedgerAnswer], delay_s: float = 0.0) -> None:
        self.answers = answers
        self.delay_s = delay_s
        self.closed_after_calls = False
        self.finished_calls = 0

    def get_listings(self, ledger_ids: Sequence[int], *, cancelled: Cancelled = never) -> list[LedgerAnswer]:
        time.sleep(self.delay_s)
        self.finished_calls += 1
        return [self.answers[i] for i in ledger_ids if i in self.answers]

    def list_ledgers(self, after_ledger_id: int, max_ledgers: int, *, cancelled: Cancelled = never) -> LedgerPage:
        raise ListingNotSupportedError("a scripted backend lists nothing")

    def health(self) -> list[SourceHealth]:
        return []

    def close(self) -> None:
        self.closed_after_calls = self.finished_calls > 0


def test_the_client_never_trusts_bad_answers() -> None:
    good = encode_listing([SequenceGroup.run(0, 4)])
    backend = ScriptedBackend(
        {
            1: LedgerAnswer(1, ListingStatus.POSITIVE, listing=good, as_of_ms=5),
            2: LedgerAnswer(2, ListingStatus.POSITIVE, listing=good[:-3]),
            3: LedgerAnswer(3, ListingStatus.UNKNOWN, reason="ledger in limbo"),
        }
    )
    with serving(backend, bookie_id="bk-1") as server:
        with AgentClient(target(server), expected_bookie_id="bk-1") as client:
            answers = client.fetch([1, 2, 3, 4])
        with AgentClient(target(server), expected_bookie_id="bk-2") as client:
            misrouted = client.get_listings([1])
    with serving(backend) as server, AgentClient(target(server), expected_bookie_id="bk-1") as client:
        anonymous = client.get_listings([1])  # an agent that does not say which bookie it serves
    assert anonymous[1].kind is AnswerKind.UNKNOWN and "does not say which bookie" in anonymous[1].reason
    assert answers[1].answer == BookieAnswer.listing([SequenceGroup.run(0, 4)]) and answers[1].as_of_ms == 5
    assert answers[2].answer.kind is AnswerKind.UNKNOWN and "malformed" in answers[2].answer.reason
    assert answers[3].answer == BookieAnswer.unknown("ledger in limbo")
    assert answers[4].answer.kind is AnswerKind.UNKNOWN and "no answer" in answers[4].answer.reason
    assert misrouted[1].kind is AnswerKind.UNKNOWN and "bk-1" in misrouted[1].reason


class FailingBackend(ScriptedBackend):
    def get_listings(self, ledger_ids: Sequence[int], *, cancelled: Cancelled = never) -> list[LedgerAnswer]:
        raise RuntimeError("disk on fire")

    def list_ledgers(self, after_ledger_id: int, max_ledgers: int, *, cancelled: Cancelled = never) -> LedgerPage:
        raise RuntimeError("disk on fire")


def test_backend_failures_and_oversized_answers_become_unknown() -> None:
    big = encode_listing_per_run([SequenceGroup(0, 3998, 1, 2)])  # 2000 one-run groups, 48 kB
    answers = {i: LedgerAnswer(i, ListingStatus.POSITIVE, listing=big) for i in range(4)}
    with serving(FailingBackend({})) as server, AgentClient(target(server)) as client:
        failed = client.get_listings([1, 2])
    with serving(ScriptedBackend(answers), max_response_bytes=150_000) as server, AgentClient(target(server)) as c:
        budgeted = c.get_listings(range(4))
    assert {a.kind for a in failed.values()} == {AnswerKind.UNKNOWN} and "disk on fire" in failed[1].reason
    assert [budgeted[i].kind for i in range(4)] == [AnswerKind.LISTING] * 3 + [AnswerKind.UNKNOWN]
    assert "too large" in budgeted[3].reason and budgeted[0] == BookieAnswer.listing([SequenceGroup(0, 3998, 1, 2)])


def test_an_unreachable_agent_makes_every_ledger_unknown() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with AgentClient(f"127.0.0.1:{port}", timeout_s=2.0, chunk_size=2) as client:
        started = time.perf_counter()
        answers = client.get_listings([1, 2, 3])
    assert {a.kind for a in answers.values()} == {AnswerKind.UNKNOWN}
    assert all("UNAVAILABLE" in a.reason or "DEADLINE_EXCEEDED" in a.reason for a in answers.values())
    assert time.perf_counter() - started < 5.0


def test_shutdown_lets_in_flight_calls_finish() -> None:
    backend = ScriptedBackend({1: LedgerAnswer(1, ListingStatus.NO_LEDGER)}, delay_s=0.4)
    server = AgentServer(backend, AgentServerConfig(listen="127.0.0.1:0"))
    server.start()
    try:
        with AgentClient(target(server)) as client:
            result: dict[int, BookieAnswer] = {}
            call = threading.Thread(target=lambda: result.update(client.get_listings([1])))
            call.start()
            deadline = time.monotonic() + 5
            while server.metrics.in_flight._value.get() < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            server.stop(grace_s=5.0)
            call.join(timeout=5)
            after = client.get_listings([1])
    finally:
        server.stop()
    assert result == {1: BookieAnswer.no_ledger()}
    assert backend.closed_after_calls
    assert after[1].kind is AnswerKind.UNKNOWN


def test_tls(bookie: FakeBookie, tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
            *("-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    bookie.put_record(1)
    backend = DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path)
    with serving(backend, tls_cert_chain=cert.read_bytes(), tls_private_key=key.read_bytes()) as server:
        with AgentClient(target(server), tls=True, root_certificates=cert.read_bytes()) as client:
            secure = client.get_listings([1])
        with AgentClient(target(server), timeout_s=2.0) as client:
            plain = client.get_listings([1])
    assert secure == {1: BookieAnswer.listing([])}
    assert plain[1].kind is AnswerKind.UNKNOWN


def test_metrics_count_answers_and_catch_ups(bookie: FakeBookie, tmp_path: Path) -> None:
    bookie.put_record(1)
    metrics = AgentMetrics()
    backend = DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path, on_catch_up=metrics.observe_catch_up)
    server = AgentServer(backend, AgentServerConfig(listen="127.0.0.1:0"), metrics)
    server.start()
    port = metrics.serve(0)
    try:
        with AgentClient(target(server)) as client:
            client.get_listings([1, 2, -1])
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.stop()
        metrics.stop()
    assert 'scrutiny_agent_ledgers_answered_total{status="POSITIVE"} 1.0' in text
    assert 'scrutiny_agent_ledgers_answered_total{status="NO_LEDGER"} 1.0' in text
    assert 'scrutiny_agent_ledgers_answered_total{status="UNKNOWN"} 1.0' in text
    assert 'scrutiny_agent_requests_total{code="OK",method="GetListings"} 1.0' in text
    assert 'scrutiny_agent_catch_up_duration_seconds_count{database="locations",directory="1"} 1.0' in text
    assert "scrutiny_agent_request_duration_seconds_bucket" in text


def test_agent_command_runs_until_sigterm(bookie: FakeBookie, tmp_path: Path) -> None:
    bookie.put_record(4)
    bookie.put_entries(4, range(6))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    command = [str(SCRUTINY), "agent", "--ledger-dirs", ",".join(map(str, bookie.dirs)), "--listen", "127.0.0.1:0"]
    command += ["--token-file", str(token_file), "--metrics-port", "0", "--bookie-id", "bk-9"]
    command += ["--state-dir", str(tmp_path / "state")]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        lines: list[str] = []
        while not any("metrics on" in line for line in lines):
            line = process.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        port = int(next(line for line in lines if "listening on" in line).split("127.0.0.1:")[1].split()[0])
        with AgentClient(f"127.0.0.1:{port}", token=TOKEN, expected_bookie_id="bk-9") as client:
            answers = client.get_listings([4, 5])
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=15)
        rest = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
    assert answers == {4: listing_of(range(6)), 5: BookieAnswer.no_ledger()}
    assert code == 0
    assert "stopped" in rest and TOKEN not in "".join(lines) + rest
    assert list((tmp_path / "state").iterdir()) == []


def test_agent_command_refuses_a_public_address_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["agent", "--ledger-dirs", str(tmp_path), "--listen", "0.0.0.0:0", "--bookie-id", "bk:3181"])
    assert code == 2
    assert "refusing to listen on non-loopback 0.0.0.0:0 without --token-file" in capsys.readouterr().err


def test_agent_command_says_in_one_line_that_a_token_file_is_not_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = tmp_path / "token"
    token_file.write_bytes(b"\xff\xfesecret")
    code = main(["agent", "--ledger-dirs", str(tmp_path), "--token-file", str(token_file), "--bookie-id", "bk:3181"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "is not UTF-8 text (byte 0)" in err[0], err


class SlowBackend(ScriptedBackend):
    """Reads ledger by ledger, 50 ms each, and stops when the caller gave up (as the RocksDB backend does)."""

    def __init__(self) -> None:
        super().__init__({})
        self.read = 0

    def get_listings(self, ledger_ids: Sequence[int], *, cancelled: Cancelled = never) -> list[LedgerAnswer]:
        answers = []
        for ledger_id in ledger_ids:
            if cancelled():
                answers.append(LedgerAnswer.unknown(ledger_id, CANCELLED_REASON))
                continue
            time.sleep(0.05)
            self.read += 1
            answers.append(LedgerAnswer(ledger_id, ListingStatus.NO_LEDGER))
        return answers

    def list_ledgers(self, after_ledger_id: int, max_ledgers: int, *, cancelled: Cancelled = never) -> LedgerPage:
        ledgers = []
        for ledger_id in range(after_ledger_id + 1, after_ledger_id + 1 + max_ledgers):
            if cancelled():
                raise ListingCancelledError(CANCELLED_REASON)
            time.sleep(0.05)
            self.read += 1
            ledgers.append(HeldLedger(ledger_id))
        return LedgerPage(tuple(ledgers), end=False)


def test_a_call_its_caller_gave_up_stops_reading() -> None:
    backend = SlowBackend()
    with serving(backend) as server, AgentClient(target(server), timeout_s=0.3) as client:
        answers = client.get_listings(range(1, 101))  # 5 s of reading; the caller waits 0.3 s
        assert all(a.kind is AnswerKind.UNKNOWN for a in answers.values())
        time.sleep(1.0)
    assert backend.read < 20  # it stopped soon after the deadline, not after all 100


def test_the_rocksdb_backend_answers_unknown_for_what_it_did_not_read_once_cancelled(
    bookie: FakeBookie, tmp_path: Path
) -> None:
    ledgers = list(range(1, 3 * CANCEL_CHECK_LEDGERS))
    for ledger_id in ledgers:
        bookie.put_record(ledger_id)
        bookie.put_entries(ledger_id, range(3))
    backend = DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path)
    try:
        asked = [0]

        def cancelled() -> bool:
            asked[0] += 1
            return asked[0] > 1  # the caller gives up after the first check

        answers = backend.get_listings(ledgers, cancelled=cancelled)
    finally:
        backend.close()
    read = [a for a in answers if a.status is not ListingStatus.UNKNOWN]
    assert 0 < len(read) < len(ledgers) and all(a.reason == CANCELLED_REASON for a in answers if a not in read)


# ---------------------------------------------------------------- ListLedgers


class PageBackend(ScriptedBackend):
    """Lists whatever ``make`` returns for (after_ledger_id, max_ledgers), recording each request."""

    def __init__(self, make: Callable[[int, int], LedgerPage]) -> None:
        super().__init__({})
        self.make = make
        self.asked: list[tuple[int, int]] = []

    def list_ledgers(self, after_ledger_id: int, max_ledgers: int, *, cancelled: Cancelled = never) -> LedgerPage:
        self.asked.append((after_ledger_id, max_ledgers))
        return self.make(after_ledger_id, max_ledgers)


def test_held_ledgers_come_page_by_page_through_the_server_and_only_with_the_token(
    bookie: FakeBookie, tmp_path: Path
) -> None:
    bookie.put_record(3)
    bookie.put_entries(3, range(10))
    bookie.put_entries(4, [7, 2**40])  # entries without a record
    bookie.put_record(5, limbo=True)
    bookie.put_record(2**41)
    for directory in range(3):
        bookie.db(directory, "ledgers")[FLAGS_KEY] = b"\x00\x00\x00\x01"
    bookie.flush()
    expected = [
        HeldLedger(3, True, False, 0, 9),
        HeldLedger(4, False, False, 7, 2**40),
        HeldLedger(5, True, True, NO_ENTRY, NO_ENTRY),
        HeldLedger(2**41, True, False, NO_ENTRY, NO_ENTRY),
    ]
    backend = CountingBackend(DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path))
    with serving(backend, token=TOKEN, bookie_id="bk-1") as server:
        for token in (None, "wrong-token"):
            with AgentClient(target(server), token=token) as client, pytest.raises(AgentListingError) as refused:
                client.ledgers_page()
            assert refused.value.code == "UNAUTHENTICATED" and "UNAUTHENTICATED" in str(refused.value)
        assert backend.pages == []  # never reached the storage
        with AgentClient(target(server), token=TOKEN, expected_bookie_id="bk-1") as client:
            before = int(time.time() * 1000)
            pages = list(client.ledger_pages(page_size=3))
            listed = list(client.held_ledgers(page_size=1))
        registry = server.metrics.registry
        rejected = registry.get_sample_value(
            "scrutiny_agent_requests_total", {"method": "ListLedgers", "code": "UNAUTHENTICATED"}
        )
        served = registry.get_sample_value("scrutiny_agent_requests_total", {"method": "ListLedgers", "code": "OK"})
        sent = registry.get_sample_value("scrutiny_agent_ledgers_listed_total", {})
    assert [list(p.ledgers) for p in pages] == [expected[:3], expected[3:]] and [p.end for p in pages] == [False, True]
    assert all(before <= p.as_of_ms <= int(time.time() * 1000) for p in pages)
    assert listed == expected
    assert backend.pages[:2] == [(LISTING_START, 3), (5, 3)]
    assert backend.pages[2:] == [(LISTING_START, 1), (3, 1), (4, 1), (5, 1)]  # the last page held 2**41: end
    assert (rejected, served, sent) == (2, 6, 8)


def test_pages_are_capped_by_the_per_call_limit_and_the_response_size() -> None:
    assert ledgers_per_page_cap(DEFAULT_MAX_LEDGERS_PER_CALL, 64 << 20) == DEFAULT_MAX_LEDGERS_PER_CALL
    assert ledgers_per_page_cap(50, PAGE_OVERHEAD_BYTES + 7 * MAX_HELD_LEDGER_BYTES) == 7
    assert ledgers_per_page_cap(50, 100) == 1

    def widest(after: int, size: int) -> LedgerPage:  # the largest HeldLedger messages there are
        first = max(after + 1, 2**63 - 10_000)
        return LedgerPage(tuple(HeldLedger(first + i, True, True) for i in range(size)), end=False)

    backend = PageBackend(widest)
    with serving(backend, max_ledgers_per_call=50) as server, AgentClient(target(server)) as client:
        assert server.ledgers_per_page == 50
        assert len(client.ledgers_page(max_ledgers=1000).ledgers) == 50  # capped, not refused
        assert len(client.ledgers_page().ledgers) == 50  # the default, capped
        assert len(client.ledgers_page(max_ledgers=7).ledgers) == 7
    assert [size for _, size in backend.asked] == [50, 50, 7]
    backend.asked.clear()
    with serving(backend) as server, AgentClient(target(server)) as client:
        client.ledgers_page()
    assert backend.asked == [(LISTING_START, DEFAULT_LEDGERS_PER_PAGE)]
    backend.asked.clear()
    small = 8192  # a response of at most 8 kB: (8192 - 4096) // 38 = 107 of the widest ledgers
    with serving(backend, max_response_bytes=small) as server, AgentClient(target(server)) as client:
        page = client.ledgers_page(max_ledgers=1000)  # fits: no RESOURCE_EXHAUSTED
    assert len(page.ledgers) == server.ledgers_per_page == 107 and backend.asked == [(LISTING_START, 107)]


def test_a_backend_that_cannot_list_is_unimplemented() -> None:
    with serving(ScriptedBackend({})) as server, AgentClient(target(server)) as client:
        with pytest.raises(AgentListingError, match="cannot list its bookie's ledgers: a scripted backend") as error:
            client.ledgers_page()
        code = server.metrics.registry.get_sample_value(
            "scrutiny_agent_requests_total", {"method": "ListLedgers", "code": "UNIMPLEMENTED"}
        )
    assert error.value.code == "UNIMPLEMENTED" and code == 1


def test_storage_trouble_is_unavailable_never_a_short_listing(bookie: FakeBookie, tmp_path: Path) -> None:
    bookie.put_record(3)
    bookie.db(bookie.home(7), "ledgers")[ledger_key(7)] = b"\x1a\x05ab"  # a record that does not decode
    bookie.flush()
    failures: dict[str, AgentListingError] = {}
    backends: dict[str, ListingBackend] = {
        "undecodable": DbLedgerStorageBackend(bookie.dirs, state_dir=tmp_path / "a"),
        "missing": DbLedgerStorageBackend([tmp_path / "gone", *bookie.dirs], state_dir=tmp_path / "b"),
        "failing": FailingBackend({}),
        "descending": PageBackend(lambda after, size: LedgerPage((HeldLedger(9), HeldLedger(8)), end=True)),
        "not above": PageBackend(lambda after, size: LedgerPage((HeldLedger(after),), end=True)),
        "empty": PageBackend(lambda after, size: LedgerPage((), end=False)),
    }
    for name, backend in backends.items():
        with serving(backend) as server, AgentClient(target(server)) as client:
            with pytest.raises(AgentListingError) as error:
                list(client.held_ledgers())
            failures[name] = error.value
    assert {e.code for e in failures.values()} == {"UNAVAILABLE"}
    assert "ledger 7: undecodable ledger record" in str(failures["undecodable"])
    assert "ledger directory 0" in str(failures["missing"]) and "does not exist" in str(failures["missing"])
    assert "RuntimeError: disk on fire" in str(failures["failing"])
    assert "bad page: ledger 8 after 9: ids not strictly ascending" in str(failures["descending"])
    assert "bad page: ledger -1 after -1" in str(failures["not above"])
    assert "bad page: an empty page that does not end" in str(failures["empty"])


def test_list_ledgers_refuses_arguments_out_of_range() -> None:
    backend = PageBackend(lambda after, size: LedgerPage((), end=True))
    with serving(backend) as server, grpc.insecure_channel(target(server)) as channel:
        call = channel.unary_unary(
            f"/{SERVICE_NAME}/ListLedgers",
            request_serializer=pb.LedgersRequest.SerializeToString,
            response_deserializer=pb.LedgersPage.FromString,
        )
        codes = []
        for request in (pb.LedgersRequest(after_ledger_id=-2), pb.LedgersRequest(max_ledgers=-1)):
            with pytest.raises(grpc.RpcError) as error:
                call(request, timeout=5)
            codes.append((error.value.code(), error.value.details()))
        fine = call(pb.LedgersRequest(after_ledger_id=-1), timeout=5)
    assert codes == [
        (grpc.StatusCode.INVALID_ARGUMENT, "after_ledger_id -2 is below -1"),
        (grpc.StatusCode.INVALID_ARGUMENT, "max_ledgers -1 is negative"),
    ]
    assert fine.end and not fine.ledgers and backend.asked == [(LISTING_START, DEFAULT_LEDGERS_PER_PAGE)]


def test_a_listing_its_caller_gave_up_stops_reading() -> None:
    backend = SlowBackend()
    with serving(backend) as server, AgentClient(target(server), timeout_s=0.3) as client:
        with pytest.raises(AgentListingError) as error:
            client.ledgers_page(max_ledgers=100)  # 5 s of reading; the caller waits 0.3 s
        time.sleep(1.0)
        cancelled = server.metrics.registry.get_sample_value(
            "scrutiny_agent_requests_total", {"method": "ListLedgers", "code": "CANCELLED"}
        )
    assert error.value.code == "DEADLINE_EXCEEDED"
    assert backend.read < 20 and cancelled == 1
