"""The Kafka broker freezes (SIGSTOP, then SIGCONT) under a steady write load, against the
real servers (MariaDB, the Tansu broker, PostgreSQL, Spark local mode).

Ingest and the merger both ride through the outage (docs/operations/faults.md, "The Kafka broker
is unreachable"): they keep running, say what is unreachable and for how long, and resume
once the broker answers; afterwards every sink equals its source row for row and every
change is on the topics exactly once.

The broker is only frozen, never restarted: the local broker keeps its topics in memory
(``--storage-engine memory://``), so a restart loses every topic (see the docs for what
ingest and the merger do then).

The freeze lasts 20 s under CI=true (the processes' broker calls time out after 6 s there:
`kafka.request_timeout_s`) and 60 s and 300 s otherwise (the default timeouts: 30 s for ingest,
15 s for the merger).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from cdc import stack as local_stack
from tests.conftest import IS_CI
from tests.integration.test_faults import TABLES, Pipeline, Workload
from tests.kafka_util import list_topics, read_records, rebuild
from tests.merger_harness import SinkChecker, create_mixed_tables
from tests.source_db import root_connection

pytestmark = pytest.mark.integration

# under CI 20 s: past three of each process's broker calls, with kafka.request_timeout_s 6
FREEZES_S = [20] if IS_CI else [60, 300]
KAFKA_TIMEOUT = {"kafka.request_timeout_s": 6} if IS_CI else {}
ROWS = 3_000
WRITE_TIMES = ("ts_ms", "ts_us", "ts_ns")  # when ingest wrote a record: a replay differs there only


def _broker_pid(stack) -> int:
    pid = local_stack.running_pid(Path(stack.state_dir), "kafka", f"tcp://127.0.0.1:{stack.kafka.port}")
    assert pid, "the broker is not running"
    return pid


def _wait_for(predicate, timeout_s: float, what: str, p: Pipeline | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if p is not None:
            p.check_alive()
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _metric(port: int, name: str) -> float | None:
    import urllib.request

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def _assert_topics_exactly_once(stack, prefix: str, db: str) -> dict:
    """Reads the table topics read_committed WITHOUT the replay filter. The local broker shows
    records of aborted transactions (DESIGN.md), so a record may be there twice; each copy of
    one source position must then be the same record (a replay, which any consumer drops by
    its position), never two different changes at one position. One record per distinct
    position, replayed in order, must give the source's rows: nothing lost."""
    topics = [t for t in list_topics(stack.kafka.bootstrap, f"{prefix}.{db}.")]
    records, _ = read_records(stack.kafka.bootstrap, topics, dedup=False)
    by_position: dict = defaultdict(list)
    for r in records:
        if r.position is not None and r.value is not None:
            by_position[(r.topic, r.partition, r.position.key())].append(r)
    copies = 0
    for where, same in by_position.items():
        # the replay is the same change; only the envelope's ts_ms/ts_us/ts_ns (when ingest wrote it) differ
        changes = {(r.key, json.dumps({k: v for k, v in r.payload.items() if k not in WRITE_TIMES})) for r in same}
        assert len(changes) == 1, f"different changes at one position {where}: {changes}"
        copies += len(same) - 1
    distinct = [same[0] for same in by_position.values()]
    conn = root_connection(stack, db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, v, n FROM num")
            source = {row[0]: (row[1], row[2]) for row in cur.fetchall()}
    finally:
        conn.close()
    # the topic holds the changes since ingest started (the snapshot went to the sinks): every
    # key it names must end as the source has it, present with its values or absent
    on_topic = [r for r in distinct if r.topic == f"{prefix}.{db}.num"]
    touched = {img["id"] for r in on_topic for img in (r.payload.get("before"), r.payload.get("after")) if img}
    rebuilt = {k[0]: (row["v"], row["n"]) for k, row in rebuild(on_topic, ["id"]).items()}
    wrong = {k: (rebuilt.get(k), source.get(k)) for k in touched if rebuilt.get(k) != source.get(k)}
    assert not wrong, f"{len(wrong)} of {len(touched)} keys of num differ on the topic: {list(wrong.items())[:5]}"
    return {"records": len(records), "distinct_positions": len(distinct), "replayed_copies": copies}


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("freeze_s", FREEZES_S)
def test_broker_frozen_under_load(stack, tmp_path, unique_name, freeze_s):
    db = f"bo_{unique_name}"
    conn = root_connection(stack, None)
    try:
        create_mixed_tables(conn, db, ROWS)
    finally:
        conn.close()
    port = local_stack.free_port()
    p = Pipeline(
        stack,
        tmp_path,
        unique_name,
        db,
        ingest_extra={"metrics_port": port, **KAFKA_TIMEOUT},
        merger_extra=KAFKA_TIMEOUT,
    ).start()
    work = Workload(stack, db, ROWS, seed=11)
    broker = _broker_pid(stack)
    frozen = False
    timings: dict = {}
    try:
        _wait_for(lambda: all(p.snapshot_finished(t) for t in TABLES), 300, "the snapshots", p)
        work.start()
        time.sleep(2)
        statements_before = work.statements
        os.kill(broker, signal.SIGSTOP)
        frozen, frozen_at = True, time.monotonic()
        while time.monotonic() - frozen_at < freeze_s:
            p.check_alive()  # both ride through the whole freeze
            time.sleep(1)
        os.kill(broker, signal.SIGCONT)
        frozen, resumed_at = False, time.monotonic()
        assert work.statements > statements_before, "no writes during the freeze"
        _wait_for(lambda: _metric(port, 'cdc_ingest_unavailable{kind="broker"}') == 0.0, 180, "ingest to recover", p)
        timings["ingest_back_s"] = time.monotonic() - resumed_at
        time.sleep(2)
        work.stop.set()
        work.join(60)
        assert work.error is None, work.error
        checker = SinkChecker(stack, tmp_path)
        try:
            for table in TABLES:
                checker.wait_equal(db, table, timeout_s=300, proc=p.merger)
        finally:
            checker.close()
        timings["sinks_equal_after_resume_s"] = time.monotonic() - resumed_at
        p.check_alive()
        ingest_log, merger_log = p.ingest.log_text(), p.merger.log_text()
        assert "broker" in ingest_log and "reachable again" in ingest_log, ingest_log[-3000:]
        assert "Kafka broker unreachable" in merger_log and "Kafka broker reachable again" in merger_log, merger_log[
            -3000:
        ]
        counts = _assert_topics_exactly_once(stack, unique_name, db)
        print(
            f"freeze {freeze_s}s: timings {json.dumps({k: round(v, 1) for k, v in timings.items()})}, "
            f"topics {counts}, workload {work.statements} statements"
        )
    finally:
        if frozen:
            os.kill(broker, signal.SIGCONT)
        work.stop.set()
        p.stop()


@pytest.mark.timeout(600)
def test_broker_restart_that_lost_the_topics_stops_ingest(stack, tmp_path, unique_name):
    """The local broker keeps its topics in memory: restarted, it has lost them all, the
    offsets topic included, and it creates topics again on the first write. Ingest must not
    write on into them (from its position in memory, into topics no consumer's offsets fit):
    it stops with one line. (The merger's checkpoint offsets then lie above the new topics'
    ends: that check belongs to the merger's Kafka source, not tested here.)"""
    from tests.ingest_harness import IngestProcess, wait_caught_up, write_config

    db = f"br_{unique_name}"
    conn = root_connection(stack, None)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    finally:
        conn.close()
    ingest = IngestProcess(write_config(stack, tmp_path / "ingest.yaml", unique_name, [db]), tmp_path / "ingest.log")
    ingest.start()
    try:
        conn = root_connection(stack, db)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1, 1)")
        wait_caught_up(stack, unique_name, proc=ingest)
        assert local_stack.stop(stack, "kafka")
        info = local_stack.up(Path(stack.state_dir), ("kafka",))
        assert info.kafka.port == stack.kafka.port, "the broker came back on another port"
        with conn.cursor() as cur:  # a change to write: ingest meets the empty broker
            for i in range(2, 12):
                cur.execute("INSERT INTO t VALUES (%s, 1)", (i,))
                time.sleep(0.5)
        conn.close()
        assert ingest.wait_exit(120), f"ingest went on after the broker lost its topics:\n{ingest.log_text()[-3000:]}"
        errors = [
            line for line in ingest.log_text().splitlines() if "no longer holds ingest's committed position" in line
        ]
        assert len(errors) == 1 and "Traceback" not in ingest.log_text(), ingest.log_text()[-3000:]
        assert ingest.proc.returncode != 0
    finally:
        ingest.stop()
