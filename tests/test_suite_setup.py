"""What the suite's own set-up promises its tests: Ctrl-C reaches the commands they start, and Spark's JVMs start
with the short-lived options."""

from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from scrutiny.paths import PROJECT_ROOT
from tests.support.servers import SHORT_LIVED_JVM, short_lived_spark
from tests.support.spark_class_archive import archive_options, archive_path


def test_a_suite_started_with_sigint_ignored_starts_its_children_with_ctrl_c_working() -> None:
    """A process that ignores SIGINT (as a script's background job does) and then configures the suite starts children
    that do not ignore it; without the configuration they would."""
    probe = textwrap.dedent(
        """
        import signal, subprocess, sys
        from tests.support.servers import pytest_configure

        def child_ignores_sigint():
            child = subprocess.run(
                [sys.executable, "-c", "print(open('/proc/self/status').read())"],
                capture_output=True, text=True, check=True,
            )
            mask = next(line for line in child.stdout.splitlines() if line.startswith("SigIgn:"))
            return bool(int(mask.split()[1], 16) >> (signal.SIGINT - 1) & 1)  # a hex mask, bit N-1 for signal N

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        before = child_ignores_sigint()
        pytest_configure(None)
        print(before, child_ignores_sigint())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_the_short_lived_options_reach_both_sides_of_spark_and_keep_the_submit_resource() -> None:
    words = shlex.split(short_lived_spark())
    assert words[-1] == "pyspark-shell"  # pyspark appends nothing: without it spark-submit has no primary resource
    confs = dict(word.split("=", 1) for word in words[1:-1:2])
    assert words[0:-1:2] == ["--conf"] * 4
    assert confs == {
        "spark.driver.defaultJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m",
        "spark.executor.defaultJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m",
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    }


@pytest.mark.integration
def test_the_suites_spark_session_runs_with_the_short_lived_options(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    arguments = set(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    # What the driver's JVM really runs with, and a code cache that C1 alone does not fill (its default is 48 MB).
    assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:ReservedCodeCacheSize=256m"} <= arguments
    assert "-Xss16m" in arguments  # the product's own options stay
    # The class archive the suite made (or found) at its start is mapped, not merely named.
    archive = archive_path()
    assert f"-XX:SharedArchiveFile={archive}" in arguments
    pid = jvm.java.lang.ProcessHandle.current().pid()
    assert str(archive) in Path(f"/proc/{pid}/maps").read_text()
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.sql.codegen.wholeStage") == "false"
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"  # what the session's queries run with


def test_the_driver_maps_the_archive_only_when_there_is_one() -> None:
    def confs(submit_args: str) -> dict[str, str]:
        words = shlex.split(submit_args)
        return dict(word.split("=", 1) for word in words[1:-1:2])

    with_archive = confs(short_lived_spark(archive_options(Path("/a.jsa"))))
    without = confs(short_lived_spark(archive_options(None)))
    driver, executor = "spark.driver.defaultJavaOptions", "spark.executor.defaultJavaOptions"
    assert with_archive[driver].endswith("-XX:SharedArchiveFile=/a.jsa") and "-Xlog:cds=off" in with_archive[driver]
    assert "SharedArchive" not in with_archive[executor]  # an executor's class path is not the driver's
    assert without[driver] == without[executor] == SHORT_LIVED_JVM
