"""A stranger's connection to PySpark's accumulator port: one warning line, and the server goes on serving Spark."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time

import pytest
from pyspark.accumulators import AccumulatorTCPServer, UpdateRequestHandler
from pyspark.sql import SparkSession

from scrutiny.streaming.session import accumulator_server_logs_strangers

pytestmark = pytest.mark.integration

TOKEN = "the-token-spark-shares-with-its-jvm"


def test_bytes_that_are_not_sparks_token_are_logged_in_one_line_and_spark_is_still_served(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    # PySpark's own server, as the driver starts it (one connection at a time: the JVM's, once made, stays open; so
    # a server of its own here, not the shared session's).
    server = AccumulatorTCPServer(("127.0.0.1", 0), UpdateRequestHandler, TOKEN)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    accumulator_server_logs_strangers(server)
    address = server.server_address[:2]
    caplog.set_level(logging.WARNING, logger="scrutiny.streaming.session")
    capfd.readouterr()
    try:
        # What a client of another protocol sends first: a length, then bytes that are not UTF-8.
        with socket.create_connection((str(address[0]), int(address[1])), timeout=5) as stranger:
            stranger.sendall(b"\x00\x00\x00\x2c" + b"\xff" * len(TOKEN))
        deadline = time.monotonic() + 10
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.05)

        [record] = caplog.records
        assert "ignored a connection to Spark's accumulator port" in record.getMessage()
        assert "UnicodeDecodeError" in record.getMessage()
        assert "Traceback" not in capfd.readouterr().err

        # Spark's JVM after it: the token, then a round of no updates, which the server acknowledges.
        with socket.create_connection((str(address[0]), int(address[1])), timeout=5) as jvm:
            jvm.sendall(TOKEN.encode() + struct.pack("!i", 0))
            assert jvm.recv(1) == b"\x01"
    finally:
        server.shutdown()
        server.server_close()


def test_the_sessions_server_logs_strangers(spark: SparkSession) -> None:
    server = spark.sparkContext._accumulatorServer
    assert isinstance(server, AccumulatorTCPServer)
    assert server.handle_error.__qualname__.startswith(accumulator_server_logs_strangers.__name__)
