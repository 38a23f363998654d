"""Bad input on a real pipeline (MariaDB, ingest, the broker, the merger, Delta, PostgreSQL).

One ingest + merger run covers:

* malformed records on a table topic (not JSON, JSON without op, an op without its image,
  an image that cannot be decoded for the table's types) go to ``<prefix>.dlq`` with the
  reason in headers, are counted (``cdc status`` and the Prometheus metric), and the
  table keeps flowing: the sinks still equal the source;
* a schema change the sinks cannot follow (BIGINT -> INT) pauses that table with the
  reason in ``cdc status`` while the other tables keep flowing; the changes of the paused
  table are kept on disk. Path A: the operator changes the sink tables, ``cdc resume``
  applies the kept changes. Path B: ``cdc snapshot`` rebuilds the sink tables. Both end
  equal to the source.

Then a second merger with ``on_bad_record: stop`` reads the same topics and stops with one
line naming the topic, partition and offset of the first bad record.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pymysql
import pytest
import yaml
from confluent_kafka import Producer

from tests.conftest import IS_CI
from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.kafka_util import read_records
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config
from tests.support import readback
from tests.unit.test_bad_input import _cli


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conn(stack, db=None):
    return pymysql.connect(
        ssl_disabled=True,
        host=stack.mariadb.host,
        port=stack.mariadb.port,
        user="root",
        password=stack.mariadb.root_password,
        database=db,
        autocommit=True,
    )


def _status(config: Path) -> dict:
    res = _cli("status", "--json", "-c", str(config))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _wait(predicate, what: str, timeout_s: float, proc=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise AssertionError(f"process exited while waiting for {what}:\n{proc.log_text()[-4000:]}")
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{proc.log_text()[-3000:]}" if proc else ""))


def _bad_records(db: str) -> list[tuple[bytes, str]]:
    """(value, what is wrong with it)"""
    undecodable = {
        "op": "c",
        "after": {"id": "not-a-number", "v": "x", "n": 1},
        "before": None,
        "source": {"db": db, "table": "good", "ts_ms": 0},
    }
    return [
        (b"this is { not JSON", "not JSON"),
        (json.dumps({"after": {"id": 1}}).encode(), "unknown op"),
        (json.dumps({"op": "u", "after": None, "source": {"db": db, "table": "good"}}).encode(), "without an image"),
        (json.dumps(undecodable).encode(), "cannot decode"),
    ]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_dead_letters_and_incompatible_ddl_pause_resume_snapshot(stack, tmp_path, unique_name):
    db = f"bad_{unique_name}"
    rows = 2_000 if IS_CI else 20_000
    root = _conn(stack)
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"USE {db}")
        cur.execute("CREATE TABLE good (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT)")
        cur.execute(f"INSERT INTO good SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_{rows}")
        for t in ("narrow_a", "narrow_b"):
            cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, b BIGINT, s VARCHAR(10))")
            cur.execute(f"INSERT INTO {t} SELECT seq, seq * 3, 's' FROM seq_1_to_{rows}")
    metrics_port = _free_port()
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=2)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    mcfg = write_merger_config(
        stack,
        tmp_path / "merger.yaml",
        unique_name,
        [db],
        tmp_path,
        metrics_port=metrics_port,
        on_bad_record="dead_letter",
    )  # the default pauses
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(stack, tmp_path)
    topic = f"{unique_name}.{db}.good"
    try:
        for t in ("good", "narrow_a", "narrow_b"):
            checker.wait_equal(db, t, proc=merger)

        # ---- malformed records on a table topic go to the dead-letter topic
        producer = Producer({"bootstrap.servers": stack.kafka.bootstrap})
        bad = _bad_records(db)
        for value, _ in bad:
            producer.produce(topic, value=value, key=b'{"id":1}', partition=0)
        assert producer.flush(30) == 0
        with root.cursor() as cur:
            cur.execute(f"UPDATE {db}.good SET v = 'after bad' WHERE id % 10 = 0")
            cur.execute(f"DELETE FROM {db}.good WHERE id % 17 = 0")
            cur.execute(f"INSERT INTO {db}.good VALUES ({rows + 1}, 'new', 1)")
        checker.wait_equal(db, "good", proc=merger)

        def dead_letters():
            recs, _ = read_records(stack.kafka.bootstrap, [f"{unique_name}.dlq"], idle_s=2, dedup=False)
            return recs if len(recs) >= len(bad) else None

        dlq = _wait(dead_letters, "the dead-letter records", 120, merger)
        assert len(dlq) == len(bad), [r.value for r in dlq]
        for rec, (value, why) in zip(sorted(dlq, key=lambda r: int(r.headers["cdc.dlq.offset"])), bad):
            assert rec.value == value
            assert rec.headers["cdc.dlq.topic"].decode() == topic
            assert rec.headers["cdc.dlq.partition"] == b"0"
            assert why in rec.headers["cdc.dlq.reason"].decode(), rec.headers["cdc.dlq.reason"]
        assert _status(mcfg)["bad_records"] == len(bad)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert f"cdc_merger_bad_records {float(len(bad))}" in metrics

        # ---- a narrowing type change: the sink tables are rebuilt and snapshotted again (a
        # DDL marker, merger/schema/change.py); the other tables keep flowing meanwhile
        with root.cursor() as cur:
            for t in ("narrow_a", "narrow_b"):
                cur.execute(f"ALTER TABLE {db}.{t} MODIFY b INT")
                cur.execute(f"UPDATE {db}.{t} SET b = -b WHERE id % 5 = 0")
                cur.execute(f"DELETE FROM {db}.{t} WHERE id % 13 = 0")
                cur.execute(f"INSERT INTO {db}.{t} VALUES ({rows + 1}, 1, 'narrowed')")
            cur.execute(f"UPDATE {db}.good SET n = -n WHERE id % 3 = 0")
        wait_caught_up(stack, unique_name, proc=ingest)
        for t in ("good", "narrow_a", "narrow_b"):
            checker.wait_equal(db, t, proc=merger)
        with root.cursor() as cur:  # and they stream on
            for t in ("narrow_a", "narrow_b"):
                cur.execute(f"UPDATE {db}.{t} SET b = b + 1 WHERE id % 11 = 0")
        for t in ("narrow_a", "narrow_b", "good"):
            checker.wait_equal(db, t, proc=merger)
        # the status file is written after a batch: the phase may lag the rows by one batch
        _wait(
            lambda: (
                {_status(mcfg)["tables"].get(f"{db}.{t}", {}).get("phase") for t in ("narrow_a", "narrow_b", "good")}
                == {"streaming"}
            ),
            "the three tables to be streaming",
            120,
            merger,
        )
    finally:
        merger.stop()
        ingest.stop()
        checker.close()

    # ---- on_bad_record: stop -> one line naming topic, partition and offset
    stop_cfg = yaml.safe_load(mcfg.read_text())
    stop_cfg.update(on_bad_record="stop", state_dir=str(tmp_path / "state-stop"), metrics_port=0)
    stop_cfg["sinks"] = {"delta": {"path": str(tmp_path / "delta-stop")}}
    stop_cfg["snapshot"]["auto_new_tables"] = False
    stop_path = tmp_path / "merger-stop.yaml"
    stop_path.write_text(yaml.safe_dump(stop_cfg))
    res = _cli("merge", "-c", str(stop_path), timeout=600)
    assert res.returncode == 2, res.stderr[-3000:]
    last = [line for line in res.stderr.splitlines() if line.strip()][-1]
    first_offset = min(int(r.headers["cdc.dlq.offset"]) for r in dlq)
    assert last.startswith("error: bad record in topic "), res.stderr[-3000:]
    assert f"topic {topic} partition 0 offset {first_offset}" in last, last
    assert "not JSON" in last and "on_bad_record" in last, last
    # a user's bad record is one line, not a Python traceback nor Spark's Java stack trace
    assert "Traceback" not in res.stderr and "\tat org.apache" not in res.stderr, res.stderr[-3000:]
    root.close()


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["delta", "postgres", "kafka"])
def test_drop_table_lets_a_sink_start_the_table_anew(kind, stack, tmp_path, unique_name):
    """What `cdc snapshot` of a paused table relies on: after ``drop_table`` the sink
    creates the table with the new (narrower) schema, empty, with fresh versions."""
    from merger.sinks.base import IncompatibleSchemaChange, TableId

    if kind == "delta":
        from merger.sinks.delta import DeltaSink

        sink = DeltaSink(str(tmp_path / "delta"))
    elif kind == "postgres":
        from merger.sinks.postgres import PostgresSink

        sink = PostgresSink(
            {
                "host": stack.postgres.host,
                "port": stack.postgres.port,
                "user": stack.postgres.user,
                "password": stack.postgres.password,
                "dbname": stack.postgres.database,
            }
        )
    else:
        from merger.sinks.kafka_changelog import KafkaChangelogSink

        sink = KafkaChangelogSink(stack.kafka.bootstrap, f"drop{unique_name}", partitions=2)
    table = TableId(f"drop_{unique_name}", "t")
    wide = pa.schema([pa.field("id", pa.int32(), False), pa.field("b", pa.int64())])
    narrow = pa.schema([pa.field("id", pa.int32(), False), pa.field("b", pa.int32())])

    def changes(schema, ids, seq):
        return pa.table(
            {
                "id": pa.array(ids, pa.int32()),
                "b": pa.array([i * 10 for i in ids], schema.field("b").type),
                "_cdc_op": ["c"] * len(ids),
                "_cdc_seq": pa.array([seq] * len(ids), pa.int64()),
            }
        )

    try:
        assert sink.ensure_table(table, wide, ["id"]) == ["created"]
        assert sink.apply(table, 5, changes(wide, [1, 2, 3], 100))
        with pytest.raises(IncompatibleSchemaChange):
            sink.ensure_table(table, narrow, ["id"])
        sink.drop_table(table)
        sink.drop_table(TableId(f"drop_{unique_name}", "never_created"))  # no-op
        assert sink.ensure_table(table, narrow, ["id"]) == ["created"]
        assert readback.rows(sink, table).num_rows == 0
        assert sink.apply(table, 1, changes(narrow, [2, 4], 50))  # fresh versions and sequences
        rows = readback.rows(sink, table)
        assert sorted(rows.column("id").to_pylist()) == [2, 4]
        assert rows.schema.field("b").type == pa.int32()
    finally:
        if kind != "kafka":
            sink.drop_table(table)
        sink.close()
