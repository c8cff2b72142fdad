"""A stranger's connection to PySpark's accumulator port: one warning line, and Spark's accumulators still count."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from pyspark.accumulators import AccumulatorTCPServer
from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def test_bytes_that_are_not_sparks_token_are_logged_in_one_line_and_accumulators_go_on(
    spark: SparkSession, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    server = spark.sparkContext._accumulatorServer
    assert isinstance(server, AccumulatorTCPServer) and server.auth_token is not None
    host, port = server.server_address[:2]
    caplog.set_level(logging.WARNING, logger="scrutiny.streaming.session")
    capfd.readouterr()
    # What a client of another protocol sends first: a length, then bytes that are not UTF-8.
    with socket.create_connection((str(host), int(port)), timeout=5) as stranger:
        stranger.sendall(b"\x00\x00\x00\x2c" + b"\xff" * len(server.auth_token))
    deadline = time.monotonic() + 10
    while not caplog.records and time.monotonic() < deadline:
        time.sleep(0.05)

    [record] = caplog.records
    assert "ignored a connection to Spark's accumulator port" in record.getMessage()
    assert "UnicodeDecodeError" in record.getMessage()
    assert "Traceback" not in capfd.readouterr().err

    total = spark.sparkContext.accumulator(0)
    spark.sparkContext.parallelize(range(10), 2).foreach(total.add)
    assert total.value == 45
