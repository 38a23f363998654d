"""A table topic of 32 partitions is read in parallel, and every key's changes still apply in
order (issue 23, item 4).

A backlog is written while the merger is stopped: every key updated many times in sequence
(a per-key counter column, ``c = c + 1``), some keys updated several times within one
transaction in random key order, keys deleted and inserted again, and primary-key changes
(one of them onto a key deleted before). The merger then catches up. Asserted:

* the micro-batches that read the backlog ran their Kafka read as more than one Spark task
  (the merger's log line "micro-batch N: R records read by K Spark tasks", also
  ``cdc_merger_last_batch_read_tasks`` and ``readTasks`` in CDC_MERGER_PROGRESS_LOG);
* both sinks equal the source row for row (plain SELECT on the source, each sink read in its
  own types: ``merger.verify``), so each key's last change won: its counter is the source's.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from merger.state.store import StateStore
from tests.cli_util import wait_for
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config
from tests.source_db import root_connection

pytestmark = pytest.mark.integration

PARTITIONS = 32
KEYS = 2000
ROUNDS = 20
READ_LINE = re.compile(r"micro-batch (\d+): (\d+) records read by (\d+) Spark tasks")


def _backlog(cur, rnd: random.Random) -> int:
    """Writes the backlog; the number of row changes."""
    changes = 0
    for r in range(1, ROUNDS + 1):
        # every key once, in one statement (one rows event per round)
        cur.execute("BEGIN")
        cur.execute(f"UPDATE t SET c = c + 1, v = CONCAT('r{r}-', id)")
        changes += cur.rowcount
        # then random keys, some several times, in one transaction, in random key order
        for _ in range(100):
            k = rnd.randint(1, KEYS)
            for _ in range(rnd.randint(1, 3)):
                cur.execute(f"UPDATE t SET c = c + 1, v = CONCAT('x{r}-', c) WHERE id = {k}")
                changes += cur.rowcount
        if r == 5:  # primary-key changes: a delete of the old key, a create of the new one
            cur.execute("UPDATE t SET id = id + 100000, c = c + 1 WHERE id IN (7, 8)")
            changes += cur.rowcount
        if r == 8:
            cur.execute("DELETE FROM t WHERE id % 10 = 3")
            changes += cur.rowcount
        if r == 10:  # onto a key deleted in round 8
            cur.execute("UPDATE t SET id = 13, c = c + 1 WHERE id = 14")
            changes += cur.rowcount
        if r == 12:  # the deleted keys come back, their counters go on from 1000
            cur.execute(
                f"INSERT INTO t (id, c, v) SELECT seq, 1000, 'back' FROM seq_1_to_{KEYS} "
                "WHERE seq % 10 = 3 AND seq <> 13"
            )
            changes += cur.rowcount
        cur.execute("COMMIT")
    return changes


@pytest.mark.timeout(300)
def test_a_backlog_in_32_partitions_is_read_in_parallel_and_each_keys_last_change_wins(
    stack, tmp_path, unique_name, monkeypatch
):
    db = f"parts_{unique_name}"
    conn = root_connection(stack)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"USE {db}")
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, c INT NOT NULL, v VARCHAR(40))")
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=PARTITIONS)
    # batch_reads spark: Spark's tasks read each batch, as on a cluster (in local mode the
    # driver reads it by default); the driver's read of the same batches is compared with
    # Spark's in test_kafka_source.py
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path, batch_reads="spark")
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("CDC_MERGER_PROGRESS_LOG", str(progress))
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(stack, tmp_path)
    store = StateStore(tmp_path / "state")
    try:

        def streaming():
            t = ((store.read_status() or {}).get("tables") or {}).get(f"{db}.t") or {}
            return t.get("phase") == "streaming" and t.get("snapshot") == "finished"

        wait_for(streaming, f"{db}.t streaming", 90, proc=merger)
        # the keys, streamed: the merger learns the topic's record size (a topic new to the
        # admission is read a few records a batch)
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO t SELECT seq, 0, 'new' FROM seq_1_to_{KEYS}")
        checker.wait_equal(db, "t", timeout_s=60, proc=merger)
        merger.stop()
        started = merger.log_text()

        with conn.cursor() as cur:
            changes = _backlog(cur, random.Random(4))
        wait_caught_up(stack, unique_name, timeout_s=60, proc=ingest)

        merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
        t0 = time.monotonic()
        checker.wait_equal(db, "t", timeout_s=90, proc=merger)
        took = time.monotonic() - t0
        reads = [tuple(map(int, m.groups())) for m in READ_LINE.finditer(merger.log_text()[len(started) :])]
        print(f"{changes} changes in {PARTITIONS} partitions caught up in {took:.1f}s; batch, records, tasks: {reads}")
        assert any(tasks > 1 for _, _, tasks in reads), (
            f"no micro-batch of the backlog ({changes} changes in {PARTITIONS} partitions) was read by more "
            f"than one Spark task; merger log:\n{merger.log_text()[-3000:]}"
        )
        with conn.cursor() as cur:  # the counters a wrong order would have lost
            cur.execute("SELECT COUNT(*), SUM(c), MAX(c) FROM t")
            rows, total, highest = cur.fetchone()
        assert rows == KEYS - 1 and highest >= 1000 + ROUNDS - 12, (rows, total, highest)
    finally:
        checker.close()
        merger.stop()
        ingest.stop()
        conn.close()
