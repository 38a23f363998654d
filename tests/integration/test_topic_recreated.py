"""A table topic deleted and created again under a merger's checkpoint (real broker,
MariaDB, ingest and merger): the merger stops with one line instead of reading the new
topic from the old topic's offsets (which skips its first records)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.ingest_harness import IngestProcess, wait_caught_up, write_config
from tests.merger_harness import MergerProcess, SinkChecker, write_merger_config
from tests.source_db import root_connection

pytestmark = pytest.mark.integration


@pytest.mark.timeout(600)
def test_a_topic_created_again_under_the_checkpoint_stops_the_merger(stack, tmp_path, unique_name):
    db = f"tr_{unique_name}"
    conn = root_connection(stack)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v INT)")
    conn.close()
    root = root_connection(stack, db)
    with root.cursor() as cur:
        cur.execute("INSERT INTO t SELECT seq, seq FROM seq_1_to_300")
    icfg = write_config(stack, tmp_path / "ingest.yaml", unique_name, [db, "cdc"], topic_partitions=1)
    ingest = IngestProcess(icfg, tmp_path / "ingest.log").start()
    mcfg = write_merger_config(stack, tmp_path / "merger.yaml", unique_name, [db], tmp_path)
    merger = MergerProcess(mcfg, tmp_path / "merger.log").start()
    checker = SinkChecker(stack, tmp_path)
    topic = f"{unique_name}.{db}.t"
    try:
        checker.wait_equal(db, "t", proc=merger)
        with root.cursor() as cur:  # the topic's offsets move well past what the new topic will hold
            for i in range(1, 41):
                cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (i,))
        wait_caught_up(stack, unique_name, proc=ingest)
        checker.wait_equal(db, "t", proc=merger)
        merger.stop()
        ingest.stop()
        admin = AdminClient({"bootstrap.servers": stack.kafka.bootstrap})
        for f in admin.delete_topics([topic]).values():
            f.result(30)
        deadline = time.monotonic() + 30
        while topic in admin.list_topics(timeout=10).topics:
            assert time.monotonic() < deadline, "the topic was not deleted"
            time.sleep(0.5)
        for f in admin.create_topics([NewTopic(topic, 1)]).values():
            f.result(30)
        with root.cursor() as cur:  # new changes go to the new topic, from offset 0
            cur.execute("UPDATE t SET v = -v WHERE id <= 5")
        ingest = IngestProcess(icfg, tmp_path / "ingest2.log").start()
        wait_caught_up(stack, unique_name, proc=ingest)
        merger = MergerProcess(mcfg, tmp_path / "merger2.log").start()
        assert merger.wait_exit(240), "the merger went on reading the new topic from the old offsets"
        assert merger.proc.returncode != 0
        log = merger.log_text()
        assert f"topic {topic} was deleted and created again" in log, log[-3000:]
        assert "Traceback" not in log.split("was deleted and created again")[-1], log[-3000:]
    finally:
        root.close()
        merger.stop()
        ingest.stop()
        checker.close()
