"""The session: starting Spark's JVM again when it exited before it began (and only then), and its JVM's options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkRuntimeError

from scrutiny.streaming import session as session_module

pytestmark = pytest.mark.unit


class FlakyBuilder:
    """A builder whose first ``failures`` starts raise ``error``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def getOrCreate(self) -> Any:  # noqa: N802 - PySpark's name
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "session"


EXITED = PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("scrutiny.streaming.session.time.sleep", lambda _: None)


def test_a_jvm_that_exited_before_it_began_is_started_again() -> None:
    builder = FlakyBuilder(2, EXITED)
    started: object = session_module._launch(builder, None)  # type: ignore[arg-type]
    assert started == "session" and builder.calls == 3


def test_it_gives_up_after_the_last_attempt_and_other_errors_are_raised_at_once() -> None:
    builder = FlakyBuilder(session_module.JVM_START_ATTEMPTS, EXITED)
    with pytest.raises(PySparkRuntimeError):
        session_module._launch(builder, None)  # type: ignore[arg-type]
    assert builder.calls == session_module.JVM_START_ATTEMPTS
    other = FlakyBuilder(1, PySparkRuntimeError(errorClass="CANNOT_OPEN_SOCKET", messageParameters={"errors": "x"}))
    with pytest.raises(PySparkRuntimeError):
        session_module._launch(other, None)  # type: ignore[arg-type]
    assert other.calls == 1


def test_extra_jars_leave_out_what_pyspark_ships(tmp_path: Path) -> None:
    for name in ("scala-library.jar", "jackson-databind.jar", "kafka-clients.jar", "delta-spark_2.13.jar"):
        (tmp_path / name).write_bytes(b"")
    assert [jar.name for jar in session_module.extra_jars(tmp_path)] == ["delta-spark_2.13.jar", "kafka-clients.jar"]
    assert session_module.extra_jars(tmp_path / "missing") == []  # set-up not run yet: nothing to add


def test_artifact_names_end_before_the_version(tmp_path: Path) -> None:
    names = ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "zstd-jni-1.5.7-7.jar", "jackson-databind-2.21.2.jar", "shims.jar")
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert session_module._artifacts_of(tmp_path) == {"spark-sql-kafka", "zstd-jni", "jackson-databind", "shims"}


def test_the_jvm_compiles_with_c1_alone_in_a_code_cache_a_long_run_does_not_fill() -> None:
    options = session_module.BASE_CONF["spark.driver.extraJavaOptions"].split()
    assert "-XX:TieredStopAtLevel=1" in options  # C2 cost a sixth to a tenth of a busy checker's CPU
    assert "-XX:ReservedCodeCacheSize=256m" in options  # C1 alone would reserve 48 MB
    assert "-Xss16m" in options
