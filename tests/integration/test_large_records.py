"""Rows larger than Kafka's usual 1 MB: written whole when the broker takes them; a record
over the limit stops ingest with one clear error (table, key, size, the setting), and
ingest resumes at that very change once the limit is raised. Real MariaDB and broker."""

from __future__ import annotations

import pymysql
import pytest

from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.kafka_util import read_records, rebuild

pytestmark = pytest.mark.integration


@pytest.mark.timeout(400)
def test_oversized_row_stops_with_a_clear_error_then_resumes(stack, mysql_root, unique_name, tmp_path):
    db = f"big_{unique_name}"
    with mysql_root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.doc (id INT PRIMARY KEY, body LONGTEXT)")
        cur.execute(f"CREATE TABLE {db}.other (id INT PRIMARY KEY, v INT)")
    conn = pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )
    big = "x" * 3_000_000
    cfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db])
    proc = IngestProcess(cfg, tmp_path / "ingest.log").start()
    try:
        # 1. the broker takes it (the local broker has no limit): it arrives whole
        wait_caught_up(stack, unique_name, proc=proc)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO doc VALUES (1, %s)", (big,))
            cur.execute("INSERT INTO other VALUES (1, 1)")
        wait_caught_up(stack, unique_name, proc=proc)
        records, _ = read_records(stack.kafka.bootstrap, [f"{unique_name}.{db}.doc"])
        assert rebuild(records, ["id"])[(1,)]["body"] == big
        proc.stop()

        # 2. over the configured limit: one clear error, no endless retry, nothing after it written
        cfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db], **{"kafka.max_message_bytes": 1_000_000})
        proc = IngestProcess(cfg, tmp_path / "ingest2.log").start()
        wait_caught_up(stack, unique_name, proc=proc)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO other VALUES (2, 2)")
            cur.execute("UPDATE doc SET body = CONCAT(body, 'y') WHERE id = 1")
            cur.execute("INSERT INTO other VALUES (3, 3)")
        proc.wait_exit()
        assert not proc.alive(), "ingest kept running past a record it cannot write"
        log = proc.log_text()
        error = [line for line in log.splitlines() if line.startswith("error: ")]
        assert error, log[-3000:]
        assert f"{db}.doc" in error[0] and '"id":1' in error[0] and "kafka.max_message_bytes" in error[0], error
        assert "bytes" in error[0] and "Traceback" not in log, log[-3000:]
        assert proc.proc.returncode == 2
        other, _ = read_records(stack.kafka.bootstrap, [f"{unique_name}.{db}.other"])
        assert set(rebuild(other, ["id"])) == {(1,), (2,)}  # the change after the big one waits

        # 3. the limit raised: ingest resumes at that change, nothing lost
        cfg = write_config(
            stack, tmp_path / "ingest.yaml", unique_name, [db], **{"kafka.max_message_bytes": 20_000_000}
        )
        proc = IngestProcess(cfg, tmp_path / "ingest3.log").start()
        wait_caught_up(stack, unique_name, proc=proc)
        records, _ = read_records(stack.kafka.bootstrap, [f"{unique_name}.{db}.doc", f"{unique_name}.{db}.other"])
        docs = rebuild([r for r in records if r.topic.endswith(".doc")], ["id"])
        assert docs[(1,)]["body"] == big + "y"
        assert set(rebuild([r for r in records if r.topic.endswith(".other")], ["id"])) == {(1,), (2,), (3,)}
    finally:
        proc.stop()
        conn.close()
