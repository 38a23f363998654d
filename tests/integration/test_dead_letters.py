"""What happens to records and sink tables the merger cannot use (issue: dead letters acknowledged, and
the default ``on_bad_record: pause`` really pauses), on the real broker, MariaDB,
Delta and PostgreSQL:

* a record that cannot be parsed on a table's topic pauses that table (the record goes
  to ``<prefix>.dlq``, the table's later changes are kept), the other tables keep
  flowing, and ``cdc resume`` brings the table back equal to the source;
* changes of a table the merger's user may not read stop the merger with the GRANT to
  run, instead of going to the dead-letter topic as if the table were gone;
* a dead-letter record the broker does not acknowledge fails the batch.
"""

from __future__ import annotations

import pytest
import yaml
from confluent_kafka import Producer

from tests.cli_util import merger_status, run_cli, wait_for
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.kafka_util import read_records
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config
from tests.source_db import root_connection

pytestmark = pytest.mark.integration


def _setup(stack, db: str, tables: list[str], rows: int = 200) -> None:
    conn = root_connection(stack)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"USE {db}")
        for t in tables:
            cur.execute(f"CREATE TABLE {db}.{t} (id INT PRIMARY KEY, v INT, s VARCHAR(20))")
            cur.execute(f"INSERT INTO {db}.{t} SELECT seq, seq, CONCAT('s', seq) FROM seq_1_to_{rows}")
    conn.close()


@pytest.mark.timeout(600)
def test_an_unreadable_record_pauses_its_table_and_resume_brings_it_back(stack, unique_name, pipeline):
    db = pipeline.database(f"dl_{unique_name}")
    _setup(stack, db, ["good", "hit"])
    merger, mcfg, prefix = pipeline.merger, pipeline.merger_config, pipeline.prefix  # on_bad_record: pause
    checker = SinkChecker(stack, pipeline.work)
    root = root_connection(stack, db)
    topic = f"{prefix}.{db}.hit"
    try:
        for t in ("good", "hit"):
            checker.wait_equal(db, t, proc=merger)
        producer = Producer({"bootstrap.servers": stack.kafka.bootstrap})
        producer.produce(topic, key=b'{"id":1}', value=b"this is { not JSON", partition=0)
        assert producer.flush(30) == 0
        with root.cursor() as cur:
            cur.execute("UPDATE hit SET v = -v WHERE id % 3 = 0")
            cur.execute("DELETE FROM hit WHERE id % 7 = 0")
            cur.execute("UPDATE good SET v = -v WHERE id % 4 = 0")
        wait_caught_up(stack, prefix, proc=pipeline.ingest)
        # the other table flows on; the hit table pauses with the record's place and what to do
        checker.wait_equal(db, "good", proc=merger)
        table = wait_for(
            lambda: (t := merger_status(mcfg)["tables"].get(f"{db}.hit", {})).get("phase") == "paused" and t,
            "the table with the bad record to pause",
            120,
            merger,
        )
        assert f"topic {topic} partition 0" in table["error"] and "cdc resume" in table["error"], table
        dlq, _ = read_records(stack.kafka.bootstrap, [f"{prefix}.dlq"], idle_s=2, dedup=False)
        dlq = [r for r in dlq if r.headers["cdc.dlq.topic"].decode() == topic]  # the topic is the pipeline's
        assert [r.value for r in dlq] == [b"this is { not JSON"]
        # its changes after the record were kept, not lost: resume applies them
        res = run_cli("resume", f"{db}.hit", "-c", str(mcfg))
        assert res.returncode == 0, res.stderr
        checker.wait_equal(db, "hit", proc=merger)
        wait_for(
            lambda: merger_status(mcfg)["tables"].get(f"{db}.hit", {}).get("phase") == "streaming",
            "the table streaming again",
            120,
            merger,
        )
    finally:
        root.close()
        checker.close()


