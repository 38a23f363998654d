"""Binlog positions that go backwards (RESET MASTER, failover to another server): ingest
stops with a clear error and the way out, never writes changes that consumers would drop
as replays. The end-to-end test runs on a private MariaDB (RESET MASTER would disturb
every other test on the shared one) with the shared broker."""

from __future__ import annotations

import dataclasses

import pymysql
import pytest

from cdc import stack as local_stack
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.kafka_util import read_records, rebuild


@pytest.fixture
def private_stack(stack, tmp_path):
    """Its own MariaDB, the shared broker."""
    own = local_stack.up(tmp_path / "own", components=("mariadb",))
    yield dataclasses.replace(own, kafka=stack.kafka)
    local_stack.down(tmp_path / "own", components=("mariadb",))


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_reset_master_stops_ingest_with_the_way_out(private_stack, unique_name, tmp_path):
    st = private_stack
    conn = pymysql.connect(
        ssl_disabled=True,
        host=st.mariadb.host,
        port=st.mariadb.port,
        user="root",
        password=st.mariadb.root_password,
        autocommit=True,
    )
    db = f"rm_{unique_name}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    cfg = write_config(st, tmp_path / "ingest.yaml", unique_name, [db])
    proc = IngestProcess(cfg, tmp_path / "ingest.log").start()
    try:
        wait_caught_up(st, unique_name, proc=proc)
        with conn.cursor() as cur:
            for i in range(20):
                cur.execute(f"INSERT INTO {db}.t VALUES (%s, %s)", (i, i))
                cur.execute("FLUSH BINARY LOGS") if i % 8 == 0 else None
        wait_caught_up(st, unique_name, proc=proc)
        proc.stop()

        # stopped during the RESET MASTER: refuses to start
        with conn.cursor() as cur:
            cur.execute("RESET MASTER")
            cur.execute(f"INSERT INTO {db}.t VALUES (100, 100)")
        proc = IngestProcess(cfg, tmp_path / "ingest2.log").start()
        assert proc.wait_exit(), "ingest started on a binlog that went backwards"
        log = proc.log_text()
        assert "error: " in log and "behind" in log and "new topic_prefix" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]

        # the documented way out: a new topic_prefix, start.mode current, re-snapshot
        cfg2 = write_config(st, tmp_path / "ingest2.yaml", unique_name + "b", [db])
        proc = IngestProcess(cfg2, tmp_path / "ingest3.log").start()
        wait_caught_up(st, unique_name + "b", proc=proc)
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {db}.t VALUES (101, 101)")
        wait_caught_up(st, unique_name + "b", proc=proc)

        # running during a RESET MASTER: stops too (the server no longer has its position)
        with conn.cursor() as cur:
            cur.execute("RESET MASTER")
            cur.execute(f"INSERT INTO {db}.t VALUES (102, 102)")
        assert proc.wait_exit(), "ingest went on after RESET MASTER"
        log = proc.log_text()
        assert "error: " in log and "Traceback" not in log, log[-3000:]
        records, _ = read_records(st.kafka.bootstrap, [f"{unique_name}b.{db}.t"])
        assert (102,) not in rebuild(records, ["id"])  # nothing written past the reset
    finally:
        proc.stop()
        conn.close()
