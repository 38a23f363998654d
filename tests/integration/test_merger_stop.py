"""A graceful stop (SIGTERM) of the merger in the middle of a micro-batch: quiet and clean.

Spark tells a stop from a failure by matching the foreachBatch error's text with a regex
that recurses once per character (``StreamExecution.PROXY_ERROR``); the error of a batch
whose Spark job the stop cancelled, a Python traceback holding the Java stack trace, made
the stream thread die with a ``java.lang.StackOverflowError`` (1,024 frames of
``java.util.regex`` in the log) before the merger exited."""

from __future__ import annotations

import signal
import time

import pytest

from tests.ingest_harness import IngestProcess, write_config
from tests.merger_harness import MergerProcess, root_conn, write_merger_config

pytestmark = pytest.mark.integration

PAUSE = "cdc pause point kafka_read"


@pytest.mark.timeout(300)
def test_sigterm_during_a_batch_stops_quietly(stack, tmp_path, unique_name, monkeypatch):
    """About 65 s: a merger start (Spark), a snapshot and streaming to reach a micro-batch
    whose Kafka read is held at a pause point, then the stop itself, which waits for Spark's
    JVM to exit; each step is what the defect needs."""
    db = f"stop_{unique_name}"
    with root_conn(stack) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO {db}.t VALUES (1, 1), (2, 2)")
    ingest = IngestProcess(write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"]), tmp_path / "i.log")
    ingest.start()
    # every Kafka read task of a micro-batch sleeps: the batch's Spark job is running when
    # the merger is told to stop
    monkeypatch.setenv("CDC_PAUSE_AT", "kafka_read:120")
    # the driver reads a batch itself by default, without a job: every batch goes to Spark here
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path, batch_reads="spark")
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    try:
        deadline = time.monotonic() + 180
        while PAUSE not in merger.log_text():
            assert merger.alive() and time.monotonic() < deadline, merger.log_text()[-3000:]
            time.sleep(0.5)
        time.sleep(1)
        merger.proc.send_signal(signal.SIGTERM)
        assert merger.wait_exit(60), "the merger did not stop within 60 s of SIGTERM"
        log = merger.log_text()
        assert merger.proc.returncode == 0, log[-3000:]
        for noise in ("StackOverflowError", "Traceback", "Exception in thread", "ERROR"):
            assert noise not in log, f"{noise}:\n{log[-5000:]}"
    finally:
        merger.stop()
        ingest.stop()