@pytest.mark.timeout(600)
def test_changes_of_a_table_the_merger_may_not_read_stop_it_with_the_grant(stack, tmp_path, unique_name, monkeypatch):
    db = f"dg_{unique_name}"
    _setup(stack, db, ["open_t", "secret"])
    user, password = f"m_{unique_name}"[:32], "pw-merger"
    conn = root_connection(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
        cur.execute(f"GRANT SELECT ON {db}.open_t TO '{user}'@'%'")
        cur.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON cdc.* TO '{user}'@'%'")
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"])
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path)
    cfg = yaml.safe_load(mcfg.read_text())
    cfg["mysql"].pop("password_file")
    cfg["mysql"].update(user=user, password_env="CDC_TEST_MERGER_PW")
    mcfg.write_text(yaml.safe_dump(cfg))
    checker = SinkChecker(stack, tmp_path)
    monkeypatch.setenv("CDC_TEST_MERGER_PW", password)
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    try:
        checker.wait_equal(db, "open_t", proc=merger)
        with conn.cursor() as cur:
            cur.execute(f"UPDATE {db}.secret SET v = -v WHERE id <= 10")
            cur.execute(f"UPDATE {db}.open_t SET v = -v WHERE id <= 10")
        wait_caught_up(stack, unique_name, proc=ingest)
        assert merger.wait_exit(180), "the merger went on without the table it may not read"
        assert merger.proc.returncode != 0
        log = merger.log_text()
        line = [ln for ln in log.splitlines() if "GRANT SELECT ON" in ln]
        assert line and f"`{db}`.`secret`" in line[-1], log[-3000:]
        dlq, _ = read_records(stack.kafka.bootstrap, [f"{unique_name}.dlq"], idle_s=2, timeout_s=30, dedup=False)
        assert not dlq, [r.value for r in dlq]
    finally:
        merger.stop()
        ingest.stop()
        checker.close()
        with conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        conn.close()


def test_a_dead_letter_the_broker_does_not_acknowledge_fails_the_batch():
    """No broker at the address: the write is not confirmed within its timeout, and the
    writer raises (the batch fails) instead of going on as if the record were kept."""
    from cdc.config import MergerConfig
    from merger.app import Merger
    from merger.errors import MergerError

    write = Merger(MergerConfig())._dead_letter_writer(
        {"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 3000, "socket.connection.setup.timeout.ms": 1000}
    )
    record = {"topic": "p.db.t", "partition": 0, "offset": 7, "key": b"k", "value": b"v", "headers": []}
    with pytest.raises(MergerError, match=r"offset 7 to the dead-letter topic .*\.dlq"):
        write(record, "not JSON")


@pytest.mark.timeout(600)
def test_a_postgres_sink_table_altered_then_dropped_by_a_user_pauses_only_that_table(stack, unique_name, pipeline):
    """A user drops a column of one PostgreSQL sink table: that table pauses with the
    reason (the other one flows on, the merger keeps running); the user then drops the
    table and `cdc resume` creates it again and snapshots it."""
    import psycopg

    db = pipeline.database(f"dp_{unique_name}")
    _setup(stack, db, ["mine", "theirs"])
    merger, mcfg = pipeline.merger, pipeline.merger_config
    checker = SinkChecker(stack, pipeline.work)
    root = root_connection(stack, db)
    pg = psycopg.connect(
        host=stack.postgres.host,
        port=stack.postgres.port,
        user=stack.postgres.user,
        password=stack.postgres.password,
        dbname=stack.postgres.database,
        autocommit=True,
    )
    try:
        for t in ("mine", "theirs"):
            checker.wait_equal(db, t, proc=merger)
        pg.execute(f'ALTER TABLE "{db}"."theirs" DROP COLUMN s')
        with root.cursor() as cur:
            cur.execute("UPDATE theirs SET s = 'changed', v = -v WHERE id % 3 = 0")
            cur.execute("UPDATE mine SET s = 'changed', v = -v WHERE id % 3 = 0")
        wait_caught_up(stack, pipeline.prefix, proc=pipeline.ingest)
        checker.wait_equal(db, "mine", proc=merger)
        table = wait_for(
            lambda: (t := merger_status(mcfg)["tables"].get(f"{db}.theirs", {})).get("phase") == "paused" and t,
            "the altered table to pause",
            120,
            merger,
        )
        assert "refuses the merger's write" in table["error"] and "cdc resume" in table["error"], table
        with root.cursor() as cur:  # the other table still streams
            cur.execute("DELETE FROM mine WHERE id % 5 = 0")
        checker.wait_equal(db, "mine", proc=merger)
        pg.execute(f'DROP TABLE "{db}"."theirs"')
        res = run_cli("resume", f"{db}.theirs", "-c", str(mcfg))
        assert res.returncode == 0, res.stderr
        checker.wait_equal(db, "theirs", proc=merger, timeout_s=180)
        assert merger.alive()
    finally:
        pg.close()
        root.close()
        checker.close()
