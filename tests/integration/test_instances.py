"""Two ingest processes for one topic_prefix (a second one started by mistake): exactly one
keeps writing, the other exits with one clear line, and every change is in the topics once.

* the same identity (same state_name): the newer one fences the older one's producers
  (Kafka's zombie fencing) and the older one stops, instead of fencing back for ever;
* another state_name: the second sees the first one's lease on ``<prefix>.offsets`` and
  stops, naming it.

Counted by position (``tests.kafka_util.read_records``): the local broker shows the aborted
transaction of the fenced instance, which consumers drop as a replay by its position.
Real MariaDB and broker, ingest as processes."""

from __future__ import annotations

import threading
import time

import pymysql
import pytest

from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.kafka_util import read_records, rebuild

pytestmark = pytest.mark.integration

ROWS = 300


def _insert_slowly(stack, db: str, first: int, count: int, done: threading.Event) -> None:
    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )
    try:
        with conn.cursor() as cur:
            for i in range(first, first + count):
                cur.execute("INSERT INTO t VALUES (%s, %s)", (i, i))
                time.sleep(0.02)
    finally:
        conn.close()
        done.set()


def _every_change_once(stack, prefix: str, db: str) -> None:
    records, _ = read_records(stack.kafka.bootstrap, [f"{prefix}.{db}.t"])
    creates = [r for r in records if r.value is not None and r.payload["op"] == "c"]
    assert sorted(r.key_payload["id"] for r in creates) == list(range(ROWS)), "a change missing or doubled"
    assert set(rebuild(records, ["id"])) == {(i,) for i in range(ROWS)}


def _one_error(proc: IngestProcess) -> str:
    log = proc.log_text()
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert errors and "Traceback" not in log and proc.proc.returncode == 2, log[-3000:]
    return errors[0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("second_state_name", [None, "other"], ids=["same_identity", "other_state_name"])
def test_two_ingests_for_one_prefix_one_keeps_writing(stack, mysql_root, unique_name, tmp_path, second_state_name):
    db, prefix = f"two_{unique_name}", unique_name
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    first_cfg = write_config(stack, tmp_path / "first.yaml", prefix, [db], **{"commit_every_ms": 200})
    second_cfg = first_cfg
    if second_state_name:
        second_cfg = write_config(
            stack, tmp_path / "second.yaml", prefix, [db], commit_every_ms=200, state_name=second_state_name
        )
    first = IngestProcess(first_cfg, tmp_path / "first.log").start()
    second = IngestProcess(second_cfg, tmp_path / "second.log")
    try:
        wait_caught_up(stack, prefix, proc=first)
        done = threading.Event()
        writer = threading.Thread(target=_insert_slowly, args=(stack, db, 0, ROWS, done), daemon=True)
        writer.start()
        time.sleep(2)
        second.start()  # in the middle of the workload
        if second_state_name:
            assert second.wait_exit(60), "a second ingest with another state_name kept running"
            error = _one_error(second)
            assert "another ingest is running" in error and f"topic_prefix {prefix}" in error, error
            assert "no state_name" in error and "pid" in error, error  # names the first one
            keeps = first
        else:
            assert first.wait_exit(60), "the fenced ingest did not stop"
            error = _one_error(first)
            assert "another ingest took over" in error and f"topic_prefix {prefix}" in error, error
            keeps = second
        assert done.wait(60)
        wait_caught_up(stack, prefix, proc=keeps)
        assert keeps.alive()
        _every_change_once(stack, prefix, db)
    finally:
        first.stop()
        second.stop()
