"""The benchmarks keep running: a quick pass must finish, judge every healthy ledger HEALTHY and print its targets."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable as LogReader
from pyspark.sql import SparkSession

from bench import delta_write_bench, table_upkeep_bench
from scrutiny.connectors.tables.schemas import VIOLATIONS, violation_rows
from scrutiny.paths import PROJECT_ROOT
from scrutiny.streaming.delta_writer import ensure_table

pytestmark = pytest.mark.integration

REPO = PROJECT_ROOT


def run_bench(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` from the repository root; it must exit 0 within 5 minutes."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_verdict_bench_quick_runs() -> None:
    done = run_bench("bench.verdict_bench", "--quick")
    healthy = [line for line in done.stdout.splitlines() if line.strip().startswith(("10^3", "10^6", "10^9"))]
    assert healthy and "VIOLATED" not in "".join(healthy[:6])
    assert "healthy 10^9-entry ledger verdict < 1 ms" in done.stdout
    assert "decode_listing_compact" in done.stdout
    overlap = done.stdout.split("5. Healthy 10^9-entry ledger, each bookie's entries given as P overlapping")[1]
    assert overlap.count("HEALTHY") == 2  # overlapping groups are judged like the compact ones


@pytest.mark.parametrize("module", ["bench.bookie_v3_bench", "bench.agent_bench"])
def test_listing_benches_quick_run(module: str) -> None:
    done = run_bench(module, "--quick")
    assert "listings/s" in done.stdout


def test_scan_bench_runs_a_fast_a_deep_and_a_fast_scan() -> None:
    done = run_bench("bench.scan_bench", "--ledgers", "300", "--chunk-size", "300")
    rows = [
        line.split() for line in done.stdout.splitlines() if line.startswith(("fast ", "deep ")) and "/" not in line
    ]
    assert [row[0] for row in rows] == ["fast", "deep", "fast"]
    checked = {int(row[5]) for row in rows}
    assert len(checked) == 1 and 0 < checked.pop() <= 300  # the same ledgers checked by every scan
    assert int(rows[1][6]) > 0 and int(rows[0][6]) == int(rows[2][6]) == 0  # only the deep scan asks bookies
    assert "deep / fast:" in done.stdout


def test_startup_bench_measures_every_command_and_judges_the_light_ones() -> None:
    done = run_bench("bench.startup_bench", "--quick")
    rows = [line for line in done.stdout.splitlines() if line.startswith(("python -c", "scrutiny ", "inspect path"))]
    assert len(rows) == 7 and rows[0].startswith("python -c pass")
    assert sum(1 for row in rows if row.endswith(("PASS", "FAIL"))) == 4  # the four light commands, judged


def test_input_cost_bench_feeds_every_target_and_prints_its_figures() -> None:
    done = run_bench("bench.input_cost_bench", "--seconds", "0.3", "--max-scale", "300")
    rows = [line.split() for line in done.stdout.splitlines()[1:] if line.strip()]
    names = {"ledger", "password", "listing", "verdict", "v3", "agent", "rack", "under-replication", "kafka"}
    assert {row[0] for row in rows} == names
    assert all(int(row[-9]) > 0 for row in rows)  # every target was fed inputs


def test_delta_write_bench_times_every_kind_of_write(spark: SparkSession) -> None:
    figures = {figure.label: figure for figure in delta_write_bench.run(spark, 2)}  # the session's JVM: no new one
    assert len(figures) == 4
    held, written = figures["append of a batch already held"], figures["append with txnAppId/txnVersion"]
    assert held.jobs < written.jobs  # Delta skipped the held batch without writing it
    assert all(figure.wall_s > 0 and figure.cpu_s >= 0 for figure in figures.values())
    assert "idempotent append / plain append:" in delta_write_bench.report(list(figures.values()))


def test_delta_write_bench_warms_up_with_idempotent_appends_of_its_own_app(spark: SparkSession, tmp_path: Path) -> None:
    ensure_table(spark, tmp_path, VIOLATIONS)
    rows = violation_rows(delta_write_bench.output(1), batch_id=1, source="stream")
    delta_write_bench.warm_up(spark, tmp_path, rows, 2)
    log = LogReader(str(tmp_path / VIOLATIONS))
    assert log.transaction_version(delta_write_bench.WARM_UP_APP) == 1  # both appends committed, as that app
    assert log.version() == 2  # the table's creation and the two appends
    assert log.to_pyarrow_table().num_rows == 2 * rows.num_rows


def test_table_upkeep_bench_measures_a_table_of_many_files_against_its_compacted_copies(spark: SparkSession) -> None:
    rows = table_upkeep_bench.run(spark, 40, 1)  # the session's JVM: no new one
    many, kept, expired, few = rows
    assert many.files == 40 + 3  # the one-row files, then the three rounds' appends
    assert kept.files == 1 + 3 and few.files == 4 + 3  # compacted to one file; the small table's four
    assert expired.files == 1 + table_upkeep_bench.CHECKPOINT_COMMITS + 3
    assert all(row.wall_s > 0 and row.cpu_s >= 0 for row in rows)
    assert "an idempotent append's CPU per file:" in table_upkeep_bench.report(rows)


def test_scan_scale_bench_scans_each_size_and_measures_every_process() -> None:
    done = run_bench("bench.scan_scale_bench", "--sizes", "400,200", "--chunk-size", "150")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in done.stdout.splitlines()]
    figures = [row for row in rows if row[0].replace(",", "").isdigit()]
    assert [row[0] for row in figures] == ["200", "400"]  # smallest first
    for row in figures:
        driver, jvm, worker, workers = (float(cell) for cell in row[6:10])
        assert driver > 0 and jvm > driver and worker > 0 and workers >= 1
    assert "400 against 200 ledgers: cost a ledger ×" in done.stdout


def test_answer_codec_bench_times_both_forms_of_the_same_answers() -> None:
    done = run_bench("bench.answer_codec_bench", "--quick")
    assert re.search(r"marshal against JSON: writing ×\d+\.\d+, reading ×\d+\.\d+", done.stdout)
    assert re.search(r"the metadata taken back against decoded again: ×\d+\.\d+", done.stdout)
    assert re.search(r"bytes: \d+ in all, the answers' tree \d+ \(JSON \d+\)", done.stdout)


def test_processor_bench_checks_healthy_ledgers_and_shares_out_its_time() -> None:
    done = run_bench("bench.processor_bench", "--ledgers", "300", "--runs", "1", "--profile")
    # a check a ledger; a state, a verified and a timers record a bucket (five buckets of 64 ids)
    assert "checks: 300 HEALTHY; output rows per ledger: 1.05" in done.stdout
    assert re.search(r"PySpark's conversion of those rows to Arrow, per ledger: median \d+ µs", done.stdout)
    shares = [line for line in done.stdout.splitlines() if line.rstrip().endswith("%")]
    assert len(shares) == 8 and float(shares[0].split()[-1].rstrip("%")) > 10  # the verdict's share is counted


def test_fetch_bench_fetches_every_ledger_s_answers_and_splits_its_time() -> None:
    done = run_bench("bench.fetch_bench", "--ledgers", "300", "--runs", "1")
    assert "ledgers handed on with answers: 300" in done.stdout
    assert re.search(r"CPU a ledger, the whole process: median \d+ µs", done.stdout)
    assert re.search(r"the garbage collector \(job's\), on any thread: \d+\.\d%", done.stdout)
    for step in ("reading the events", "decoding the ledgers' metadata", "fetching the listings", "encoding the"):
        assert re.search(rf"{step}.* \d+ µs", done.stdout), step
